"""The history table of the compaction and live point-query benchmarks: ``accounts``, 4 days and
4 key partitions, 3 versions per key committed in an order unrelated to the key (row ``i`` of the
history is version ``i // keys`` of one key), and its latest-only copy (the floor)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

DAYS = 4
REGIONS = 16
VERSIONS_PER_KEY = 3
UPDATE_CADENCE = 10
TABLE = "accounts"


def definition(root: Path, retention_s: int) -> Any:
    """The table: updates applied every ``UPDATE_CADENCE`` batches, history kept
    ``retention_s``."""
    from horizon_broker.ingest.table import TableDefinition

    return TableDefinition.from_dict(
        {
            "name": TABLE,
            "columns": {
                "id": "bigint",
                "region": "string",
                "amount": "bigint",
                "seq": "bigint",
                "day": "date",
            },
            "primary_key": ["id"],
            "comparison": ["seq"],
            "time_column": "day",
            "granularity": "DAY",
            "key_partitions": 4,
            "storage_root": str(root),
            "retention_ms": retention_s * 1000,
            "update_cadence": UPDATE_CADENCE,
        }
    )


def _stride(keys: int) -> int:
    """A multiplier coprime with ``keys``: ``j -> j * stride % keys`` visits every key once, in
    an order unrelated to the key."""
    stride = 7919
    while math.gcd(stride, keys) != 1:
        stride += 2
    return stride


def rows_of(spark: Any, keys: int, start: int, end: int) -> Any:
    """Rows ``[start, end)`` of the history: row ``i`` is version ``i // keys`` of one key."""
    from pyspark.sql import functions as F

    index = F.col("id")
    key = (F.pmod(index, F.lit(keys)) * F.lit(_stride(keys))) % F.lit(keys)
    return (
        spark.range(start, end)
        .select(key.alias("k"), (index / F.lit(keys)).cast("long").alias("v"))
        .select(*version_columns(F.col("k"), F.col("v")))
    )


def version_columns(key: Any, version: Any) -> list[Any]:
    from pyspark.sql import functions as F

    return [
        key.alias("id"),
        F.concat(F.lit("r"), (F.abs(F.xxhash64(key)) % REGIONS).cast("string")).alias("region"),
        (F.abs(F.xxhash64(key, version)) % 10_000).cast("long").alias("amount"),
        version.alias("seq"),
        F.date_add(F.lit("2026-01-01").cast("date"), (key % DAYS).cast("int")).alias("day"),
    ]


def latest_only(spark: Any, keys: int, path: Path) -> None:
    """The floor: each key's newest version, one file per day, sorted by key."""
    from pyspark.sql import functions as F

    newest = F.lit(VERSIONS_PER_KEY - 1).cast("long")
    frame = spark.range(keys).select(*version_columns(F.col("id"), newest))
    first_day = F.lit("2026-01-01").cast("date")
    for offset in range(DAYS):
        # One write per day: hash or range partitioning of four values can share a file.
        (
            frame.where(F.col("day") == F.date_add(first_day, offset))
            .coalesce(1)
            .sortWithinPartitions("id")
            .write.mode("append")
            .option("parquet.block.size", 8 * 1024 * 1024)
            .parquet(str(path))
        )


def compact_whole_table(
    spark: Any, table: Any, client: Any, rows: int, follower: Any
) -> tuple[Any, Any, Any]:
    """One minor compaction of the whole table, published and shown by ``follower``: the
    compactor, its targets and its report."""
    from horizon_broker.compaction.plan import CompactionSettings
    from horizon_broker.compaction.run import Compactor

    settings = CompactionSettings(target_rows=max(rows, 1), target_bytes=4 * 1024**3)
    compactor = Compactor(spark, table, client, settings=settings, lease_s=120.0)
    targets = compactor.plan()
    report = compactor.compact(targets)
    if report.outcome != "published":
        raise SystemExit(f"the compaction did not publish: {report.outcome} {report.message}")
    outputs = {segment.id for segment in report.outputs}
    if not follower.wait_for(
        lambda f: outputs <= {s.id for s in f.view(TABLE).visible_segments}, 60
    ):
        raise SystemExit("the follower never showed the compacted segments")
    return compactor, targets, report
