"""The batch pipeline end to end: real Spark, real Redis, checked as a broker would read it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from horizon_broker.ingest import updater
from horizon_broker.ingest.job import IngestJob
from tests.ingest.conftest import (
    COLUMNS,
    Change,
    accounts_table,
    assert_broker_sees,
    assert_every_snapshot_answers_the_replay,
    broker_view,
    replay,
    stamp,
    visible_at,
    visible_rows,
)

SCHEMA = "user_id string, balance bigint, seq bigint, deleted boolean"


def frame(spark: Any, changes: list[Change]) -> Any:
    return spark.createDataFrame([tuple(c.as_row()[k] for k in COLUMNS) for c in changes], SCHEMA)


def run(job: IngestJob, spark: Any, changes: list[Change], log: list[tuple[int, Change]]) -> Any:
    result = job.run_batch(frame(spark, changes))
    log.extend(stamp(changes, result.base))
    return result


def test_account_balances_with_upsert_show_only_the_latest_balance(
    spark, server, follower, tmp_path
):
    table = accounts_table(tmp_path)
    client = server("s1")
    job = IngestJob(spark, table, client).start()
    log: list[tuple[int, Change]] = []
    averages = []
    for changes in (
        [Change("abc-12", 100, 1), Change("abc-13", 102, 1)],
        [Change("abc-12", 200, 2)],
        [Change("abc-13", 300, 2)],
    ):
        run(job, spark, changes, log)
        seen = assert_broker_sees(spark, follower, client, "accounts", log)
        rows = visible_at(seen.stored, seen.lwm)
        averages.append(sum(r["balance"] for r in rows) / len(rows))
    assert averages == [101, 151, 250]
    # Every superseded version was closed by the updater: overwrite segments replaced the others.
    segments = follower.view("accounts").visible_segments
    assert any(segment.minor_version > 0 for segment in segments)


def test_account_balances_without_upsert_keep_every_version(spark, server, follower, tmp_path):
    table = accounts_table(
        tmp_path, mode="append", comparison=[], delete_column=None, primary_key=[]
    )
    client = server("s1")
    job = IngestJob(spark, table, client).start()
    averages = []
    for changes in (
        [Change("abc-12", 100, 1), Change("abc-13", 102, 1)],
        [Change("abc-12", 200, 2)],
        [Change("abc-13", 300, 2)],
    ):
        job.run_batch(frame(spark, changes))
        view = broker_view(follower, client, "accounts")
        rows = visible_rows(spark, view.visible_segments, view.lwm)
        averages.append(round(sum(r["balance"] for r in rows) / len(rows), 1))
    assert averages == [101, 134, 175.5]
    balances = sorted(r["balance"] for r in rows if r["user_id"] == "abc-12")
    assert balances == [100, 200]


def test_out_of_order_records_lose_and_are_stored_with_an_empty_interval(
    spark, server, follower, tmp_path
):
    table = accounts_table(tmp_path)
    client = server("s1")
    job = IngestJob(spark, table, client).start()
    log: list[tuple[int, Change]] = []
    run(job, spark, [Change("a", 1, 5), Change("b", 1, 2), Change("b", 2, 1)], log)
    assert_broker_sees(spark, follower, client, "accounts", log)
    run(job, spark, [Change("a", 2, 3), Change("c", 1, 1), Change("a", 3, 5)], log)
    stored = assert_broker_sees(spark, follower, client, "accounts", log).stored
    empty = sorted((r["user_id"], r["seq"]) for r in stored if r["validFrom"] == r["validUntil"])
    assert empty == [("a", 3), ("b", 1)]
    # a's tie at seq 5 goes to the later record in source order.
    current = {r["user_id"]: r["balance"] for r in stored if r["validUntil"] is None}
    assert current == {"a": 3, "b": 1, "c": 1}


def test_out_of_order_records_are_dropped_when_configured(spark, server, follower, tmp_path):
    table = accounts_table(tmp_path, out_of_order="drop")
    client = server("s1")
    job = IngestJob(spark, table, client).start()
    log: list[tuple[int, Change]] = []
    run(job, spark, [Change("a", 1, 5), Change("a", 9, 4)], log)
    run(job, spark, [Change("a", 2, 3)], log)
    stored = assert_broker_sees(spark, follower, client, "accounts", log).stored
    assert sorted(r["balance"] for r in stored) == [1]


@pytest.mark.parametrize("broadcast_updates", [True, False], ids=["broadcast", "shuffled"])
def test_insert_update_delete_insert_keeps_a_chain_visible_at_every_snapshot(
    spark, server, follower, tmp_path, monkeypatch, broadcast_updates
):
    """Kudu's example: INSERT 1, UPDATE 2, DELETE, INSERT 3 - across batches and inside one.

    Also with the updater's join of many updates (shuffled instead of broadcast)."""
    if not broadcast_updates:
        monkeypatch.setattr(updater, "BROADCAST_UPDATES", -1)
    table = accounts_table(tmp_path)
    client = server("s1")
    job = IngestJob(spark, table, client).start()
    log: list[tuple[int, Change]] = []
    run(job, spark, [Change("row", 1, 1)], log)
    run(job, spark, [Change("row", 2, 2)], log)
    run(job, spark, [Change("row", 2, 3, deleted=True)], log)
    assert_broker_sees(spark, follower, client, "accounts", log)  # deleted: nothing visible
    run(job, spark, [Change("row", 3, 4)], log)
    one_batch = [
        Change("other", 1, 1),
        Change("other", 2, 2),
        Change("other", 0, 3, deleted=True),
        Change("other", 3, 4),
        Change("other", 9, 2),  # older than the re-insert: loses
    ]
    run(job, spark, one_batch, log)
    seen = assert_broker_sees(spark, follower, client, "accounts", log)

    # Time travel: at every commit timestamp, exactly the replayed version is visible.
    for ts, _ in log:
        for snapshot in (ts - 1, ts):
            rows = visible_at(seen.stored, snapshot)
            expected = {k: v.balance for k, v in replay(log, snapshot).items()}
            assert {r["user_id"]: r["balance"] for r in rows} == expected, snapshot
    assert seen.lwm >= max(ts for ts, _ in log)


