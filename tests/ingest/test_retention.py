"""Garbage collection of replaced segments and history retention, on a real job.

Collection: with no grace period the files of every segment the updater replaced go at once (or at
the next start, driven by the commit log), never a file an announced segment uses, and every
answer stays right. Retention: with a tiny retention, rewritten segments lose the history below a
horizon the brokers enforce, and every snapshot at or above it still matches the replay.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from horizon_broker.ingest import key_index
from horizon_broker.ingest.garbage import collectable, collection_due, delete_files, unreferenced
from horizon_broker.ingest.job import IngestJob
from horizon_broker.ingest.manifest import Garbage
from horizon_broker.ingest.retention import retention_horizon
from horizon_broker.ingest.storage import Storage
from tests.ingest.conftest import (
    Change,
    accounts_table,
    assert_broker_sees,
    broker_view,
    replay,
    visible_at,
    write_changelog,
)


def parquet_files(root: Path) -> set[str]:
    return {f"file:{path}" for path in (root / "accounts" / "segments").rglob("*.parquet")}


def announced_files(job: IngestJob) -> set[str]:
    return {
        loc for segment in job.client.announced_segments("accounts") for loc in segment.location
    }


def updates(round_: int, keys: int = 4) -> list[Change]:
    return [Change(f"k{i}", 100 * round_ + i, round_) for i in range(keys)]


# -- garbage collection ----------------------------------------------------------------------


def ingest_round(
    job: IngestJob, source: Path, round_: int, history: list[tuple[int, Change]]
) -> Any:
    """Land round ``round_``'s changelog file, ingest it, and add its changes to ``history``."""
    write_changelog(source, f"{round_:03d}.json", updates(round_))
    result = job.run_directory(str(source), "json")
    history += [(result.base + i, c) for i, c in enumerate(updates(round_))]
    return result


def test_collection_waits_for_the_grace_period_and_spares_files_still_announced():
    garbage = {
        1: Garbage(("file:/t/b1/_chunk=0/_seg=0/_rows=open/a.parquet",), released_ms=1_000),
        2: Garbage(("file:/t/b2/_chunk=0/_seg=1/_rows=open/b.parquet",), released_ms=5_000),
        3: Garbage(("file:/t/u3/_chunk=0/_seg=32768/_rows=open/c.parquet",), released_ms=None),
        4: Garbage(("file:/t/b4/_chunk=0/_seg=2/_rows=open/d.parquet",), released_ms=1_000),
        5: Garbage(("file:/t/b5/_chunk=0/_seg=3/_rows=closed/e.parquet",), released_ms=1_000),
        6: Garbage(("file:/t/b4/_chunk=86400000/_seg=2/_rows=open/g.parquet",), released_ms=1_000),
    }
    in_use = [
        "file:/t/b4/_chunk=0/_seg=2/_rows=open/another-file.parquet",  # same segment directory
        "file:/t/b5/_chunk=0/_seg=3/_rows=open/f.parquet",  # the same segment's other rows
    ]
    found = collectable(garbage, now_ms=3_000, grace_ms=2_000, in_use=in_use)
    # 6 shares the attempt and the partition number with 4, not the chunk: another segment.
    assert found.seqs == (1, 6)
    assert found.locations == (
        "file:/t/b1/_chunk=0/_seg=0/_rows=open/a.parquet",
        "file:/t/b4/_chunk=86400000/_seg=2/_rows=open/g.parquet",
    )
    assert collectable(garbage, 10_000, 0, []).seqs == (1, 2, 4, 5, 6)  # never unpublished ones
    assert not collection_due(garbage, 3_000, 2_000 * 10)
    assert collection_due(garbage, 3_000, 0)


def test_deleting_segment_files_removes_chunk_and_attempt_directories_left_without_a_segment(
    spark, tmp_path
):
    attempt = tmp_path / "b0000000001"
    files = {
        (chunk, part, rows): attempt / f"_chunk={chunk}/_seg={part}/_rows={rows}/x.parquet"
        for chunk, part, rows in [(0, 0, "open"), (0, 0, "closed"), (0, 1, "open"), (86400000, 0, "open")]
    }  # fmt: skip
    for path in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"PAR1")
    (attempt / "_SUCCESS").write_bytes(b"")
    storage = Storage(spark)

    def delete(*keys: tuple[int, int, str]) -> None:
        delete_files(storage, [f"file:{files[key]}" for key in keys])

    delete((0, 0, "open"), (0, 0, "closed"))
    assert not (attempt / "_chunk=0" / "_seg=0").exists()
    assert files[(0, 1, "open")].exists(), "the chunk's other segment stays"
    delete((86400000, 0, "open"))
    assert not (attempt / "_chunk=86400000").exists(), "a chunk left with no segment goes"
    assert attempt.exists()
    delete((0, 1, "open"))
    assert not attempt.exists(), "an attempt left with no chunk goes"
    delete((0, 1, "open"))  # idempotent: a collection redone after a crash


