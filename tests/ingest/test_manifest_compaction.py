"""Commit log compaction on a real job: a job checkpointing every few transactions restarts, hands
over and survives a kill between writing a checkpoint and deleting what it covers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from horizon_broker.ingest.job import IngestJob
from horizon_broker.ingest.manifest import CHECKPOINT, ManifestState, parse_name
from horizon_broker.ingest.storage import Storage
from tests.ingest.conftest import Change, accounts_table, assert_broker_sees, write_changelog


def log_files(spark: Any, job: IngestJob) -> list[tuple[int, str]]:
    names = [parse_name(info.path) for info in Storage(spark).list_dir(job.manifest.directory)]
    return sorted(name for name in names if name is not None)


def batch(round_: int) -> list[Change]:
    return [
        Change(f"k{round_ % 3}", 100 * round_, round_),  # an update: the updater runs
        Change(f"n{round_}", round_, 1),
    ]


def test_a_job_checkpointing_every_two_transactions_restarts_and_hands_over_correctly(
    spark, server, follower, tmp_path
):
    table = accounts_table(tmp_path / "store", checkpoint_interval=2)
    source = tmp_path / "changelog"
    first = [Change(f"k{i}", i, 0) for i in range(3)]
    write_changelog(source, "000.json", first)
    job = IngestJob(spark, table, server("s1"))
    history = [(job.run_directory(str(source), "json").base + i, c) for i, c in enumerate(first)]
    for round_ in range(1, 3):
        write_changelog(source, f"{round_:03d}.json", batch(round_))
        result = job.run_directory(str(source), "json")
        history += [(result.base + i, c) for i, c in enumerate(batch(round_))]

    names = log_files(spark, job)
    checkpoints = [seq for seq, phase in names if phase == CHECKPOINT]
    assert len(checkpoints) == 1, names  # older checkpoints and covered records are gone
    assert all(seq > checkpoints[0] for seq, phase in names if phase != CHECKPOINT)
    assert job.state.next_seq - 1 >= 5  # 3 ingests and 2 updates, at most 1 left uncovered
    assert len(names) <= 1 + 3

    restarted = IngestJob(spark, table, server("s1")).start()
    full_state = job.state
    assert restarted.state == full_state
    assert_broker_sees(spark, follower, restarted.client, "accounts", history)

    # A handover reads the checkpointed log of the previous owner.
    restarted.hand_over(1, "s2")
    s2 = IngestJob(spark, table, server("s2"), partitions=[1]).start()
    assert s2.state.key_index[1] == restarted.state.key_index[1]
    assert s2.state.consumed[1] == restarted.state.consumed[1]
    write_changelog(source, "003.json", batch(4))
    result = s2.run_directory(str(source), "json")
    assert result.rows == len(batch(4))  # both keys hash to partition 1
    restarted.run_directory(str(source), "json")  # partition 0's progress moves on too
    history += [(result.base + i, c) for i, c in enumerate(batch(4))]
    assert_broker_sees(spark, follower, s2.client, "accounts", history)


def test_a_kill_between_writing_a_checkpoint_and_pruning_the_log_is_harmless(
    spark, server, follower, tmp_path
):
    table = accounts_table(tmp_path / "store", checkpoint_interval=1000)
    source = tmp_path / "changelog"
    job = IngestJob(spark, table, server("s1"))
    history: list[tuple[int, Change]] = []
    for round_ in range(1, 3):
        write_changelog(source, f"{round_:03d}.json", batch(round_))
        result = job.run_directory(str(source), "json")
        history += [(result.base + i, c) for i, c in enumerate(batch(round_))]
    before = log_files(spark, job)
    # The job dies right after its checkpoint is durable: nothing it covers is deleted yet.
    checkpoint = job.manifest.write_checkpoint(job.state)
    # ... or half way through deleting them.
    Storage(spark).delete(f"{job.manifest.directory}/{before[0][0]:012d}-{before[0][1]}.json")

    restarted = IngestJob(spark, table, server("s1")).start()
    assert restarted.state == job.state
    assert restarted.state.checkpoint_seq == checkpoint.seq
    write_changelog(source, "003.json", batch(3))
    result = restarted.run_directory(str(source), "json")
    history += [(result.base + i, c) for i, c in enumerate(batch(3))]
    assert_broker_sees(spark, follower, restarted.client, "accounts", history)

    # The next checkpoint prunes the leftovers with everything else it covers.
    newest = restarted.checkpoint()
    assert log_files(spark, restarted) == [(newest.seq, CHECKPOINT)]
    again = IngestJob(spark, table, server("s1")).start()
    assert again.state == restarted.state == ManifestState.from_records(again.manifest.records())
    assert_broker_sees(spark, follower, again.client, "accounts", history)


def test_the_checkpoint_interval_and_grace_period_come_from_the_table_definition(tmp_path: Path):
    table = accounts_table(tmp_path, checkpoint_interval=7, gc_grace="90s")
    assert (table.checkpoint_interval, table.gc_grace_ms) == (7, 90_000)
    default = accounts_table(tmp_path)
    assert (default.checkpoint_interval, default.gc_grace_ms) == (100, 600_000)
    assert accounts_table(tmp_path, gc_grace_ms=0).gc_grace_ms == 0
