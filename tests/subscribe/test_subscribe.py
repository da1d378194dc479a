"""QueryService.Subscribe over real gRPC, Spark and Redis: a standing query's first result and
deltas, checked against ExecuteQuery at each delta's snapshot.

One broker for the module. Each test has a table of its own whose whole history is written up
front (rows with validFrom / validUntil, as ingestion writes them); the test moves its LWM step by
step, as ingestion commits would, and the broker follows.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from horizon_broker._core.errors import PermissionDenied, ResourceExhausted, Unavailable
from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.broker.subscribe.live import LiveResult, SubscriptionMessage
from horizon_broker.client import HorizonClient, connect
from horizon_broker.timeline.segment import Segment
from tests.broker.data import CHUNK, VERSION, descriptor, version, write_rows
from tests.subscribe.harness import (
    ADMIN,
    LIMIT,
    OTHER,
    STEPS,
    Env,
    answer,
    big_history,
    oracle,
    rows_of,
    subscribe_env,
)
from tests.waiting import eventually

pytestmark = [pytest.mark.spark, pytest.mark.redis]

WAIT_S = 60.0
"""How long a test waits for a message before it fails (a hang, not a timing check)."""


@pytest.fixture(scope="module")
def env(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with subscribe_env(spark, tmp_path_factory.mktemp("subscribe")) as env:
        yield env


class Reader:
    """A subscription read on a thread of its own into a queue (its end: the error or None),
    on a connection of its own (closing it ends the call)."""

    def __init__(self, env: Env, sql: str, *, token: str = ADMIN, **options: object) -> None:
        channel = grpc.insecure_channel(env.broker.target, options=CHANNEL_OPTIONS)
        self.client = HorizonClient(channel, token=token)
        self.messages: queue.Queue[SubscriptionMessage | BaseException | None] = queue.Queue()
        self._stream = self.client.subscribe(sql, **options)  # type: ignore[arg-type]
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for message in self._stream:
                self.messages.put(message)
        except BaseException as error:  # handed to the test
            self.messages.put(error)
        else:
            self.messages.put(None)

    def next(self) -> SubscriptionMessage:
        item = self.messages.get(timeout=WAIT_S)
        if isinstance(item, BaseException):
            raise item
        assert item is not None, "the stream ended"
        return item

    def step(self) -> list[SubscriptionMessage]:
        """The messages of one whole step (up to the one marked last_part)."""
        parts = [self.next()]
        while not parts[-1].last_part:
            parts.append(self.next())
        return parts

    def close(self) -> None:
        self.client.close()


CHANNEL_OPTIONS = [
    ("grpc.http2.bdp_probe", 0),  # the flow-control window stays small: a stalled reader stalls
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
]


def applied(live: LiveResult, parts: list[SubscriptionMessage]) -> Counter:
    for message in parts:
        live.apply(message)
    assert live.table is not None
    return rows_of(live.table)


def shown(parts: list[SubscriptionMessage]) -> list[tuple]:
    """What a step says, whatever order Spark returned rows in."""
    return [
        (m.kind, m.from_snapshot, m.to_snapshot, m.key, sorted(rows_of(m.rows).elements()))
        for m in parts
    ]


def test_first_result_plus_every_delta_is_the_query_answer_at_each_to(env: Env) -> None:
    table = env.table()
    sql = f"SELECT id, owner, balance FROM {table}"
    reader = Reader(env, sql, max_rows_per_message=2)
    try:
        with env.client() as client:
            first = reader.step()
            assert [m.kind for m in first] == ["first_result"] * 3  # 5 rows, 2 a message
            assert {m.strategy for m in first} == {"change_feed"}  # the broker's choice
            assert first[-1].to_snapshot == 1000 and first[-1].key == ("id",)
            live = LiveResult()
            assert (
                applied(live, first) == oracle(env.rows[table], 1000) == answer(client, sql, 1000)
            )
            kinds: Counter = Counter()
            previous = 1000
            for lwm in STEPS:
                env.move(table, lwm)
                parts = reader.step()
                assert {(m.kind, m.from_snapshot, m.to_snapshot) for m in parts} == {
                    ("delta", previous, lwm)
                }
                assert applied(live, parts) == answer(client, sql, lwm)
                assert rows_of(live.table) == oracle(env.rows[table], lwm)
                assert live.snapshot == lwm and live.resume_token
                kinds.update(k for m in parts for k in m.rows.column("_change_type").to_pylist())
                previous = lwm
            assert set(kinds) == {"insert", "delete", "update_before", "update_after"}
    finally:
        reader.close()


def test_a_query_without_the_key_is_a_multiset_diff(env: Env) -> None:
    table = env.table()
    sql = f"SELECT balance FROM {table}"
    reader = Reader(env, sql)
    try:
        with env.client() as client:
            live = LiveResult()
            first = reader.step()
            assert first[-1].key == ()
            assert applied(live, first) == answer(client, sql, 1000)
            for lwm in STEPS[:2]:
                env.move(table, lwm)
                assert applied(live, reader.step()) == answer(client, sql, lwm)
    finally:
        reader.close()


def test_resuming_from_a_token_mid_stream_gives_the_same_remaining_stream(env: Env) -> None:
    table = env.table()
    sql = f"SELECT id, owner, balance FROM {table}"
    stopped, whole = Reader(env, sql), Reader(env, sql)
    resumed = None
    try:
        stopped.step(), whole.step()
        env.move(table, 2000)
        token = stopped.step()[-1].resume_token
        whole.step()
        stopped.close()
        resumed = Reader(env, sql, resume_token=token)
        header = resumed.step()
        assert shown(header) == [("resumed", 0, 2000, (), [])]
        assert header[0].strategy == "change_feed"
        for lwm in STEPS[1:]:
            env.move(table, lwm)
            assert shown(resumed.step()) == shown(whole.step())
    finally:
        for reader in (stopped, whole, resumed):
            if reader is not None:
                reader.close()
    with env.client() as client, pytest.raises(Exception, match="another query"):
        next(iter(client.subscribe(f"SELECT id FROM {table}", resume_token=token)))


def test_compaction_between_two_snapshots_sends_no_delta(env: Env) -> None:
    table = env.table()
    sql = f"SELECT id, owner, balance FROM {table}"
    reader = Reader(env, sql)
    try:
        reader.step()
        env.move(table, 5000)
        assert shown(reader.step())[0][:3] == ("delta", 1000, 5000)
        rows = env.rows[table]
        desc = descriptor(table, storage_root=env.root)
        compacted = Segment(
            table=table,
            interval=CHUNK,
            version=VERSION,
            partition=32_768,
            core_partitions=1,
            root_start=0,
            root_end=1,
            minor_version=1,
            atomic_update_group_size=1,
            location=(write_rows(env.root / table / "compacted.parquet", desc, rows),),
            row_count=len(rows),
        )
        env.server.announce([compacted])
        cache = env.broker.engine.cache
        misses = cache.misses
        env.move(table, 5500)
        eventually(lambda: cache.misses > misses, "the subscription read the compacted snapshot")
        assert shown(reader.step()) == [("progress", 5000, 5500, (), [])], "no change row"
        env.move(table, 6000)
        assert shown(reader.step()) == [
            (
                "delta",
                5500,
                6000,
                ("id",),
                [("update_after", 5, "o5", 51), ("update_before", 5, "o5", 50)],
            )
        ]
        view = env.broker.follower.view(table)
        assert {s.partition for s in view.visible_segments} == {32_768}
    finally:
        reader.close()


def test_a_quiet_step_sends_progress_whose_token_resumes_from_the_new_snapshot(env: Env) -> None:
    table = env.table()
    sql = f"SELECT id, owner, balance FROM {table}"
    reader = Reader(env, sql)
    try:
        reader.step()
        env.move(table, 5000)
        reader.step()
        env.move(table, 5500)  # nothing committed between 5000 and 5500 changes the answer
        (progress,) = reader.step()
        assert (progress.kind, progress.from_snapshot, progress.to_snapshot) == (
            "progress",
            5000,
            5500,
        )
        assert progress.rows.num_rows == 0 and progress.resume_token
    finally:
        reader.close()
    env.move(table, 6000)
    resumed = Reader(env, sql, resume_token=progress.resume_token)
    try:
        assert [m.kind for m in resumed.step()] == ["resumed"]
        (delta,) = resumed.step()
        assert (delta.kind, delta.from_snapshot, delta.to_snapshot) == ("delta", 5500, 6000)
    finally:
        resumed.close()


def test_a_token_that_cannot_read_the_table_is_refused(env: Env) -> None:
    table = env.table()
    with connect(env.broker.target, token=OTHER) as client, pytest.raises(PermissionDenied):
        next(iter(client.subscribe(f"SELECT * FROM {table}")))


def test_an_identity_holds_at_most_its_limit_of_subscriptions(env: Env) -> None:
    table = env.table()
    sql = f"SELECT id FROM {table}"
    open_now = env.broker._subscriptions.count  # the per-identity count both doors share
    eventually(lambda: open_now("admin") == 0, "the streams of earlier tests ended")
    held = [Reader(env, sql) for _ in range(LIMIT)]
    try:
        for reader in held:
            reader.step()
        with env.client() as client, pytest.raises(ResourceExhausted, match="max_subscriptions"):
            next(iter(client.subscribe(sql)))
        held.pop().close()
        again = eventually(lambda: _first_or_none(env, sql), "a place freed by a closed stream")
        assert again.kind == "first_result"
    finally:
        for reader in held:
            reader.close()


def _first_or_none(env: Env, sql: str) -> SubscriptionMessage | None:
    with env.client() as client:
        try:
            return next(iter(client.subscribe(sql)))
        except ResourceExhausted:
            return None


def test_a_subscriber_that_does_not_read_gets_coalesced_ranges(env: Env) -> None:
    steps = [1000 + 100 * k for k in range(1, 11)]
    table = env.table(big_history(steps))
    sql = f"SELECT id, owner, balance FROM {table}"
    channel = grpc.insecure_channel(env.broker.target, options=CHANNEL_OPTIONS)
    with HorizonClient(channel, token=ADMIN) as client:
        stream = client.subscribe(sql, timeout=WAIT_S)  # read here, only when the test asks
        live = LiveResult()
        live.apply(next(stream))
        cache = env.broker.engine.cache
        for lwm in steps:  # the subscriber reads nothing meanwhile
            misses = cache.misses
            env.move(table, lwm)
            # Give the broker the chance to send a delta for this one snapshot: it takes it
            # unless its hand-over is full (then the wait gives up and the table moves on).
            with contextlib.suppress(AssertionError):
                eventually(lambda m=misses: cache.misses > m, "a query at the step", patience_s=3)
        deltas = []
        while live.snapshot != steps[-1]:
            message = next(stream)
            assert message.from_snapshot == live.snapshot, "the ranges are contiguous"
            live.apply(message)
            deltas.append((message.from_snapshot, message.to_snapshot))
        assert rows_of(live.table) == answer(client, sql, steps[-1])
        assert len(deltas) < len(steps)
        assert any(sum(start < at <= to for at in steps) > 1 for start, to in deltas)


def test_a_stream_starts_at_the_snapshot_its_version_as_of_names(env: Env) -> None:
    table = env.table()
    env.move(table, 3000)
    sql = f"SELECT id, owner, balance FROM {table}"
    reader = Reader(env, f"{sql} VERSION AS OF 1000")
    try:
        with env.client() as client:
            live = LiveResult()
            first = reader.step()
            assert (first[0].kind, first[-1].to_snapshot) == ("first_result", 1000)
            assert applied(live, first) == answer(client, sql, 1000)
            catch_up = reader.step()
            assert (catch_up[0].from_snapshot, catch_up[-1].to_snapshot) == (1000, 3000)
            assert applied(live, catch_up) == answer(client, sql, 3000)
    finally:
        reader.close()


def test_a_stopping_broker_ends_streams_unavailable_and_the_token_resumes_on_the_next(
    env: Env,
    spark,  # type: ignore[no-untyped-def]
) -> None:
    """Last in the module: it stops the module's broker and starts another."""
    table = env.table()
    sql = f"SELECT id, owner, balance FROM {table}"
    reader = Reader(env, sql)
    live = LiveResult()
    applied(live, reader.step())
    env.move(table, 2000)
    applied(live, reader.step())
    config = env.broker.config
    env.broker.stop(5.0)
    with pytest.raises(Unavailable, match="resume_token"):
        reader.next()
    reader.close()
    env.broker = BrokerServer(config, spark=spark).start()
    env.move(table, 3000)
    resumed = Reader(env, sql, resume_token=live.resume_token)
    try:
        assert shown(resumed.step())[0][:3] == ("resumed", 0, 2000)
        step = resumed.step()
        assert (step[0].from_snapshot, step[-1].to_snapshot) == (2000, 3000)
        with env.client() as client:
            assert applied(live, step) == answer(client, sql, 3000)
    finally:
        resumed.close()


