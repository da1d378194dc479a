"""Real histories for ExplainKey: batches through real ingestion, real compactions, one broker.

Three tables on one redis-server, each built to produce some of the reasons:

* ``accounts`` (two key partitions, one server each): updates, a delete, a third batch only the
  first server commits (above the LWM, held back by the second), then a minor compaction;
* ``ledger`` (one key partition, retention of 1 ms): a version closed by a rewrite that the
  horizon then passes (dropped by retention while stored), then a minor compaction that drops it;
* ``orders`` (two key partitions, no updates): a major compaction into two segments, one of whose
  files goes missing while a query reads it (the broker marks it unreadable, the new version is
  incomplete, its other segment waits in standby) and comes back before the broker checks again.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.compaction.plan import CompactionSettings
from horizon_broker.compaction.run import Compactor
from horizon_broker.ingest.job import IngestJob
from horizon_broker.ingest.partitioning import partitions_of
from horizon_broker.watermark.server import ServerClient
from tests.broker.conftest import ADMIN, broker_config
from tests.compaction.history import SCHEMA
from tests.ingest.conftest import COLUMNS, Change, accounts_table, broker_view
from tests.processes import RedisProcess


@dataclass
class History:
    redis: RedisProcess
    broker: BrokerServer
    root: Path
    keys: dict[str, str] = field(default_factory=dict)
    """Named keys: ``p0`` (partition 0, updated thrice), ``gone`` (deleted), ``p1`` (partition
    1), ``kept`` (ledger, updated once), ``a``/``b`` (orders, in each major output)."""
    snapshots: dict[str, int] = field(default_factory=dict)
    """Named snapshots: ``first`` (accounts after the first batch), ``orders_at``."""
    clients: list[ServerClient] = field(default_factory=list)
    orders_outputs: list[Any] = field(default_factory=list)
    """The segments ``orders``' major compaction wrote (one per key partition)."""

    @property
    def target(self) -> str:
        return self.broker.target

    def close(self) -> None:
        self.broker.stop(0)
        self.broker.follower.stop()
        for client in self.clients:
            client.close()
        self.redis.close()


def _batch(spark: Any, job: IngestJob, changes: list[Change]) -> Any:
    rows = [tuple(change.as_row()[name] for name in COLUMNS) for change in changes]
    return job.run_batch(spark.createDataFrame(rows, SCHEMA))


def _caught_up(history: History, client: ServerClient, table: str) -> int:
    return int(broker_view(history.broker.follower, client, table).lwm)


def build(spark: Any, root: Path) -> History:
    redis = RedisProcess().start()
    config = broker_config(
        redis.url,
        state={"unreadable_recheck_s": 3600.0},
        console={"listen": "127.0.0.1:0", "refresh_s": 3600.0},
    )
    broker = BrokerServer(config, spark=spark).start()  # type: ignore[arg-type]
    history = History(redis, broker, root)
    try:
        _accounts(spark, history)
        _ledger(spark, history)
        _orders(spark, history)
    except BaseException:
        history.close()
        raise
    return history


def _client(history: History, name: str) -> ServerClient:
    client = ServerClient(history.redis.url, name)
    history.clients.append(client)
    return client


def _split(spark: Any, keys: list[str]) -> dict[int, list[str]]:
    numbers = partitions_of(spark, [(k,) for k in keys], ["user_id"], 2, "user_id string")
    found: dict[int, list[str]] = {0: [], 1: []}
    for key, number in zip(keys, numbers, strict=True):
        found[number].append(key)
    return found


def _accounts(spark: Any, history: History) -> None:
    table = accounts_table(history.root / "store")
    by_partition = _split(spark, [f"k{i:02d}" for i in range(12)])
    p0, gone, p1 = by_partition[0][0], by_partition[0][1], by_partition[1][0]
    history.keys.update(p0=p0, gone=gone, p1=p1)
    first = IngestJob(spark, table, _client(history, "s1"), partitions=[0])
    second = IngestJob(spark, table, _client(history, "s2"), partitions=[1])
    everyone = [Change(k, 100, 1) for keys in by_partition.values() for k in keys]
    for job in (first, second):
        _batch(spark, job, everyone)
    history.snapshots["first"] = _caught_up(history, first.client, "accounts")
    updates = [Change(p0, 200, 2), Change(gone, 0, 2, deleted=True), Change(p1, 200, 2)]
    for job in (first, second):
        _batch(spark, job, updates)
    history.snapshots["second"] = _caught_up(history, first.client, "accounts")
    _batch(spark, first, [Change(p0, 300, 3)])  # the second server never commits it
    _caught_up(history, first.client, "accounts")
    report = Compactor(spark, table, _client(history, "compactor")).compact()
    assert report.outcome == "published", report
    history.snapshots["compacted"] = _caught_up(history, first.client, "accounts")


def _ledger(spark: Any, history: History) -> None:
    # Each segment rewritten alone: merged into L2's rewrite, L1's would lose its history too.
    table = accounts_table(history.root / "store", name="ledger", key_partitions=1,
                           retention_ms=1, rewrite_target_rows=0)  # fmt: skip
    job = IngestJob(spark, table, _client(history, "s3"))
    history.keys["kept"] = "L1"
    _batch(spark, job, [Change("L1", 1, 1)])
    _batch(spark, job, [Change("L1", 2, 2)])  # closes L1's first version in a rewrite
    _batch(spark, job, [Change("L2", 1, 1)])
    # Another key's rewrite reports the horizon again, now past that close; L1's is not rewritten.
    _batch(spark, job, [Change("L2", 2, 2)])
    history.snapshots["ledger_stored"] = _caught_up(history, job.client, "ledger")


def compact_ledger(spark: Any, history: History) -> None:
    """The ledger's minor compaction, which drops what retention let go."""
    table = accounts_table(history.root / "store", name="ledger", key_partitions=1,
                           retention_ms=1, rewrite_target_rows=0)  # fmt: skip
    report = Compactor(spark, table, _client(history, "compactor-l")).compact()
    assert report.outcome == "published", report


def _orders(spark: Any, history: History) -> None:
    table = accounts_table(history.root / "store", name="orders")
    by_partition = _split(spark, [f"o{i:02d}" for i in range(8)])
    history.keys.update(a=by_partition[0][0], b=by_partition[1][0])
    job = IngestJob(spark, table, _client(history, "s4"))
    result = _batch(spark, job, [Change(k, 5, 1) for keys in by_partition.values() for k in keys])
    _batch(spark, job, [Change("o99", 5, 1)])  # a second segment per partition: a new file set
    client = job.client
    _caught_up(history, client, "orders")
    small = CompactionSettings(target_rows=1)  # one group per root partition: two segments
    compactor = Compactor(spark, table, _client(history, "compactor-o"), settings=small)
    report = compactor.compact_major()
    assert report.outcome == "published" and len(report.outputs) >= 2, report
    _caught_up(history, client, "orders")
    history.snapshots["orders_at"] = result.base  # the first batch's first commit
    history.orders_outputs = list(report.outputs)


def break_and_restore(path: str, run: Any) -> None:
    """Move ``path`` away while ``run()`` reads it, then put it back."""
    local = path.removeprefix("file:")
    aside = local + ".aside"
    shutil.move(local, aside)
    try:
        run()
    finally:
        shutil.move(aside, local)


__all__ = ["ADMIN", "History", "break_and_restore", "build", "compact_ledger"]