def test_the_updater_finds_each_rows_segment_under_a_root_that_needs_uri_escaping(
    spark, server, follower, tmp_path
):
    """Rows learn their segment from Spark's file path, which is percent-encoded (each segment
    rewritten alone: merged, every row would go to the one rewrite)."""
    table = accounts_table(
        tmp_path / "a root%20with space", key_partitions=3, rewrite_target_rows=0
    )
    client = server("s1")
    job = IngestJob(spark, table, client).start()
    log: list[tuple[int, Change]] = []
    run(job, spark, [Change(f"k{i}", i, 1) for i in range(12)], log)
    second = run(job, spark, [Change(f"k{i}", 100 + i, 2) for i in range(0, 12, 2)], log)
    assert second.updated_segments == 3
    seen = assert_broker_sees(spark, follower, client, "accounts", log)
    assert len(seen.stored) == 18


def test_segment_files_hold_current_versions_by_key_then_history_by_valid_from(
    spark, server, follower, tmp_path
):
    """The layout readers skip by: first-generation segments and their rewrites alike."""
    import random

    import pyarrow.parquet as pq

    table = accounts_table(tmp_path, key_partitions=2)
    client = server("s1")
    job = IngestJob(spark, table, client).start()
    log: list[tuple[int, Change]] = []
    keys = [f"k{i:03d}" for i in range(200)]
    random.Random(7).shuffle(keys)
    run(job, spark, [Change(k, 1, 1) for k in keys], log)
    run(job, spark, [Change(k, 2, 2) for k in keys[:70]], log)
    run(job, spark, [Change(k, 3, 3) for k in keys[50:90]], log)
    view = broker_view(follower, client, "accounts")
    assert {s.minor_version for s in view.visible_segments} != {0}  # rewrites were read too
    for segment in view.visible_segments:
        for location in segment.location:
            rows = pq.read_table(location.removeprefix("file:")).to_pylist()
            current = [r for r in rows if r["validUntil"] is None]
            assert rows[: len(current)] == current, location
            history = rows[len(current) :]
            assert [r["user_id"] for r in current] == sorted(r["user_id"] for r in current)
            assert [r["validFrom"] for r in history] == sorted(r["validFrom"] for r in history)
    assert_broker_sees(spark, follower, client, "accounts", log)


@pytest.mark.parametrize(
    ("driver_batch_rows", "actions"),
    [
        (0, {"read and count", "resolve", "write segments", "updater rewrite"}),
        (10_000, {"collect on the driver", "resolve on the driver", "write segments",
                  "updater rewrite"}),
    ],
    ids=["on-spark", "on-the-driver"],
)  # fmt: skip
def test_a_slow_updater_cadence_holds_the_low_watermark_below_pending_updates(
    spark, server, follower, tmp_path, driver_batch_rows, actions
):
    table = accounts_table(tmp_path, update_cadence=2, driver_batch_rows=driver_batch_rows)
    client = server("s1")
    job = IngestJob(spark, table, client).start()
    log: list[tuple[int, Change]] = []
    run(job, spark, [Change("a", 1, 1), Change("b", 1, 1)], log)
    second = run(job, spark, [Change("c", 1, 1), Change("a", 2, 2)], log)
    # a's first version is not closed yet: the LWM stops just below the change that closes it.
    lwm = assert_broker_sees(spark, follower, client, "accounts", log).lwm
    assert lwm == second.base + 1 - 1  # 'a' is the second change of the batch
    assert second.updated_segments == 0
    assert second.pending_updates == 1  # the updater's backlog, as the metrics show it
    third = run(job, spark, [Change("b", 2, 2)], log)
    assert third.updated_segments > 0 and third.pending_updates == 0
    # A batch times itself: its Spark actions, its updater run among them, within its total.
    stages = dict(third.stage_seconds)
    assert actions <= set(stages)
    assert third.seconds is not None and 0 < sum(stages.values()) <= third.seconds
    lwm = assert_broker_sees(spark, follower, client, "accounts", log).lwm
    assert lwm == third.high


