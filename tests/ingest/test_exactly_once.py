"""Exactly once: a job killed between any two steps and restarted as a new object loses nothing,
duplicates nothing, and never announces or keeps a dead attempt's files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from horizon_broker.ingest.job import STEPS, IngestJob, SimulatedCrash
from horizon_broker.ingest.manifest import COMMIT, PREPARE, Manifest
from horizon_broker.ingest.storage import Storage
from tests.ingest.conftest import Change, accounts_table, assert_broker_sees, write_changelog


def referenced_files(spark: Any, job: IngestJob) -> set[str]:
    manifest = Manifest(Storage(spark), job.root, job.server_id)
    files: set[str] = set()
    for record in manifest.records():
        assert record.phase != PREPARE or any(
            r.seq == record.seq and r.phase == COMMIT for r in manifest.records()
        ), f"unfinished attempt {record.seq} left in the commit log"
        for key in ("segments", "add"):
            for segment in record.body.get(key, ()):
                files.update(segment["location"])
    return files


def parquet_files(root: Path) -> set[str]:
    return {f"file:{path}" for path in (root / "accounts" / "segments").rglob("*.parquet")}


def test_a_job_killed_at_any_step_restarts_without_loss_duplicates_or_orphans(
    spark, server, follower, tmp_path
):
    store = tmp_path / "store"
    table = accounts_table(store)
    source = tmp_path / "changelog"
    changes = [Change(f"k{i}", 100 + i, 1) for i in range(6)]
    write_changelog(source, "000.json", changes)
    IngestJob(spark, table, server("s1")).run_directory(str(source), "json")
    history: list[tuple[int, Change]] = [(i, c) for i, c in enumerate(changes)]

    for round_, step in enumerate(STEPS, start=1):
        batch = [
            Change(f"k{round_ % 6}", 1000 + round_, 1 + round_),  # update: the updater runs
            Change(f"n{round_}", round_, 1),  # new key
            Change(f"k{(round_ + 3) % 6}", 0, 0),  # out of order: loses
        ]
        if round_ % 3 == 0:
            batch.append(Change(f"n{round_ - 1}", 0, 5, deleted=True))
        write_changelog(source, f"{round_:03d}.json", batch)
        crashing = IngestJob(spark, table, server("s1"), fail_at=step)
        with pytest.raises(SimulatedCrash):
            crashing.run_directory(str(source), "json")

        restarted = IngestJob(spark, table, server("s1"))
        restarted.run_directory(str(source), "json")
        history.extend((1000 * round_ + i, change) for i, change in enumerate(batch))

        assert not restarted.state.pending, f"{step}: updates still pending after the restart"
        seen = assert_broker_sees(
            spark, follower, restarted.client, "accounts", history, exact_ts=False
        )
        # Every change was stored exactly once (out-of-order ones with an empty interval).
        expected = sorted((c.user_id, c.seq) for _, c in history if not c.deleted)
        assert sorted((r["user_id"], r["seq"]) for r in seen.stored) == expected, step
        # No file of a dead attempt survives, and none is announced.
        assert parquet_files(store) <= referenced_files(spark, restarted), step


def test_a_replayed_batch_with_the_same_sources_is_skipped(spark, server, follower, tmp_path):
    table = accounts_table(tmp_path / "store")
    job = IngestJob(spark, table, server("s1"))
    frame = spark.createDataFrame(
        [("a", 1, 1, False)], "user_id string, balance bigint, seq bigint, deleted boolean"
    )
    first = job.run_batch(frame, sources=["kafka:accounts:0:0-1"])
    again = IngestJob(spark, table, server("s1")).run_batch(frame, sources=["kafka:accounts:0:0-1"])
    assert again.skipped and not first.skipped
    assert_broker_sees(spark, follower, job.client, "accounts", [(first.base, Change("a", 1, 1))])
