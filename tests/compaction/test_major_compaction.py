"""Major compaction: whole time chunks rewritten into a new major version under a time-chunk lock."""

from __future__ import annotations

import time
from itertools import pairwise

import pytest

from horizon_broker._core.errors import FailedPrecondition
from horizon_broker.compaction.collect import collect_replaced
from horizon_broker.compaction.plan import CompactionSettings
from horizon_broker.compaction.run import Compactor
from horizon_broker.ingest.job import IngestJob, SimulatedCrash
from horizon_broker.locks.client import JobLocks, LockClient
from horizon_broker.locks.rules import STREAMING_INGESTION_PRIORITY
from horizon_broker.timeline.timeline import Timeline
from tests.compaction.history import (
    assert_every_snapshot_answers_the_replay,
    churn,
    churned,
    fragmented_table,
)
from tests.ingest.conftest import Change, assert_broker_sees, broker_view
from tests.watermark.conftest import segment, table_descriptor


def test_major_compaction_replaces_chunks_and_later_batches_append_to_the_new_version(
    spark, server, follower, tmp_path
):
    table, client, job, log = churned(spark, server, tmp_path, rounds=5)
    before = broker_view(follower, client, "accounts").visible_segments

    report = Compactor(spark, table, server("compactor")).compact_major()
    assert report.outcome == "published", report.message
    after = broker_view(follower, client, "accounts").visible_segments
    new_versions = {s.version for s in report.outputs}
    assert {s.version for s in after} <= new_versions | {s.version for s in before}
    assert all(v > table.version for v in new_versions)
    for chunk_start in {s.interval.start_ms for s in report.outputs}:
        outputs = sorted(
            (s for s in report.outputs if s.interval.start_ms == chunk_start),
            key=lambda s: s.root_start,
        )
        core = outputs[0].core_partitions
        assert outputs[0].root_start == 0 and outputs[-1].root_end == core
        assert all(a.root_end == b.root_start for a, b in pairwise(outputs))
    assert_every_snapshot_answers_the_replay(spark, follower, client, log)

    churn(job, spark, log, rounds=3, start=5)  # updates of compacted keys, and new keys
    assert_broker_sees(spark, follower, client, "accounts", log)
    assert_every_snapshot_answers_the_replay(spark, follower, client, log)
    visible = broker_view(follower, client, "accounts").visible_segments
    compacted_chunks = {s.interval for s in report.outputs}
    appended = [s for s in visible if s.interval in compacted_chunks and s.minor_version == 0]
    assert appended and all(s.version in new_versions for s in appended)
    assert all(s.root_start >= report.outputs[0].core_partitions for s in appended)


def test_losing_one_segment_of_the_new_version_falls_back_to_the_old_one(
    spark, server, follower, tmp_path
):
    table, client, _job, _ = churned(spark, server, tmp_path, rounds=4)
    before = {s.id for s in broker_view(follower, client, "accounts").visible_segments}
    compactor = Compactor(
        spark, table, server("compactor"), settings=CompactionSettings(target_rows=8)
    )
    report = compactor.compact_major()
    assert report.outcome == "published" and len(report.outputs) > 1
    timeline = Timeline("accounts")
    timeline.add_all(client.announced_segments("accounts"))
    assert {s.id for s in timeline.visible_segments()} == {s.id for s in report.outputs}
    timeline.remove(report.outputs[0])  # an unreadable file: the broker drops the segment
    assert {s.id for s in timeline.visible_segments()} == before


def test_ingestion_preempts_a_major_compaction_of_its_chunk(
    spark, server, follower, tmp_path, redis_server
):
    table, client, _job, _ = churned(spark, server, tmp_path, rounds=3)
    announced = {s.id for s in client.announced_segments("accounts")}
    some = client.announced_segments("accounts")[0]
    batch = JobLocks(LockClient(redis_server.url), "accounts", "s1", STREAMING_INGESTION_PRIORITY)

    def append_meanwhile(message: str) -> None:
        if message.startswith("rewriting"):
            batch.lock_segments(some.interval, some.version, [999])

    report = Compactor(spark, table, server("compactor"), progress=append_meanwhile).compact_major()
    batch.release()
    assert report.outcome == "revoked" and "revoked by job s1" in report.message.lower()
    assert {s.id for s in client.announced_segments("accounts")} == announced


def test_a_publish_below_the_chunks_major_version_is_refused(redis_url, make_server):
    server_ = make_server(redis_url, "s1")
    server_.register_table(table_descriptor())
    locks = JobLocks(LockClient(redis_url), "accounts", "s1", STREAMING_INGESTION_PRIORITY)
    old, new = segment(partition=0, version="v1"), segment(partition=0, version="v1.major")
    assert server_.chunk_versions("accounts", [old.interval], "v1") == {old.interval: "v1"}
    locks.lock_covering([new])
    server_.announce([new], guard=locks.guard([new]))
    assert server_.chunk_versions("accounts", [old.interval], "v1") == {old.interval: "v1.major"}
    locks.lock_covering([old])
    with pytest.raises(FailedPrecondition, match="major compaction replaced the chunk"):
        server_.announce([old], guard=locks.guard([old]))
    assert [s.version for s in server_.announced_segments("accounts")] == ["v1.major"]
    locks.release()


def test_a_server_that_died_after_announcing_restarts_after_its_segments_were_compacted_away(
    spark, server, follower, tmp_path
):
    """The batch was announced, then a major compaction took it in and its inputs were collected
    while the server was down: rolling the batch forward must not announce them again."""
    table = fragmented_table(tmp_path)
    client = server("s1")
    log: list = []
    churn(IngestJob(spark, table, client).start(), spark, log, rounds=3)
    crashing = IngestJob(spark, table, client, fail_at="after_announce")
    lost: list = []
    with pytest.raises(SimulatedCrash):
        churn(crashing, spark, lost, rounds=1, start=3)
    # Its commit timestamps are unknown (it died): they lie between the rounds around it.
    changes = [Change(f"k{(15 + i) % 12:02d}", 300 + i, 4) for i in range(6)]
    log.extend((max(ts for ts, _ in log) + 1 + i, c) for i, c in enumerate(changes))
    compactor_client = server("compactor")
    compactor = Compactor(spark, table, compactor_client)
    assert compactor.compact_major().outcome == "published"
    collected = collect_replaced(
        compactor.storage, compactor_client, "accounts", compactor.root, grace_ms=0,
        now_ms=time.time_ns() // 1_000_000 + 1,
    )  # fmt: skip
    assert collected.withdrawn > 0
    restarted = IngestJob(spark, table, server("s1")).start()
    churn(restarted, spark, log, rounds=2, start=4)
    assert_broker_sees(spark, follower, client, "accounts", log, exact_ts=False)
    visible = broker_view(follower, client, "accounts").visible_segments
    majors = {s.interval for s in visible if s.version != table.version}
    assert majors and not [
        s for s in visible if s.interval in majors and s.version == table.version
    ]
