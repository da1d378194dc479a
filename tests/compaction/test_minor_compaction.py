"""Minor compaction on real Spark and Redis, read back as a broker reads it."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from horizon_broker.compaction.collect import collect_replaced
from horizon_broker.compaction.plan import CompactionSettings
from horizon_broker.compaction.run import CompactionKilled, Compactor
from horizon_broker.ingest.job import IngestJob, SimulatedCrash
from horizon_broker.ingest.storage import Storage
from horizon_broker.ingest.table import TableDefinition
from horizon_broker.locks.client import JobLocks, LockClient
from horizon_broker.locks.rules import BATCH_INGESTION_PRIORITY
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.records import segment_key
from horizon_broker.watermark.server import ServerClient
from tests.compaction.history import (
    assert_every_snapshot_answers_the_replay,
    batch,
    churn,
    churned,
    fragmented_table,
)
from tests.ingest.conftest import (
    Change,
    assert_broker_sees,
    broker_view,
    replay,
    segment_rows,
    visible_at,
)


def test_minor_compaction_merges_segments_and_every_snapshot_answers_as_before(
    spark, server, follower, tmp_path
):
    table, client, job, log = churned(spark, server, tmp_path, rounds=5)
    before = broker_view(follower, client, "accounts").visible_segments
    assert_every_snapshot_answers_the_replay(spark, follower, client, log)

    report = Compactor(spark, table, server("compactor")).compact()
    assert report.outcome == "published", report.message
    after = broker_view(follower, client, "accounts").visible_segments
    assert len(after) < len(before)
    compacted = [s for s in after if s.root_end - s.root_start > 1]
    assert compacted and all(s.minor_version >= 1 for s in compacted)
    assert all(s.open_files for s in compacted)  # open and closed versions stay apart
    # Each output is written whole by one task: one open file, at most one closed one.
    assert all(len(s.open_files) == 1 and len(s.location) <= 2 for s in compacted)
    checked = assert_every_snapshot_answers_the_replay(spark, follower, client, log)
    assert checked >= 5

    # The updater now rewrites compacted segments when their keys change again.
    churn(job, spark, log, rounds=3, start=5)
    assert_broker_sees(spark, follower, client, "accounts", log)
    assert_every_snapshot_answers_the_replay(spark, follower, client, log)
    rewritten = [
        s
        for s in broker_view(follower, client, "accounts").visible_segments
        if s.root_end - s.root_start > 1 and s.minor_version > compacted[0].minor_version
    ]
    assert rewritten, "no compacted segment was rewritten by the updater"


def test_compaction_drops_versions_no_permitted_snapshot_can_see(spark, server, follower, tmp_path):
    table, client, _job, log = churned(spark, server, tmp_path, rounds=4)
    lwm = broker_view(follower, client, "accounts").lwm
    horizon = sorted(ts for ts, _ in log)[len(log) // 2]
    client.report_retention_horizon("accounts", horizon)
    report = Compactor(spark, table, server("compactor")).compact()
    assert report.outcome == "published" and report.rows_dropped > 0
    compacted = segment_rows(spark, report.outputs)
    assert all(row["validUntil"] is None or row["validUntil"] > horizon for row in compacted)
    stored = segment_rows(spark, broker_view(follower, client, "accounts").visible_segments)
    for snapshot in sorted({ts for ts, _ in log if horizon <= ts <= lwm}):
        rows = visible_at(stored, snapshot)
        assert {row["user_id"]: Change(**row) for row in rows} == replay(log, snapshot)


def test_a_revoked_compaction_announces_nothing_and_leaves_no_file(
    spark, server, follower, tmp_path, redis_server
):
    table, client, _job, log = churned(spark, server, tmp_path, rounds=3)
    announced_before = {s.id for s in client.announced_segments("accounts")}
    chunk = client.announced_segments("accounts")[0].interval
    preemptor = JobLocks(
        LockClient(redis_server.url), "accounts", "batch-x", BATCH_INGESTION_PRIORITY
    )

    def preempt(message: str) -> None:
        if message.startswith("compacting"):
            preemptor.lock_time_chunk(chunk)  # priority 50 revokes the compaction's locks (25)

    compactor = Compactor(spark, table, server("compactor"), progress=preempt)
    report = compactor.compact()
    preemptor.release()
    assert report.outcome == "revoked" and "revoked by job batch-x" in report.message.lower()
    assert {s.id for s in client.announced_segments("accounts")} == announced_before
    written = Path(tmp_path) / "accounts" / "segments" / report.run_id
    assert not written.exists() and not any(Path(tmp_path).rglob(f"*{report.run_id}*"))
    assert_every_snapshot_answers_the_replay(spark, follower, client, log)


def test_a_killed_compactors_locks_run_out_and_a_later_run_succeeds(
    spark, server, follower, tmp_path, redis_server
):
    table, client, _job, log = churned(spark, server, tmp_path, rounds=3)
    killed = Compactor(spark, table, server("compactor"), lease_s=1.0, fail_at="after_files")
    with pytest.raises(CompactionKilled):
        killed.compact()
    locks = LockClient(redis_server.url)
    assert locks.listing(["accounts"]).locks, "the dead run's locks should still be held"
    assert all(s.minor_version == 0 or s.root_end - s.root_start == 1
               for s in client.announced_segments("accounts"))  # fmt: skip
    impatient = Compactor(spark, table, server("compactor-2"))
    assert impatient.compact().outcome == "revoked"  # equal priority: refused, not waiting
    time.sleep(1.2)
    report = Compactor(spark, table, server("compactor-3")).compact()
    assert report.outcome == "published"
    assert_every_snapshot_answers_the_replay(spark, follower, client, log)


def test_collection_withdraws_and_deletes_the_inputs_after_the_grace_period(
    spark, server, follower, tmp_path
):
    table, client, _job, log = churned(spark, server, tmp_path, rounds=4)
    compactor_client = server("compactor")
    compactor = Compactor(spark, table, compactor_client)
    report = compactor.compact()
    assert report.outcome == "published"
    storage = Storage(spark)
    now = time.time_ns() // 1_000_000
    early = collect_replaced(
        storage, compactor_client, "accounts", compactor.root, grace_ms=600_000, now_ms=now
    )
    assert early.withdrawn == 0
    done = collect_replaced(
        storage, compactor_client, "accounts", compactor.root, grace_ms=0, now_ms=now + 1
    )
    assert done.withdrawn == len(report.inputs) and done.deleted_files > 0
    announced = {s.id for s in client.announced_segments("accounts")}
    assert not announced & {s.id for s in report.inputs}
    for segment in report.inputs:
        for path in segment.location:
            assert not Path(path.removeprefix("file:")).exists()
    assert_every_snapshot_answers_the_replay(spark, follower, client, log)


def test_compaction_racing_ingestion_keeps_every_snapshot_exact(spark, server, follower, tmp_path):
    """Batches (and their updater runs, which preempt compaction) run while compactions do."""
    table, client, job, log = churned(spark, server, tmp_path, rounds=3)
    outcomes: list[str] = []
    stop = threading.Event()

    def compact_repeatedly() -> None:
        compactor = Compactor(spark, table, server("compactor"), settings=CompactionSettings())
        while not stop.is_set():
            outcomes.append(compactor.compact().outcome)
            stop.wait(0.5)

    thread = threading.Thread(target=compact_repeatedly)
    thread.start()
    try:
        # A batch every second, as a stream with a 1 s trigger sends them (small batches take
        # a fraction of that on the driver), until a compaction published between them.
        for round_ in range(3, 33):
            churn(job, spark, log, rounds=1, start=round_)
            if round_ >= 6 and "published" in outcomes:
                break
            time.sleep(1.0)
    finally:
        stop.set()
        thread.join(timeout=300)
    print("compaction outcomes while racing:", outcomes)
    assert "published" in outcomes and set(outcomes) <= {"published", "revoked", "nothing to do"}
    assert_broker_sees(spark, follower, client, "accounts", log)
    assert_every_snapshot_answers_the_replay(spark, follower, client, log)


def _update_cut_short_before_its_publish(
    spark: Any, server: Any, tmp_path: Path, rounds: int
) -> tuple[TableDefinition, ServerClient, IngestJob, list]:
    """Server s1 after ``rounds`` of churn, then an updater run that committed its rewrite and
    died before announcing it; the changelog includes that batch's updates."""
    table = fragmented_table(tmp_path)
    client = server("s1")
    log: list = []
    churn(IngestJob(spark, table, client).start(), spark, log, rounds=rounds)
    crashing = IngestJob(spark, table, client, fail_at="update_after_commit")
    changes = [Change(f"k{i:02d}", 900 + i, 10) for i in range(0, 12, 2)]  # updates only
    with pytest.raises(SimulatedCrash):
        batch(crashing, spark, changes, [])
    log.extend((max(ts for ts, _ in log) + 1 + i, c) for i, c in enumerate(changes))
    return table, client, crashing, log


