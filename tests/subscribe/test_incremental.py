"""Every subscription strategy against the query itself, over random histories ingested for real
(the driver road: updates rewrite segments, deletes end keys) and compacted for real.

For a random query of each strategy (forced: refused unless the chooser finds that it suits the
query), the first result plus every delta is the query's answer (ExecuteQuery's engine at
``VERSION AS OF``) at every snapshot the table went through, a delta is empty exactly when the answer did not change, a stream resumed
from any snapshot gives the same deltas as the first stream, and so does a stream replayed after
a compaction of the table: compaction changes files, not rows, and the table's change feed is
the same before and after it.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.broker.grants import ALL_TABLES, Principal
from horizon_broker.broker.subscribe.diff import Delta, apply_delta
from horizon_broker.broker.subscribe.snapshot_sql import at_snapshot
from horizon_broker.broker.subscribe.strategy import DeltaStrategy, Reads, choose_strategy
from horizon_broker.broker.subscribe.stream import answer_at, result_key
from horizon_broker.compaction.plan import CompactionSettings
from horizon_broker.compaction.run import Compactor
from horizon_broker.ingest.job import IngestJob
from horizon_broker.watermark.server import ServerClient
from tests.broker.conftest import broker_config
from tests.compaction.history import SCHEMA
from tests.ingest.conftest import COLUMNS, Change, accounts_table, broker_view
from tests.processes import RedisProcess

pytestmark = [pytest.mark.spark, pytest.mark.redis]

ADMIN = Principal("admin", frozenset({ALL_TABLES}), inspect=True)
QUERIES = {
    "change_feed": [
        "SELECT user_id, balance FROM {t} WHERE balance > 2",
        "SELECT a.user_id, a.balance * 10 + a.seq AS mixed FROM {t} AS a",
        "SELECT user_id FROM {t} WHERE balance % 2 = 0",
    ],
    "changed_groups": [  # the first and last by totals (group_totals), the others re-run
        "SELECT substr(user_id, 1, 1) AS initial, count(*) AS n, sum(balance) AS total, "
        "count(seq) AS seqs FROM {t} WHERE balance > 1 GROUP BY 1",
        "SELECT balance % 3 AS bucket, count(*) AS n, sum(balance) AS total, min(balance) AS lo, "
        "max(balance) AS hi, avg(balance) AS mean FROM {t} GROUP BY balance % 3",
        "SELECT substr(user_id, 1, 1) AS initial, max(balance) AS hi, min(seq) AS first "
        "FROM {t} WHERE balance > 1 GROUP BY 1 HAVING count(*) > 1",
        "SELECT balance, count(*) AS n FROM {t} GROUP BY balance",
    ],
    "exact_diff": [
        "SELECT user_id, balance FROM {t} ORDER BY balance DESC, user_id LIMIT 2",
        "SELECT count(*) AS n, sum(balance) AS total FROM {t}",
    ],
}
KEYS = ["a1", "a2", "b1", "b2", "c1"]
_tables = itertools.count()


@dataclass
class Env:
    redis: RedisProcess
    broker: BrokerServer
    root: Path
    clients: list[ServerClient]

    def client(self, name: str) -> ServerClient:
        client = ServerClient(self.redis.url, name)
        self.clients.append(client)
        return client


@pytest.fixture(scope="module")
def env(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:  # type: ignore[no-untyped-def]
    redis = RedisProcess().start()
    broker = BrokerServer(broker_config(redis.url), spark=spark).start()  # type: ignore[arg-type]
    built = Env(redis, broker, tmp_path_factory.mktemp("incremental"), [])
    yield built
    broker.stop(0)
    broker.follower.stop()
    for client in built.clients:
        client.close()
    redis.close()


def changes() -> st.SearchStrategy[list[tuple[str, int, bool]]]:
    change = st.tuples(
        st.sampled_from(KEYS), st.integers(0, 6), st.integers(0, 5).map(lambda n: n == 0)
    )
    return st.lists(change, min_size=1, max_size=5)


def comparable(table: pa.Table) -> Counter:
    """A multiset of rows, floats rounded (an average summed in another order)."""
    rows = (tuple(v for v in row.values()) for row in table.to_pylist())
    return Counter(
        tuple(round(v, 9) if isinstance(v, float) and math.isfinite(v) else v for v in row)
        for row in rows
    )


def delta_rows(delta: Delta) -> tuple[tuple[str, ...], Counter]:
    return delta.key, comparable(delta.rows)


@dataclass
class Subject:
    """One query over the example's table, run through the broker's engine."""

    env: Env
    table: str
    sql: str
    forced: str
    """The strategy the stream is forced to (the chooser must find that it suits the query)."""
    answers: dict[int, Counter] = field(default_factory=dict)

    def run(self, snapshot: int) -> pa.Table:
        return self.query(at_snapshot(self.sql, [self.table], snapshot))

    def answer(self, snapshot: int) -> Counter:
        """The query's answer at ``snapshot`` (asked once: it never changes)."""
        if snapshot not in self.answers:
            self.answers[snapshot] = comparable(self.run(snapshot))
        return self.answers[snapshot]

    def query(self, sql: str) -> pa.Table:
        return answer_at(self.env.broker.engine, ADMIN, sql, lambda: True)  # type: ignore[arg-type]

    def strategy(self, forced: str = "") -> DeltaStrategy:
        engine = self.env.broker.engine
        assert engine is not None
        descriptor = engine.follower.descriptor(self.table)
        prepared = engine.prepare(self.sql, ADMIN)
        key = result_key(engine.result_schema(prepared).names, [descriptor.primary_key])
        reads = Reads(self.sql, (self.table,), key, self.run, self.query)
        return choose_strategy(reads, [descriptor], forced)

    def stream(self, snapshots: list[int], resume_at: int | None = None) -> list[Delta]:
        """The deltas from ``snapshots[0]`` (or, resumed, ``resume_at``) through the rest, each
        applied and checked against the query at its snapshot."""
        strategy = self.strategy(self.forced)
        if resume_at is None:
            result: pa.Table | None = strategy.start(snapshots[0])
            start = 0
        else:
            strategy.resume(snapshots[resume_at])
            result, start = self.run(snapshots[resume_at]), resume_at  # the subscriber's
        deltas = []
        for before, to in itertools.pairwise(snapshots[start:]):
            delta = strategy.advance(to)
            assert result is not None
            result = apply_delta(result, delta.rows, delta.key)
            assert comparable(result) == self.answer(to), (self.sql, to)
            unchanged = self.answer(before) == self.answer(to)
            assert delta.empty == unchanged, (self.sql, before, to, delta.rows.to_pylist())
            deltas.append(delta)
        return deltas