def quiet_capable_table(env: Env) -> str:
    """Ids 1..3 open from 500 in one file and id 9 open from 1500 in another, each segment
    telling its greatest validFrom and that its file holds open rows only; LWM at 1000."""
    env.count += 1
    name = f"sub{env.count}"
    desc = descriptor(name, storage_root=env.root)
    parts = [
        [version(i, f"o{i}", i * 10, 500, None) for i in (1, 2, 3)],
        [version(9, "o9", 90, 1500, None)],
    ]
    segments = []
    for partition, rows in enumerate(parts):
        path = write_rows(env.root / name / f"p{partition}.parquet", desc, rows)
        segments.append(
            Segment(
                table=name,
                interval=CHUNK,
                version=VERSION,
                partition=partition,
                core_partitions=2,
                location=(path,),
                row_count=len(rows),
                max_valid_from=max(r["validFrom"] for r in rows),
                open_files=(path,),
            )
        )
    env.server.register_table(desc)
    env.server.announce(segments)
    env.rows[name] = parts[0] + parts[1]
    env.move(name, 1000)
    return name


def test_a_window_the_timeline_shows_quiet_runs_no_query_and_a_change_after_it_arrives(
    env: Env,
) -> None:
    """A step after which no file may hold a version beginning or ending is a progress message
    sent without running the query (no result-cache lookup); while a file may still begin one
    (id 9 at 1500) the query runs, and the version comes as its delta."""
    table = quiet_capable_table(env)
    sql = f"SELECT id, owner, balance FROM {table}"
    cache = env.broker.engine.cache
    reader = Reader(env, sql)
    try:
        assert [m.kind for m in reader.step()] == ["first_result"]
        misses = cache.misses
        env.move(table, 1200)  # quiet in fact, but id 9's file may begin a version after 1000
        assert shown(reader.step()) == [("progress", 1000, 1200, (), [])]
        assert cache.misses > misses, "the query ran"
        env.move(table, 2000)
        assert shown(reader.step()) == [("delta", 1200, 2000, ("id",), [("insert", 9, "o9", 90)])]
        misses = cache.misses
        env.move(table, 2500)  # every file's versions began at or before 2000, none ends
        assert shown(reader.step()) == [("progress", 2000, 2500, (), [])]
        assert cache.misses == misses, "no query ran for the quiet step"
    finally:
        reader.close()