def test_a_batch_commit_counts_the_updates_of_each_segment_it_supersedes_versions_in(
    spark, server, follower, tmp_path
):
    table = accounts_table(tmp_path, update_cadence=3, key_partitions=3)
    client = server("s1")
    job = IngestJob(spark, table, client).start()
    log: list[tuple[int, Change]] = []
    keys = [f"k{i}" for i in range(12)]
    first = run(job, spark, [Change(key, 1, 1) for key in keys], log)
    segment_of = {
        user_id: (segment.interval.start_ms, segment.partition)
        for segment in first.segments
        for path in segment.location
        for user_id in pq.read_table(path.removeprefix("file:"), columns=["user_id"])[
            "user_id"
        ].to_pylist()
    }
    # k0 twice (one update of its stored version), k1 deleted, k2 out of order (no update),
    # k3 once, and a new key (nothing to update).
    second = [
        Change("k0", 2, 2), Change("k0", 3, 3), Change("k1", 0, 2, deleted=True),
        Change("k2", 9, 0), Change("k3", 2, 2), Change("new", 1, 1),
    ]  # fmt: skip
    run(job, spark, second, log)
    expected: dict[tuple[int, int], int] = {}
    for key in ("k0", "k1", "k3"):
        expected[segment_of[key]] = expected.get(segment_of[key], 0) + 1
    (pending,) = job.state.pending.values()
    assert {(chunk, seg): count for chunk, seg, count in pending["targets"]} == expected
    assert job.flush_updates() == len(expected)
    assert_broker_sees(spark, follower, client, "accounts", log)


def test_pending_updates_committed_without_their_segment_counts_are_still_applied(
    spark, server, follower, tmp_path
):
    """Commits written before batches recorded their targets: the updater finds them itself."""
    table = accounts_table(tmp_path, update_cadence=3)
    client = server("s1")
    job = IngestJob(spark, table, client).start()
    log: list[tuple[int, Change]] = []
    run(job, spark, [Change("a", 1, 1), Change("b", 1, 1), Change("c", 1, 1)], log)
    run(job, spark, [Change("a", 2, 2)], log)
    run(job, spark, [Change("b", 2, 2), Change("a", 3, 3)], log)
    assert len(job.state.pending) == 2
    for path in Path(job.manifest.directory.removeprefix("file:")).glob("*-commit.json"):
        body = json.loads(path.read_text())
        if body.pop("targets", None):
            path.write_text(json.dumps(body))
    restarted = IngestJob(spark, table, client).start()
    assert all("targets" not in item for item in restarted.state.pending.values())
    assert restarted.flush_updates() > 0
    assert not restarted.state.pending
    assert_broker_sees(spark, follower, client, "accounts", log)


def test_the_updater_keeps_each_time_chunks_rewrite_in_its_own_chunk_at_every_snapshot(
    spark, server, follower, tmp_path
):
    """Overwrite partition numbers are allocated per chunk, so two chunks' rewrites share them:
    each rewritten segment must be announced with its own chunk's files (once, the rewrite of
    the last chunk was announced in every chunk: its history four times, the others' lost)."""
    table = accounts_table(tmp_path, time_column="seq", granularity="HOUR", key_partitions=2)
    client = server("s1")
    job = IngestJob(spark, table, client).start()
    hour = 3_600_000
    log: list[tuple[int, Change]] = []
    keys = [f"k{i}" for i in range(6)]
    for version in range(3):
        changes = [
            Change(key, 10 * version + i, chunk * hour + version + 1)
            for i, key in enumerate(keys)
            for chunk in [i % 3]
        ]
        run(job, spark, changes, log)
    assert job.flush_updates() == 0  # the updater ran after every batch
    view = broker_view(follower, client, "accounts")
    chunks = {segment.interval.start_ms for segment in view.visible_segments}
    assert chunks == {0, hour, 2 * hour}
    assert assert_every_snapshot_answers_the_replay(spark, follower, client, log) >= 3


def test_rows_land_in_the_time_chunk_of_their_time_column(spark, server, follower, tmp_path):
    table = accounts_table(tmp_path, time_column="seq", granularity="HOUR", key_partitions=1)
    client = server("s1")
    job = IngestJob(spark, table, client).start()
    hour = 3_600_000
    log: list[tuple[int, Change]] = []
    before = time.time()
    result = run(job, spark, [Change("a", 1, 10), Change("b", 1, hour + 5)], log)
    assert sorted(s.interval.start_ms for s in result.segments) == [0, hour]
    # Its oldest event happened at 10 ms after the epoch: the metrics' event -> announced.
    assert result.event_to_announced_s is not None
    assert before - 0.010 <= result.event_to_announced_s <= time.time() - 0.010
    run(job, spark, [Change("a", 2, 2 * hour)], log)  # a moves to another chunk
    assert_broker_sees(spark, follower, client, "accounts", log)