def test_replaced_segment_files_go_after_a_zero_grace_period_and_answers_stay_right(
    spark, server, follower, tmp_path
):
    store = tmp_path / "store"
    source = tmp_path / "changelog"
    keep = accounts_table(store, gc_grace="1h")
    job = IngestJob(spark, keep, server("s1"))
    history: list[tuple[int, Change]] = []
    for round_ in range(2):
        ingest_round(job, source, round_, history)
    replaced = parquet_files(store) - announced_files(job)
    assert replaced and job.state.garbage  # within the grace period: kept, and remembered

    # A restart with no grace period collects what the commit log remembers.
    table = accounts_table(store, gc_grace_ms=0)
    job = IngestJob(spark, table, server("s1")).start()
    assert not job.state.garbage
    assert parquet_files(store) == announced_files(job)
    assert_broker_sees(spark, follower, job.client, "accounts", history)

    for round_ in range(2, 3):
        assert ingest_round(job, source, round_, history).updated_segments > 0
        assert parquet_files(store) == announced_files(job)  # nothing replaced is left
        assert_broker_sees(spark, follower, job.client, "accounts", history)
    assert not (store / "accounts" / "segments" / "s1" / "b0000000001").exists()
    restarted = IngestJob(spark, table, server("s1")).start()
    assert restarted.state == job.state


def test_a_batch_directory_goes_unless_it_or_one_of_its_children_is_referenced():
    listed = ["r/b1", "r/b2", "r/b3"]
    children = {"r/b2": ["r/b2/_kpDir=0", "r/b2/_kpDir=1", "r/b2/_SUCCESS"]}
    referenced = ["r/b2/_kpDir=0", "r/b3", "other/b9/_kpDir=1"]
    assert unreferenced(listed, children, referenced) == [
        "r/b1",
        "r/b2/_kpDir=1",
        "r/b2/_SUCCESS",
    ]
    assert unreferenced(listed, {}, []) == listed


def assert_segments_describe_their_files(job: IngestJob) -> None:
    """Every announced segment, first generation or rewrite, states its row count, greatest
    validFrom, open files and the closed files' greatest validUntil as its files hold them (the
    broker skips the validFrom test on segments settled below the snapshot, every test on their
    open files and the closed files at snapshots past their bound; a rewrite that dropped
    history has fewer rows)."""
    import pyarrow.parquet as pq

    segments = job.client.announced_segments("accounts")
    assert any(segment.open_files for segment in segments), "no open versions written apart"
    for segment in segments:
        files = {
            path: pq.read_table(
                path.removeprefix("file:"), columns=["user_id", "validFrom", "validUntil"]
            )
            for path in segment.location
        }
        valid_from = [value for table in files.values() for value in table["validFrom"].to_pylist()]
        assert segment.max_valid_from == max(valid_from), segment
        assert segment.row_count == len(valid_from), segment
        for path, table in files.items():
            until = table["validUntil"].to_pylist()
            assert until, f"{path} is empty"
            # Open files by key (key lookups prune row groups), closed ones by validFrom
            # (time travel does).
            if path in segment.open_files:
                assert set(until) == {None}, path
                keys = table["user_id"].to_pylist()
                assert keys == sorted(keys), f"{path} is not in key order"
            else:
                assert None not in until, path
                starts = table["validFrom"].to_pylist()
                assert starts == sorted(starts), f"{path} is not in validFrom order"
        closed = [
            value
            for path, table in files.items()
            if path not in segment.open_files
            for value in table["validUntil"].to_pylist()
        ]
        assert segment.max_valid_until == max(closed, default=None), segment


def private_directories(store: Path) -> set[str]:
    """The key partition directories of the batches' resolutions on disk."""
    base = store / "accounts" / "_keyindex" / "s1"
    return {f"file:{path}" for path in base.glob("r*/_kpDir=*")}


def still_needed(store: Path, job: IngestJob) -> set[str]:
    """What the sweep must keep: every key index level and every pending batch's resolution."""
    pending = {
        f"file:{path}"
        for item in job.state.pending.values()
        for path in Path(item["updates"].removeprefix("file:")).glob("_kpDir=*")
    }
    return index_levels(job) | pending


