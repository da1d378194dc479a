"""Small batches on the driver store exactly what the Spark path stores.

Two tables take the same changelog, batch by batch: one lets small batches run on the driver
(the default), the other runs every batch on Spark (``driver_batch_rows = 0``). After every batch
both hold the same versions with the same validity, up to where each table's clock put its
commit timestamps (compared as batch number and position in the batch), and the updater's
rewrites and the key index levels leave them the same.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from horizon_broker.ingest import key_index
from horizon_broker.ingest.job import IngestJob
from horizon_broker.ingest.table import TableDefinition
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


def _changelog(
    seed: int,
    batches: int,
    *,
    keys: int = 12,
    rows: tuple[int, int] = (1, 9),
    seqs: int = 7,
    deletes: float = 0.15,
) -> list[list[Change]]:
    """Random batches of changes to ``keys`` keys: a random number of rows in ``rows``, sequence
    numbers below ``seqs`` or none, a share ``deletes`` of them deletes."""
    rng = random.Random(seed)
    names = [f"k{i}" for i in range(keys)]
    return [
        [
            Change(rng.choice(names), rng.randrange(1000), rng.choice([None, *range(1, seqs)]),
                   rng.random() < deletes)
            for _ in range(rng.randrange(*rows))
        ]
        for _ in range(batches)
    ]  # fmt: skip


def _position(ts: int | None, bases: list[tuple[int, int]]) -> tuple[int, int] | None:
    """A commit timestamp as (batch number, position in the batch)."""
    if ts is None:
        return None
    for number, (base, high) in enumerate(bases):
        if base <= ts <= high:
            return number, ts - base
    raise AssertionError(f"timestamp {ts} is in no batch")


def _normalized(rows: list[dict[str, Any]], bases: list[tuple[int, int]]) -> list[tuple[Any, ...]]:
    """Rows with their commit timestamps as (batch number, position in the batch)."""

    def position(ts: int | None) -> tuple[int, int] | None:
        return _position(ts, bases)

    return sorted(
        (
            (row["user_id"], row["balance"], row["seq"], row["deleted"],
             position(row["validFrom"]), position(row["validUntil"]))
            for row in rows
        ),
        key=repr,
    )  # fmt: skip


def test_driver_rows_batches_on_the_driver_store_what_spark_stores(
    spark: Any, server: Any, follower: Any, tmp_path: Any
) -> None:
    on_driver = IngestJob(
        spark, accounts_table(tmp_path / "d", name="on_driver"), server("small-driver")
    ).start()
    on_spark = IngestJob(
        spark, accounts_table(tmp_path / "s", name="on_spark", driver_batch_rows=0),
        server("small-spark"),
    ).start()  # fmt: skip
    bases: dict[str, list[tuple[int, int]]] = {"on_driver": [], "on_spark": []}
    log: list[tuple[int, Change]] = []
    # Past one full index level on the Spark path (its levels stack up to MAX_INDEX_LEVELS, the
    # next batch resolves against the whole index) and a level stacked on it.
    for number, changes in enumerate(_changelog(seed=7, batches=key_index.MAX_INDEX_LEVELS + 2)):
        for job in (on_driver, on_spark):
            result = job.run_batch(frame(spark, changes))
            bases[job.table.name].append((result.base, result.high))
            actions = set(job.action_seconds)
            if job is on_driver:
                assert "collect on the driver" in actions and "read and count" not in actions
                log.extend(stamp(changes, result.base))
            else:
                assert "read and count" in actions, actions
        seen = {}
        for job in (on_driver, on_spark):
            view = broker_view(follower, job.client, job.table.name)
            stored = segment_rows(spark, view.visible_segments)
            seen[job.table.name] = _normalized(stored, bases[job.table.name])
            if job is on_driver:
                rows = visible_at(stored, view.lwm)
                assert {row["user_id"]: Change(**row) for row in rows} == replay(log, view.lwm)
        assert seen["on_driver"] == seen["on_spark"], f"after batch {number}"
    # Folded: a small batch's level replaces the small levels under it.
    for version in on_driver.state.key_index.values():
        assert len(version.levels) == 1
    assert not on_driver.state.pending and not on_spark.state.pending


def _stored(follower: Any, job: IngestJob, bases: list[tuple[int, int]]) -> list[Any]:
    """Every stored row of the table's visible segments with its time chunk, its commit
    timestamps as (batch number, position in the batch) and without its source file."""
    import pyarrow.parquet as pq

    view = broker_view(follower, job.client, job.table.name)
    stored = []
    for segment in view.visible_segments:
        for location in segment.location:
            for row in pq.read_table(location.removeprefix("file:")).to_pylist():
                row["validFrom"] = _position(row["validFrom"], bases)
                row["validUntil"] = _position(row["validUntil"], bases)
                row.pop("_sourceFile")
                stored.append((segment.interval.start_ms, sorted(row.items(), key=repr)))
    return sorted(stored, key=repr)


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


def _event_files(
    directory: Path,
    number: int,
    rng: random.Random,
    *,
    files: int = 2,
    rows: tuple[int, int] = (1, 7),
    ids: int = 5,
    seqs: tuple[int | None, ...] = (None, 1, 2, 3),
) -> None:
    """``files`` changelog files of one batch (as many spans of commit timestamps), each of a
    random number of rows in ``rows``, of ``ids`` ids per tenant."""
    directory.mkdir(parents=True, exist_ok=True)
    for part in range(files):
        lines = []
        for _ in range(rng.randrange(*rows)):
            hour = rng.randrange(3)
            lines.append(json.dumps({
                "tenant": rng.choice(["t1", "t2"]), "id": rng.randrange(ids),
                "amount": round(rng.uniform(0, 100), 2), "day": f"2026-11-{20 + hour:02d}",
                "at": None if rng.random() < 0.1 else f"2026-11-26T{10 + hour:02d}:15:00Z",
                "seq": rng.choice(seqs), "tx": rng.choice([None, None, number * 10]),
                "score": rng.random(),
            }))  # fmt: skip
        (directory / f"{number:03d}-{part}.json").write_text("\n".join(lines) + "\n")


def test_time_chunks_transactions_and_many_source_files_agree_on_both_paths(
    spark: Any, server: Any, follower: Any, tmp_path: Path
) -> None:
    rng = random.Random(11)
    jobs = {
        driver_rows: IngestJob(
            spark, _events_table(tmp_path / f"t{driver_rows}", f"events{driver_rows}", driver_rows),
            server(f"events-{driver_rows}"),
        ).start()
        for driver_rows in (10_000, 0)
    }  # fmt: skip
    bases: dict[int, list[tuple[int, int]]] = {rows: [] for rows in jobs}
    for number in range(6):
        _event_files(tmp_path / "changelog", number, rng)
        for rows, job in jobs.items():
            result = job.run_directory(str(tmp_path / "changelog"), "json")
            assert not result.skipped
            bases[rows].append((result.base, result.high))
            assert ("collect on the driver" in job.action_seconds) == (rows > 0)
        seen = {rows: _stored(follower, job, bases[rows]) for rows, job in jobs.items()}
        assert seen[10_000] == seen[0], f"after batch {number}"


def test_a_source_whose_columns_cannot_be_null_is_ingested_on_the_driver(
    spark: Any, server: Any, follower: Any, tmp_path: Path
) -> None:
    """Columns Spark knows to be non-null (literals, ``concat`` of non-null values) are still
    written nullable: the rows that carry earlier index entries into a level hold no values."""
    from pyspark.sql import functions as F

    job = IngestJob(spark, accounts_table(tmp_path, name="strict"), server("strict")).start()
    log: list[tuple[int, Change]] = []
    for number in range(4):
        ids = spark.range(number * 3, number * 3 + 5)  # overlapping: updates and new keys
        frame = ids.select(
            F.concat(F.lit("u"), F.col("id").cast("string")).alias("user_id"),
            (F.col("id") * 10 + number).alias("balance"),
            F.lit(number + 1).cast("long").alias("seq"),
            F.lit(False).alias("deleted"),
        )
        assert not any(field.nullable for field in frame.schema.fields)
        result = job.run_batch(frame)
        assert "resolve on the driver" in job.action_seconds
        rows = sorted(range(number * 3, number * 3 + 5))
        log.extend(
            (result.base + i, Change(f"u{k}", k * 10 + number, number + 1))
            for i, k in enumerate(rows)
        )
    view = broker_view(follower, job.client, "strict")
    rows = visible_at(segment_rows(spark, view.visible_segments), view.lwm)
    assert {row["user_id"]: Change(**row) for row in rows} == replay(log, view.lwm)