BASELINE = [(key, 1, False) for key in KEYS]
"""The first batch: every key, so the drawn batches update and delete as often as they insert."""


def ingest(env: Env, spark: Any, name: str, batches: list[list[tuple[str, int, bool]]]) -> Any:
    """The baseline and every batch through a real ingestion job; the snapshots the broker
    served after each."""
    table = accounts_table(env.root / "store", name=name, key_partitions=1)
    job = IngestJob(spark, table, env.client(f"{name}-server"))
    snapshots: list[int] = []
    seq = itertools.count(1)
    for batch in [BASELINE, *batches]:
        rows = [
            tuple(Change(key, balance, next(seq), deleted).as_row()[c] for c in COLUMNS)
            for key, balance, deleted in batch
        ]
        job.run_batch(spark.createDataFrame(rows, SCHEMA))
        snapshots.append(int(broker_view(env.broker.follower, job.client, name).lwm))
    return table, job.client, snapshots


def whole_feed(subject: Subject, snapshots: list[int]) -> Counter:
    table = subject.table
    return comparable(
        subject.query(f"SELECT * FROM table_changes('{table}', {snapshots[0]}, {snapshots[-1]})")
    )


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    batches=st.lists(changes(), min_size=1, max_size=3),
    picks=st.tuples(*(st.integers(0, len(qs) - 1) for qs in QUERIES.values())),
    resume_at=st.integers(0, 3),
    compact=st.booleans(),
)
@example(  # a key changed twice, one deleted and back, one across the filter; then a rewrite
    batches=[
        [("a1", 3, False), ("a1", 5, False), ("a2", 0, True), ("a2", 4, False), ("b1", 6, False)],
        [("a1", 5, False), ("b1", 0, False), ("c1", 0, True)],
    ],
    picks=(0, 0, 0),
    resume_at=1,
    compact=True,
)
@example(  # only the delete of a key never written: no file, nothing to compact
    batches=[[("a1", 0, True)]], picks=(0, 0, 0), resume_at=0, compact=True
)
def test_every_strategy_follows_the_query_through_real_ingestion_and_compaction(
    spark: Any, env: Env, batches: Any, picks: tuple[int, ...], resume_at: int, compact: bool
) -> None:
    name = f"inc{next(_tables)}"
    table, client, snapshots = ingest(env, spark, name, batches)
    resume_at = min(resume_at, len(snapshots) - 1)
    subjects = {
        strategy: Subject(env, name, QUERIES[strategy][pick].format(t=name), strategy)
        for strategy, pick in zip(QUERIES, picks, strict=True)
    }
    streams = {}
    for strategy, subject in subjects.items():
        assert subject.strategy(strategy).name == strategy, subject.sql
        streams[strategy] = [delta_rows(d) for d in subject.stream(snapshots)]
        resumed = subject.stream(snapshots, resume_at)
        assert [delta_rows(d) for d in resumed] == streams[strategy][resume_at:]
    if not compact:
        return
    feed = whole_feed(subjects["change_feed"], snapshots)
    every_chunk = CompactionSettings(min_small_files=1)  # the files are small: all compacted
    compactor = Compactor(spark, table, env.client(f"{name}-compactor"), settings=every_chunk)
    report = compactor.compact()
    if report.outcome == "nothing to do":  # no files to merge (only deletes of unwritten keys)
        assert not compactor.plan(), report
        return
    assert report.outcome == "published", report
    broker_view(env.broker.follower, client, name)  # the broker follows the compaction
    assert whole_feed(subjects["change_feed"], snapshots) == feed
    for strategy, subject in subjects.items():
        replayed = [delta_rows(d) for d in subject.stream(snapshots)]
        assert replayed == streams[strategy], (strategy, subject.sql)