@pytest.mark.parametrize("on_driver", [False, True], ids=["on-spark", "on-the-driver"])
def test_replaced_key_indexes_and_applied_updates_are_deleted_and_answers_stay_right(
    spark, server, follower, tmp_path, monkeypatch, on_driver
):
    # Two key index levels at most: on Spark, batches alternate between writing the changed
    # entries on top of the index and writing it whole again, which leaves the older levels
    # unreferenced. On the driver, each small batch's level takes in the one under it (one
    # level), which leaves that one unreferenced.
    monkeypatch.setattr(key_index, "MAX_INDEX_LEVELS", 2)
    store = tmp_path / "store"
    source = tmp_path / "changelog"
    table = accounts_table(store, update_cadence=2, driver_batch_rows=10_000 if on_driver else 0)
    job = IngestJob(spark, table, server("s1"))
    history: list[tuple[int, Change]] = []
    for round_ in range(4):
        ingest_round(job, source, round_, history)
        assert private_directories(store) == still_needed(store, job)
        assert {len(version.levels) for version in job.state.key_index.values()} == {
            1 if round_ % 2 == 0 or on_driver else 2
        }
        assert bool(job.state.pending) == (round_ % 2 == 1)  # cadence 2: applied every 2nd batch
        assert_segments_describe_their_files(job)
    assert_broker_sees(spark, follower, job.client, "accounts", history)

    # A restart reads the levels left per partition and goes on resolving against them.
    job = IngestJob(spark, table, server("s1")).start()
    assert {len(version.levels) for version in job.state.key_index.values()} == {
        1 if on_driver else 2
    }
    ingest_round(job, source, 4, history)
    assert private_directories(store) == still_needed(store, job)
    assert_broker_sees(spark, follower, job.client, "accounts", history)


def index_levels(job: IngestJob) -> set[str]:
    return {level for version in job.state.key_index.values() for level in version.levels}


# -- history retention -----------------------------------------------------------------------


def test_the_horizon_trails_the_table_lwm_by_the_retention_and_never_moves_back():
    assert retention_horizon(10 << 16, 3, 0) == 7 << 16
    assert retention_horizon(10 << 16, 3, 8 << 16) == 8 << 16
    assert retention_horizon(None, 3, 5) == 5
    assert retention_horizon(10 << 16, None, 0) == 0
    assert retention_horizon(2 << 16, 3, 0) == 0


def snapshots_match_the_replay(
    rows: list[dict[str, Any]], history: list[tuple[int, Change]], low: int, high: int
) -> None:
    moments = {low, high} | {ts + d for ts, _ in history for d in (-1, 0, 1)}
    for snapshot in sorted(s for s in moments if low <= s <= high):
        visible = visible_at(rows, snapshot)
        keys = [row["user_id"] for row in visible]
        assert len(keys) == len(set(keys)), snapshot
        assert {row["user_id"]: Change(**row) for row in visible} == replay(history, snapshot), (
            snapshot
        )


def test_rewritten_segments_drop_history_below_the_enforced_horizon_only(
    spark, server, follower, tmp_path
):
    table = accounts_table(tmp_path / "store", key_partitions=1, retention_ms=1)
    source = tmp_path / "changelog"
    job = IngestJob(spark, table, server("s1"))
    rounds = [
        updates(0),  # k0..k3
        [Change(f"k{i}", 10 + i, 1) for i in (0, 1)],  # the first segment keeps k2, k3 current
        [Change(f"k{i}", 20 + i, 2) for i in (2, 3)],  # so this rewrites it again
    ]
    history: list[tuple[int, Change]] = []
    for round_, changes in enumerate(rounds):
        write_changelog(source, f"{round_:03d}.json", changes)
        result = job.run_directory(str(source), "json")
        history += [(result.base + i, c) for i, c in enumerate(changes)]

    seen = assert_broker_sees(spark, follower, job.client, "accounts", history)
    view = broker_view(follower, job.client, "accounts")
    horizon = view.retention_horizon
    assert horizon == job.state.retention_horizon > 0
    stored = {(row["user_id"], row["seq"]) for row in seen.stored}
    # k0's and k1's first versions ended at the second batch, below the horizon of the third
    # batch's rewrite of their segment: gone. k2's and k3's ended inside the window: kept.
    assert stored == {("k2", 0), ("k3", 0), ("k0", 1), ("k1", 1), ("k2", 2), ("k3", 2)}
    assert all(row["validUntil"] is None or row["validUntil"] > horizon for row in seen.stored)
    # Every snapshot a broker still allows matches the replay.
    snapshots_match_the_replay(seen.stored, history, horizon, view.lwm)
