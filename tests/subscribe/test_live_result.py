"""The Python client's LiveResult through a real broker: after every step of ``follow`` its
table (and DataFrame) is the query's answer at its snapshot, by key or as a multiset; with
``reconnects`` it outlives a broker restart, resuming from its token, losing and repeating
nothing."""

from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Iterator

import pytest

from horizon_broker.broker.api.server import BrokerServer
from tests.subscribe.harness import STEPS, Env, answer, oracle, rows_of, subscribe_env

pytestmark = [pytest.mark.spark, pytest.mark.redis]

WAIT_S = 60.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def env(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("live")
    with subscribe_env(spark, root, listen=f"127.0.0.1:{free_port()}") as env:
        yield env


def test_after_every_step_the_table_is_the_query_answer_at_its_snapshot(env: Env) -> None:
    table = env.table()
    sql = f"SELECT id, owner, balance FROM {table}"
    with env.client() as client:
        follow = client.follow(sql, max_rows_per_message=2, timeout=WAIT_S)
        live = next(follow)
        assert (live.snapshot, live.key, live.steps) == (1000, ("id",), 1)
        assert rows_of(live.table) == answer(client, sql, 1000) == oracle(env.rows[table], 1000)
        for number, lwm in enumerate(STEPS, start=2):
            env.move(table, lwm)
            assert next(follow) is live
            assert (live.snapshot, live.steps) == (lwm, number)
            assert rows_of(live.table) == answer(client, sql, lwm) == oracle(env.rows[table], lwm)
            frame = live.to_pandas()
            assert sorted(map(tuple, frame.itertuples(index=False))) == sorted(
                rows_of(live.table).elements()
            )
            assert live.token.startswith("hzs1.") and live.token == live.resume_token
            assert live.changes is not None and live.changes.column_names[0] == "_change_type"
        follow.close()


def test_a_result_without_its_key_is_kept_as_a_multiset(env: Env) -> None:
    table = env.table()
    sql = f"SELECT balance FROM {table}"  # every step changes the multiset
    with env.client() as client:
        follow = client.follow(sql, timeout=WAIT_S)
        live = next(follow)
        assert live.key == ()
        assert rows_of(live.table) == answer(client, sql, 1000)
        for lwm in STEPS:
            env.move(table, lwm)
            next(follow)
            assert live.snapshot == lwm
            assert rows_of(live.table) == answer(client, sql, lwm)
        follow.close()


def test_with_reconnects_it_resumes_across_a_broker_restart_losing_and_repeating_nothing(
    env: Env,
    spark,  # type: ignore[no-untyped-def]
) -> None:
    """Last in the module: it stops the module's broker and starts another on its address."""
    table = env.table()
    sql = f"SELECT id, owner, balance FROM {table}"
    steps: queue.Queue[tuple[int | None, int, object]] = queue.Queue()
    client = env.client()

    def read() -> None:
        try:
            previous = None
            for live in client.follow(sql, reconnects=30, timeout=WAIT_S * 3):
                steps.put((previous, live.snapshot, rows_of(live.table)))
                previous = live.snapshot
        except BaseException as error:  # handed to the test
            steps.put((None, -1, error))

    threading.Thread(target=read, daemon=True).start()
    try:
        assert steps.get(timeout=WAIT_S)[:2] == (None, 1000)
        env.move(table, 2000)
        assert steps.get(timeout=WAIT_S)[:2] == (1000, 2000)
        config = env.broker.config
        env.broker.stop(5.0)
        env.broker = BrokerServer(config, spark=spark).start()
        env.move(table, 3000)
        before, after, rows = steps.get(timeout=WAIT_S)
        assert (before, after) == (2000, 3000), rows
        with env.client() as fresh:
            assert rows == answer(fresh, sql, 3000)
        assert steps.empty(), "no step repeated"
    finally:
        client.close()