def test_an_update_cut_short_before_its_publish_is_applied_again_to_the_compacted_segments(
    spark, server, follower, tmp_path
):
    """The updater committed its rewrite and died before announcing it; a compaction then took
    in the segments it rewrote. Rolling the stale rewrite forward would be a second minor version
    of the same roots: the restart abandons it and applies its updates to the compaction's output."""
    table, client, _crashing, log = _update_cut_short_before_its_publish(
        spark, server, tmp_path, rounds=4
    )
    assert Compactor(spark, table, server("compactor")).compact().outcome == "published"

    restarted = IngestJob(spark, table, server("s1")).start()
    kinds = [r.body.get("kind") for r in restarted.manifest.records() if r.phase == "commit"]
    assert "abandon" in kinds, "the stale update should have been abandoned"
    assert restarted.state.pending, "its updates should be pending again"
    restarted.flush_updates()
    assert not restarted.state.pending
    assert_broker_sees(spark, follower, client, "accounts", log, exact_ts=False)
    churn(restarted, spark, log, rounds=1, start=4)
    assert_broker_sees(spark, follower, client, "accounts", log, exact_ts=False)


def test_an_update_whose_numbers_were_handed_out_again_before_its_publish_is_applied_again(
    spark, server, follower, tmp_path
):
    """The updater drew its numbers on a primary that then failed over, before its commit record
    existed, and another server was handed them: the store refuses the rewrite at publish, which
    nobody ever served. The restart abandons it and applies its updates with fresh numbers
    instead of failing on the refusal at every start (rule F4)."""
    table, client, crashing, log = _update_cut_short_before_its_publish(
        spark, server, tmp_path, rounds=2
    )
    (unpublished,) = [r for r in crashing.manifest.records() if r.phase == "commit"][-1:]
    taken = Segment.from_dict(unpublished.body["add"][0])
    other = server("s2")
    stand_in = dataclasses.replace(  # another server's rewrite of other roots, same number
        taken, root_start=30_000, root_end=30_001, location=("/elsewhere/s2.parquet",), server="s2"
    )
    other.announce([stand_in])

    restarted = IngestJob(spark, table, server("s1")).start()
    kinds = [r.body.get("kind") for r in restarted.manifest.records() if r.phase == "commit"]
    assert kinds[-1] == "abandon", "the refused update should have been abandoned"
    assert restarted.state.pending, "its updates should be pending again"
    restarted.flush_updates()
    assert not restarted.state.pending
    stored = {s.id: s for s in client.announced_segments("accounts")}
    assert stored[taken.id].location == ("/elsewhere/s2.parquet",)  # the other's, untouched
    other.unannounce([stored[taken.id]])  # its stand-in files do not exist: let the check read
    assert_broker_sees(spark, follower, client, "accounts", log, exact_ts=False)


