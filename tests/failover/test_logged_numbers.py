"""A server down across a failover keeps its overwrite numbers (rule F4 of
docs/design/contract/failover.md): the promoted replica never saw the update that drew them, the
server's heartbeat times out so nobody waits for it to publish again, and yet no other server is
handed them, because every server reserves what the table's commit logs in storage name. Found by
the 30-minute fault run (bench/runs/2026-11-29-chaos-after-fix/): the other server drew the lost
update's number, and the returning server's announcement was refused at every restart. One short
test on the session's Spark (the servers write real segments)."""

from __future__ import annotations

import time
from typing import Any

from chaos.sentinel_group import SentinelGroup
from horizon_broker.ingest.job import IngestJob
from horizon_broker.ingest.partitioning import partitions_of
from horizon_broker.ingest.reconcile import announced_files
from horizon_broker.watermark.server import ServerClient
from tests.ingest.conftest import accounts_table

SCHEMA = "user_id string, balance bigint, seq bigint, deleted boolean"


def _rewrites(client: ServerClient, server: str) -> dict[Any, tuple[str, ...]]:
    """The overwrite segments ``server`` announced, by id, with their files."""
    return {
        s.id: s.location
        for s in client.announced_segments("accounts")
        if s.server == server and s.is_overwrite
    }


def test_a_server_down_across_a_failover_keeps_its_update_numbers(
    spark: Any, group: SentinelGroup, tmp_path
):
    table = accounts_table(tmp_path / "store")
    names = [(f"user-{i}",) for i in range(8)]
    kps = partitions_of(spark, names, ["user_id"], 2, "user_id string")
    key = {kp: next(n for (n,), p in zip(names, kps, strict=True) if p == kp) for kp in (0, 1)}

    def upsert(job: IngestJob, kp: int, seq: int) -> None:
        job.run_batch(spark.createDataFrame([(key[kp], seq, seq, False)], SCHEMA))

    first = ServerClient(group.url, "s1", heartbeat_timeout_s=1)
    second = ServerClient(group.url, "s2", heartbeat_timeout_s=1)
    restarted = None
    try:
        one = IngestJob(spark, table, first, partitions=[0])
        two = IngestJob(spark, table, second, partitions=[1])
        upsert(one, 0, 1)
        upsert(two, 1, 1)
        group.cut_replication()
        upsert(two, 1, 2)
        two.flush_updates()  # an update acknowledged by the old primary alone
        lost = _rewrites(second, "s2")
        assert lost
        second.close()  # down, with the update done in its commit log
        group.fail_over()
        group.heal_replication()
        time.sleep(1.5)  # its heartbeat times out: the fence no longer waits for it
        upsert(one, 0, 2)
        one.flush_updates()  # draws overwrite numbers in the same chunk
        drawn = _rewrites(first, "s1")
        assert drawn
        assert not set(drawn) & set(lost), f"{sorted(lost)} handed out again"

        restarted = ServerClient(group.url, "s2", heartbeat_timeout_s=1)
        IngestJob(spark, table, restarted, partitions=[1]).start()  # reconciles, no refusal
        stored = announced_files(restarted.announced_segments("accounts"))
        assert {i: stored.get(i) for i in lost} == lost  # the update is back, its own files
        assert {i: stored.get(i) for i in drawn} == drawn
    finally:
        for client in (first, second, restarted):
            if client is not None:
                client.close()
