"""A starting ingestion server reconciles a failed-over store with its commit log (rule F4 of
docs/design/contract/failover.md): a batch its log calls done, which the promoted replica lost,
is announced again with the same segments and commit timestamps, and its report does not go
below the log; what it found present counts as its own when it publishes again later. One short test on the session's Spark (the server writes real segments)."""

from __future__ import annotations

from typing import Any

from chaos.sentinel_group import SentinelGroup
from horizon_broker.ingest.job import IngestJob
from horizon_broker.watermark.server import ServerClient
from tests.ingest.conftest import accounts_table

SCHEMA = "user_id string, balance bigint, seq bigint, deleted boolean"


def _stored(group: SentinelGroup) -> dict[bytes, bytes]:
    with group.client(group.primary_port()) as primary:
        return primary.hgetall("horizon:t:accounts:segs")


def test_a_restarted_server_announces_again_the_batch_a_failover_lost(
    spark: Any, group: SentinelGroup, tmp_path
):
    table = accounts_table(tmp_path / "store")
    first = ServerClient(group.url, "s1")
    job = IngestJob(spark, table, first)
    job.run_batch(spark.createDataFrame([("a", 1, 1, False)], SCHEMA))
    group.cut_replication()
    lost = job.run_batch(spark.createDataFrame([("b", 2, 1, False)], SCHEMA))
    before = _stored(group)
    first.close()  # the server dies with the batch done in its log
    group.fail_over()
    after_failover = _stored(group)
    assert set(after_failover) < set(before)  # the promoted replica lost the batch

    restarted = ServerClient(group.url, "s1")
    try:
        IngestJob(spark, table, restarted).start()
        assert _stored(group) == before  # the same segments, the same commit timestamps
        progress = restarted.partition_progress("accounts")
        assert all(int(p.ingested or 0) >= lost.high for p in progress.values())
        # The store loses everything again: the running server re-publishes both batches, the
        # one it found present at start as well as the one it announced again.
        with group.client(group.primary_port()) as primary:
            primary.flushall()
        restarted.heartbeat()
        assert _stored(group) == before
    finally:
        restarted.close()
