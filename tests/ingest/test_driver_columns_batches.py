"""Batches resolved as Arrow columns on the driver store exactly what the Spark path stores.

Two tables take the same changelog, batch by batch: one runs batches of more than one row as
columns on the driver (``driver_batch_rows = 1``, the default ``driver_columnar_rows``), the
other runs every batch on Spark (``driver_batch_rows = 0``). After every batch both hold the same
versions with the same validity, up to where each table's clock put its commit timestamps
(compared as batch number and position in the batch). The changelog runs past
:data:`horizon_broker.ingest.key_index.MAX_INDEX_LEVELS` batches, so the batch that resolves against a
partition's whole index and writes its full level (as columns too) and the levels stacked after
it are covered, and the updater runs every second batch (keeping segments' closed files as they
are, up to a bound). An append table is compared the same way.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from horizon_broker.ingest import key_index
from horizon_broker.ingest.driver_batches import COLLECT_ACTION
from horizon_broker.ingest.driver_columns.batch import RESOLVE_ACTION
from horizon_broker.ingest.job import IngestJob
from horizon_broker.ingest.segments import is_open_file
from horizon_broker.ingest.update_rewrite import MAX_CLOSED_FILES
from tests.ingest.conftest import (
    Change,
    accounts_table,
    broker_view,
    replay,
    segment_rows,
    stamp,
    visible_at,
)
from tests.ingest.test_driver_rows_batches import (
    _changelog,
    _event_files,
    _events_table,
    _normalized,
    _stored,
)
from tests.ingest.test_pipeline import frame


def test_batches_resolved_as_columns_store_what_spark_stores(
    spark: Any, server: Any, follower: Any, tmp_path: Path
) -> None:
    # Each segment rewritten alone, so that the closed files a rewrite keeps add up (below).
    alone = {"update_cadence": 2, "rewrite_target_rows": 0}
    columns = IngestJob(
        spark,
        accounts_table(tmp_path / "c", name="as_columns", driver_batch_rows=1, **alone),
        server("columnar-driver"),
    ).start()
    on_spark = IngestJob(
        spark,
        accounts_table(tmp_path / "s", name="on_spark", driver_batch_rows=0, **alone),
        server("columnar-spark"),
    ).start()
    bases: dict[str, list[tuple[int, int]]] = {"as_columns": [], "on_spark": []}
    log: list[tuple[int, Change]] = []
    on_columns = 0
    depths: list[int] = []
    batches = _changelog(
        seed=5, batches=key_index.MAX_INDEX_LEVELS + 2, keys=40, rows=(2, 60), seqs=9,
        deletes=0.1,
    )  # fmt: skip
    for number, changes in enumerate(batches):
        for job in (columns, on_spark):
            result = job.run_batch(frame(spark, changes))
            bases[job.table.name].append((result.base, result.high))
            actions = set(job.action_seconds)
            if job is columns:
                assert COLLECT_ACTION in actions
                on_columns += RESOLVE_ACTION in actions
                depths.append(max(len(v.levels) for v in job.state.key_index.values()))
                log.extend(stamp(changes, result.base))
            else:
                assert COLLECT_ACTION not in actions and "resolve" in actions
        seen = {}
        for job in (columns, on_spark):
            view = broker_view(follower, job.client, job.table.name)
            stored = segment_rows(spark, view.visible_segments)
            seen[job.table.name] = _normalized(stored, bases[job.table.name])
            if job is columns:
                rows = visible_at(stored, view.lwm)
                assert {row["user_id"]: Change(**row) for row in rows} == replay(log, view.lwm)
        assert seen["as_columns"] == seen["on_spark"], f"after batch {number}"
    # Every batch ran as columns, those that wrote a partition's full index too: the stack
    # grew to the most levels it may have, then started again from one level.
    assert on_columns == len(batches)
    assert max(depths) == key_index.MAX_INDEX_LEVELS
    assert any(after < before for before, after in itertools.pairwise(depths))
    # The driver's updater kept segments' closed files as they were (copied, next to one file
    # of the rows it closed) up to its bound, and merged them past it.
    view = broker_view(follower, columns.client, columns.table.name)
    closed = [sum(not is_open_file(p) for p in s.location) for s in view.visible_segments]
    assert 1 < max(closed) <= MAX_CLOSED_FILES
    # Every row group of a level is in key order: the full level writes the batch's entries
    # and the carried ones as two sorted runs, never one row group across both.
    level_files = sorted((tmp_path / "c").rglob(f"{key_index.INDEX_PARTITION_DIR}=*/*.parquet"))
    assert level_files
    for path in level_files:
        parquet = pq.ParquetFile(path)
        for group in range(parquet.metadata.num_row_groups):
            keys = parquet.read_row_group(group, columns=["user_id"])["user_id"].to_pylist()
            assert keys == sorted(keys), f"{path} row group {group}"


def test_an_append_table_as_columns_stores_what_spark_stores(
    spark: Any, server: Any, follower: Any, tmp_path: Path
) -> None:
    jobs = {
        rows: IngestJob(
            spark,
            accounts_table(tmp_path / f"a{rows}", name=f"events{rows}", mode="append",
                           delete_column=None, driver_batch_rows=rows),
            server(f"columnar-append-{rows}"),
        ).start()
        for rows in (1, 0)
    }  # fmt: skip
    bases: dict[int, list[tuple[int, int]]] = {rows: [] for rows in jobs}
    for changes in _changelog(seed=3, batches=3, keys=40, rows=(2, 60)):
        changes = [Change(c.user_id, c.balance, c.seq, False) for c in changes]
        for rows, job in jobs.items():
            result = job.run_batch(frame(spark, changes))
            bases[rows].append((result.base, result.high))
            assert (COLLECT_ACTION in job.action_seconds) == (rows > 0)
    seen = {}
    for rows, job in jobs.items():
        view = broker_view(follower, job.client, job.table.name)
        seen[rows] = _normalized(segment_rows(spark, view.visible_segments), bases[rows])
    assert seen[1] == seen[0] and len(seen[1]) > 0


def test_time_chunks_transactions_and_composite_keys_as_columns_agree_with_spark(
    spark: Any, server: Any, follower: Any, tmp_path: Path
) -> None:
    rng = random.Random(13)
    jobs = {
        driver_rows: IngestJob(
            spark, _events_table(tmp_path / f"t{driver_rows}", f"ev{driver_rows}", driver_rows),
            server(f"columnar-events-{driver_rows}"),
        ).start()
        for driver_rows in (1, 0)
    }  # fmt: skip
    bases: dict[int, list[tuple[int, int]]] = {rows: [] for rows in jobs}
    for number in range(key_index.MAX_INDEX_LEVELS + 2):  # past a full-level batch
        _event_files(
            tmp_path / "changelog", number, rng, files=3, rows=(2, 25), ids=12,
            seqs=(None, 1, 2, 3, 4),
        )  # fmt: skip
        for rows, job in jobs.items():
            result = job.run_directory(str(tmp_path / "changelog"), "json")
            assert not result.skipped
            bases[rows].append((result.base, result.high))
            assert (RESOLVE_ACTION in job.action_seconds) == (rows > 0)
        seen = {rows: _stored(follower, job, bases[rows]) for rows, job in jobs.items()}
        assert seen[1] == seen[0], f"after batch {number}"


def test_a_batch_over_driver_columnar_rows_runs_on_spark_and_the_next_small_one_as_columns(
    spark: Any, server: Any, follower: Any, tmp_path: Path
) -> None:
    table = accounts_table(tmp_path, driver_batch_rows=1, driver_columnar_rows=5)
    job = IngestJob(spark, table, server("columnar-bound")).start()
    log: list[tuple[int, Change]] = []
    big = [Change(f"k{i}", i, 1) for i in range(8)]
    result = job.run_batch(frame(spark, big))
    log.extend(stamp(big, result.base))
    assert "resolve" in job.action_seconds and RESOLVE_ACTION not in job.action_seconds
    small = [Change("k1", 100, 2), Change("k9", 9, 1), Change("k2", 50, 0)]
    result = job.run_batch(frame(spark, small))
    log.extend(stamp(small, result.base))
    assert RESOLVE_ACTION in job.action_seconds
    view = broker_view(follower, job.client, table.name)
    rows = visible_at(segment_rows(spark, view.visible_segments), view.lwm)
    assert {row["user_id"]: Change(**row) for row in rows} == replay(log, view.lwm)
