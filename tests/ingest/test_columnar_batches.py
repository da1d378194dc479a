"""Batches resolved as Arrow columns on the driver store exactly what the Spark path stores.

Two tables take the same changelog, batch by batch: one runs batches of more than one row as
columns on the driver (``driver_batch_rows = 1``, the default ``driver_columnar_rows``), the
other runs every batch on Spark (``driver_batch_rows = 0``). After every batch both hold the same
versions with the same validity, up to where each table's clock put its commit timestamps
(compared as batch number and position in the batch). The changelog runs past
:data:`ingest.key_index.MAX_INDEX_LEVELS` batches, so the batch that resolves against a
partition's whole index and writes its full level (as columns too) and the levels stacked after
it are covered, and the updater runs every second batch. An append table is compared the same
way.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from ingest import key_index
from ingest.columnar.batch import RESOLVE_ACTION
from ingest.driver_batches import COLLECT_ACTION
from ingest.job import IngestJob
from ingest.table import TableDefinition
from tests.ingest.conftest import (
    Change,
    accounts_table,
    broker_view,
    replay,
    segment_rows,
    stamp,
    visible_at,
)
from tests.ingest.test_pipeline import frame
from tests.ingest.test_small_batches import _normalized, _position


def _changelog(seed: int, batches: int) -> list[list[Change]]:
    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(40)]
    return [
        [
            Change(rng.choice(keys), rng.randrange(1000), rng.choice([None, *range(1, 9)]),
                   rng.random() < 0.1)
            for _ in range(rng.randrange(2, 60))
        ]
        for _ in range(batches)
    ]  # fmt: skip


def test_batches_resolved_as_columns_store_what_spark_stores(
    spark: Any, server: Any, follower: Any, tmp_path: Path
) -> None:
    columns = IngestJob(
        spark,
        accounts_table(tmp_path / "c", name="as_columns", driver_batch_rows=1, update_cadence=2),
        server("columnar-driver"),
    ).start()
    on_spark = IngestJob(
        spark,
        accounts_table(tmp_path / "s", name="on_spark", driver_batch_rows=0, update_cadence=2),
        server("columnar-spark"),
    ).start()
    bases: dict[str, list[tuple[int, int]]] = {"as_columns": [], "on_spark": []}
    log: list[tuple[int, Change]] = []
    on_columns = 0
    depths: list[int] = []
    batches = _changelog(seed=5, batches=2 * key_index.MAX_INDEX_LEVELS + 2)
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
    for changes in _changelog(seed=3, batches=3):
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


def _events_table(root: Any, name: str, driver_batch_rows: int) -> TableDefinition:
    """Composite key, an event-time column choosing hourly chunks, transactions, and columns the
    driver only carries through (decimal, date, timestamp, double)."""
    return TableDefinition.from_dict(
        {
            "name": name,
            "columns": {"tenant": "string", "id": "bigint", "amount": "decimal(12,2)",
                        "day": "date", "at": "timestamp", "seq": "int", "tx": "bigint",
                        "score": "double"},
            "primary_key": ["tenant", "id"],
            "comparison": ["seq"],
            "time_column": "at",
            "granularity": "HOUR",
            "transaction_column": "tx",
            "key_partitions": 3,
            "storage_root": str(root),
            "driver_batch_rows": driver_batch_rows,
        }
    )  # fmt: skip


def _event_files(directory: Path, number: int, rng: random.Random) -> None:
    """Three changelog files of one batch (three spans of commit timestamps)."""
    directory.mkdir(parents=True, exist_ok=True)
    for part in range(3):
        lines = []
        for _ in range(rng.randrange(2, 25)):
            hour = rng.randrange(3)
            lines.append(json.dumps({
                "tenant": rng.choice(["t1", "t2"]), "id": rng.randrange(12),
                "amount": round(rng.uniform(0, 100), 2), "day": f"2026-11-{20 + hour:02d}",
                "at": None if rng.random() < 0.1 else f"2026-11-26T{10 + hour:02d}:15:00Z",
                "seq": rng.choice([None, 1, 2, 3, 4]), "tx": rng.choice([None, None, number * 10]),
                "score": rng.random(),
            }))  # fmt: skip
        (directory / f"{number:03d}-{part}.json").write_text("\n".join(lines) + "\n")


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
        _event_files(tmp_path / "changelog", number, rng)
        for rows, job in jobs.items():
            result = job.run_directory(str(tmp_path / "changelog"), "json")
            assert not result.skipped
            bases[rows].append((result.base, result.high))
            assert (RESOLVE_ACTION in job.action_seconds) == (rows > 0)
        seen = {}
        for rows, job in jobs.items():
            view = broker_view(follower, job.client, job.table.name)
            stored = []
            for segment in view.visible_segments:
                for location in segment.location:
                    for row in pq.read_table(location.removeprefix("file:")).to_pylist():
                        row["validFrom"] = _position(row["validFrom"], bases[rows])
                        row["validUntil"] = _position(row["validUntil"], bases[rows])
                        row.pop("_sourceFile")
                        stored.append((segment.interval.start_ms, sorted(row.items(), key=repr)))
            seen[rows] = sorted(stored, key=repr)
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
