"""Side-by-side query benchmark: Horizon's consistent read vs the query users write without it.

On the same data, in the same Spark session:

* **horizon** – the client's query rewritten by Horizon's SQL rewriter, reading the versioned
  segments (about three versions per key) through the visibility filter at the latest snapshot;
* **row_number** – what a user writes without Horizon over a table of all versions:
  ``ROW_NUMBER() OVER (PARTITION BY pk ORDER BY comparison DESC) = 1``;
* **floor** – a pre-materialized latest-only table (what perfect compaction would leave).

for a full aggregate, a filtered aggregate and a point lookup, at 1M and 5M rows. The three answers
are compared before any timing is trusted. The segment layout sorts current versions (``validUntil
IS NULL``) ahead of history and writes small row groups, so the Parquet row-group statistics on
``validUntil`` let Spark skip superseded rows.

Run: ``python -m bench.query [--quick] [--sizes 1000000,5000000]``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.report import print_table, summarize, write_results

VERSIONS_PER_KEY = 3
REGIONS = 16
QUERIES: dict[str, str] = {
    "full_aggregate": (
        "SELECT region, COUNT(*) AS n, SUM(amount) AS total FROM accounts GROUP BY region"
    ),
    "filtered_aggregate": (
        "SELECT region, COUNT(*) AS n, SUM(amount) AS total FROM accounts "
        "WHERE amount BETWEEN 1000 AND 2000 GROUP BY region"
    ),
    "point_lookup": "SELECT id, region, amount, updated_at FROM accounts WHERE id = {key}",
}


def build_data(spark: Any, rows: int, root: Path) -> dict[str, Any]:
    """Write the versioned segments, the all-versions table and the latest-only table."""
    from pyspark.sql import functions as F

    keys = rows // VERSIONS_PER_KEY
    base = spark.range(keys).withColumnRenamed("id", "id")
    # Three versions per key; commit timestamps grow with the version so chains are contiguous.
    versions = base.crossJoin(spark.range(VERSIONS_PER_KEY).withColumnRenamed("id", "v"))
    start = (F.col("id") * 7 + F.col("v") * 10_000_000).cast("long")
    versioned = versions.select(
        F.col("id"),
        (F.abs(F.xxhash64("id")) % REGIONS).cast("int").alias("region_no"),
        (F.abs(F.xxhash64("id", "v")) % 10_000).cast("long").alias("amount"),
        start.alias("updated_at"),
        start.alias("validFrom"),
        F.when(
            F.col("v") < VERSIONS_PER_KEY - 1, (F.col("id") * 7 + (F.col("v") + 1) * 10_000_000)
        )
        .cast("long")
        .alias("validUntil"),
    ).withColumn("region", F.concat(F.lit("r"), F.col("region_no").cast("string")))
    versioned = versioned.drop("region_no")
    snapshot = (keys * 7) + VERSIONS_PER_KEY * 10_000_000

    segments = root / "segments"
    (
        versioned.repartitionByRange(8, F.col("validUntil").isNotNull(), "id")
        .sortWithinPartitions(F.col("validUntil").isNotNull(), "id")
        .write.option("parquet.block.size", 4 * 1024 * 1024)
        .parquet(str(segments))
    )
    all_versions = root / "all_versions"
    (
        versioned.drop("validFrom", "validUntil")
        .repartitionByRange(8, "id")
        .sortWithinPartitions("id")
        .write.option("parquet.block.size", 4 * 1024 * 1024)
        .parquet(str(all_versions))
    )
    latest = root / "latest"
    (
        versioned.where(F.col("validUntil").isNull())
        .drop("validFrom", "validUntil")
        .repartitionByRange(8, "id")
        .sortWithinPartitions("id")
        .write.option("parquet.block.size", 4 * 1024 * 1024)
        .parquet(str(latest))
    )
    files = sorted(str(path) for path in segments.glob("*.parquet"))
    return {"keys": keys, "snapshot": snapshot, "segment_files": files, "root": root}


def horizon_rewriter(spark: Any, data: dict[str, Any]) -> Callable[[str], str]:
    """Register the segment view and return a function that rewrites a client query."""
    from broker.sql import Catalog, CatalogTable, rewrite
    from broker.sql.functions_from_spark import function_policy_from_spark
    from watermark.catalog import ColumnSpec

    view = "__horizon_accounts_g1"
    spark.read.parquet(*data["segment_files"]).createOrReplaceTempView(view)
    table = CatalogTable(
        name="accounts",
        columns=(
            ColumnSpec("id", "bigint"),
            ColumnSpec("amount", "bigint"),
            ColumnSpec("updated_at", "bigint"),
            ColumnSpec("region", "string"),
        ),
        primary_key=("id",),
        upsert=True,
        lwm=data["snapshot"],
        retention_horizon=0,
        source_view=view,
        segments=tuple(Path(f).name for f in data["segment_files"]),
        files=tuple(data["segment_files"]),
    )
    catalog = Catalog([table])
    policy = function_policy_from_spark(spark)
    return lambda sql: rewrite(sql, catalog, functions=policy).sql


def time_query(spark: Any, sql: str, repeats: int) -> tuple[list[float], list[Any]]:
    rows = spark.sql(sql).collect()  # warm-up: plans, file listing, JIT
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        rows = spark.sql(sql).collect()
        samples.append((time.perf_counter() - started) * 1000)
    return samples, rows


def run(sizes: list[int], repeats: int) -> dict[str, Any]:
    from broker.spark_session import create_spark_session

    spark = create_spark_session(master="local[2]", app_name="horizon-bench-query")
    results: dict[str, Any] = {}
    table_rows = []
    for size in sizes:
        root = Path(tempfile.mkdtemp(prefix=f"horizon-bench-query-{size}-"))
        try:
            data = build_data(spark, size, root)
            spark.read.parquet(str(root / "all_versions")).createOrReplaceTempView("all_versions")
            spark.read.parquet(str(root / "latest")).createOrReplaceTempView("latest_only")
            rewrite_sql = horizon_rewriter(spark, data)
            row_number_source = (
                "(SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY id ORDER BY "
                "updated_at DESC) AS rn FROM all_versions) WHERE rn = 1) AS accounts"
            )
            per_size: dict[str, Any] = {}
            for name, template in QUERIES.items():
                client_sql = template.format(key=data["keys"] // 2)
                variants = {
                    "horizon": rewrite_sql(client_sql),
                    "row_number": client_sql.replace("FROM accounts", f"FROM {row_number_source}"),
                    "floor": client_sql.replace("FROM accounts", "FROM latest_only AS accounts"),
                }
                answers = {}
                timings = {}
                for variant, sql in variants.items():
                    samples, rows = time_query(spark, sql, repeats)
                    timings[variant] = summarize(samples)
                    answers[variant] = sorted(tuple(row) for row in rows)
                if not answers["horizon"] == answers["row_number"] == answers["floor"]:
                    raise SystemExit(f"{name} at {size} rows: the three variants disagree")
                ratio_row_number = timings["row_number"]["p50"] / timings["horizon"]["p50"]
                ratio_floor = timings["horizon"]["p50"] / timings["floor"]["p50"]
                per_size[name] = {
                    "timings_ms": timings,
                    "speedup_vs_row_number": ratio_row_number,
                    "cost_vs_floor": ratio_floor,
                }
                table_rows.append(
                    (
                        f"{size:,}",
                        name,
                        f"{timings['horizon']['p50']:.0f}",
                        f"{timings['row_number']['p50']:.0f}",
                        f"{timings['floor']['p50']:.0f}",
                        f"{ratio_row_number:.1f}x",
                        f"{ratio_floor:.2f}x",
                    )
                )
            results[str(size)] = per_size
        finally:
            shutil.rmtree(root, ignore_errors=True)
    print_table(
        "Consistent read vs ROW_NUMBER vs latest-only floor (p50 ms, local[2])",
        ["rows", "query", "horizon", "row_number", "floor", "row_number/horizon", "horizon/floor"],
        table_rows,
    )
    spark.stop()
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    parser.add_argument("--sizes", help="comma-separated row counts (default 1000000,5000000)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if args.sizes:
        sizes = [int(part) for part in args.sizes.split(",")]
    else:
        sizes = [60_000] if args.quick else [1_000_000, 5_000_000]
    repeats = 2 if args.quick else args.repeats
    results = run(sizes, repeats)
    results["targets"] = {"full_aggregate_speedup_vs_row_number_at_5M": ">= 10x"}
    path = write_results("query", results)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