def test_outputs_a_failed_over_store_lost_are_announced_again_before_the_next_pass(
    spark, server, follower, tmp_path
):
    """The store failed over to a replica without the compaction's publish: it has the inputs
    and not the outputs, which a broker may have served and then holds. The compactor's record
    is the only trace: the next pass announces the outputs again, once (rule F4)."""
    table, client, _job, log = churned(spark, server, tmp_path, rounds=3)
    compactor = Compactor(spark, table, server("compactor"))
    report = compactor.compact()
    assert report.outcome == "published"
    # The promoted replica never saw the publish: its entries are gone and no event says so.
    client.redis.hdel("horizon:t:accounts:segs", *[segment_key(s) for s in report.outputs])
    lost = {s.id for s in report.outputs}
    assert not lost & {s.id for s in client.announced_segments("accounts")}

    assert compactor.compact(targets=[]).outcome == "nothing to do"  # the next pass
    stored = {s.id: s.location for s in client.announced_segments("accounts")}
    assert {s.id: stored.get(s.id) for s in report.outputs} == {
        s.id: s.location for s in report.outputs
    }
    assert compactor.restore_lost_outputs() == 0
    assert_broker_sees(spark, follower, client, "accounts", log)
    assert_every_snapshot_answers_the_replay(spark, follower, client, log)


def test_a_live_pin_taken_before_the_compaction_keeps_its_inputs_until_released(
    spark, server, follower, tmp_path, redis_server
):
    from horizon_broker.pins.store import PinStore

    table, client, _job, log = churned(spark, server, tmp_path, rounds=3)
    pins = PinStore(redis_server.url)
    pin = pins.pin(["accounts"], broker_view(follower, client, "accounts").lwm, lease_s=60)
    compactor_client = server("compactor")
    compactor = Compactor(spark, table, compactor_client)
    report = compactor.compact()
    assert report.outcome == "published"
    storage = Storage(spark)
    later = time.time_ns() // 1_000_000 + 10_000
    held = collect_replaced(
        storage, compactor_client, "accounts", compactor.root, grace_ms=0, now_ms=later
    )
    assert held.withdrawn == 0 and held.deleted_files == 0
    assert all(
        Path(path.removeprefix("file:")).exists()
        for segment in report.inputs
        for path in segment.location
    )
    assert pins.release(pin.pin_id)
    done = collect_replaced(
        storage, compactor_client, "accounts", compactor.root, grace_ms=0, now_ms=later
    )
    assert done.withdrawn == len(report.inputs) and done.deleted_files > 0
    assert_every_snapshot_answers_the_replay(spark, follower, client, log)
    pins.close()
