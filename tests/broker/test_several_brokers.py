"""One client of two real brokers on loopback sharing one state store (and the session's Spark):
the first stops while a query runs on it, the query and the ones after it are answered by the
second, and no answer is older than one the client was already served, even from a second broker
that is behind (started after a server came back with less progress, without the persisted floor,
so only the client's session token holds it)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from horizon_broker._core.errors import DeadlineExceeded
from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.client import connect
from horizon_broker.watermark import tokens
from tests.broker.conftest import ADMIN, BrokerEnv, broker_config, publish_table
from tests.broker.data import UpsertTable
from tests.waiting import eventually


@pytest.fixture
def table(broker_env: BrokerEnv) -> UpsertTable:
    made = UpsertTable("several_brokers", broker_env.root)
    publish_table(broker_env, made.desc, made.segments)
    return made


@pytest.fixture
def started(broker_env: BrokerEnv) -> Iterator[list[BrokerServer]]:
    brokers: list[BrokerServer] = []
    yield brokers
    for broker in brokers:
        broker.stop(0)
        broker.follower.stop()


def _start(env: BrokerEnv, spark, started, name: str, **sections: dict) -> BrokerServer:  # type: ignore[no-untyped-def]
    config = broker_config(env.redis.url, **sections)
    broker = BrokerServer(config, spark=spark, view_namespace=name).start()  # type: ignore[arg-type]
    started.append(broker)
    return broker


def _report(env: BrokerEnv, table: UpsertTable, p0: int) -> None:
    env.server_client.report(table.name, {0: (p0, p0), 1: (10**6, 10**6)})


def test_a_query_running_on_a_broker_that_stops_is_answered_by_the_next_and_never_goes_back(
    broker_env, spark, table, started
):
    sql = f"SELECT count(*) AS n FROM {table.name}"
    first = _start(broker_env, spark, started, "first_")
    _report(broker_env, table, 2000)
    assert first.follower.wait_for(lambda f: f.view(table.name).lwm == 2000, 10)
    # A server comes back with less progress: the first broker holds 2000, a broker started
    # now computes 1800 and (no persisted floor) knows nothing of what the first served.
    _report(broker_env, table, 1800)
    assert first.follower.wait_for(lambda f: f.watermarks(table.name).computed == 1800, 10)
    second = _start(broker_env, spark, started, "second_", reads={"persist_floor": False})
    assert second.follower.view(table.name).lwm == 1800
    pool = ThreadPoolExecutor(1)
    with pool, connect([first.target, second.target], token=ADMIN) as horizon:
        assert horizon.execute(sql).snapshot == 2000
        waiting = horizon.start_query(sql, min_snapshot=tokens.encode({table.name: 2100}))
        answer = pool.submit(waiting.result)
        with connect(first.target, token=ADMIN) as watcher:
            eventually(lambda: watcher.queries(running_only=True), "the query running on first")
        first.stop(0)  # the query running on it ends UNAVAILABLE
        # The client is served 2000: the second broker (at 1800) must not answer below it.
        with pytest.raises(DeadlineExceeded, match="2000"):
            horizon.execute(sql, timeout=1.5)
        assert horizon.current == second.target
        _report(broker_env, table, 2100)
        assert answer.result().snapshot == 2100  # run again, whole, on the second broker
        assert waiting.address == second.target
        assert horizon.execute(sql).snapshot == 2100
