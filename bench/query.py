"""Side-by-side query benchmark: Horizon's consistent read vs the query users write without it.

On the same data, in the same Spark session:

* **horizon** – what the broker runs: the client's query rewritten by Horizon's SQL rewriter
  (catalog built from a follower table view, visibility filter at the snapshot) over the temp view
  the broker's :class:`~horizon_broker.broker.spark.views.ViewCache` builds from the visible segment files;
* **row_number** – what a user writes without Horizon over a table of all versions:
  ``ROW_NUMBER() OVER (PARTITION BY pk ORDER BY comparison DESC) = 1``;
* **floor** – a pre-materialized latest-only table (what perfect compaction would leave).

for a full aggregate, a filtered aggregate and a point lookup, at 1M and 5M rows with three
versions per key (committed in an order unrelated to the key, like a real change stream), and at
1M rows with 1 and 10 versions per key (the same rows, fewer keys as the versions grow). The
three answers are compared before any timing is trusted, and the variants run interleaved, round
by round, so load on the machine hits all three alike.

The segments are written by ingestion's own writer (``horizon_broker.ingest.segments.write_segments``): one
directory per segment (key partition) with an open file (current versions, by key, so the id
statistics serve key lookups) and a closed file (history by ``validFrom``), 8 MiB row groups, and
described as ingestion announces them (greatest ``validFrom``, open files, greatest
``validUntil`` of the closed files). At the benchmark's snapshot every segment is settled and
every closed file ended before it, so the broker reads the open files without any test and skips
the closed ones.

Run: ``python -m bench.query [--quick] [--sizes 1000000,5000000] [--versions 1,3,10]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.report import print_table, summarize, write_results

VERSIONS_PER_KEY = 3
REGIONS = 16
SEGMENTS = 8
"""Key partitions of the benchmark table: one segment file each."""
BATCH_SPAN = 10_000_000_000
"""Commit timestamps of version ``v`` lie in ``[v * BATCH_SPAN, v * BATCH_SPAN + 1e9)``."""
TABLE_FILES = 8
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


def descriptor() -> Any:
    from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor

    return TableDescriptor(
        name="accounts",
        columns=(
            ColumnSpec("id", "bigint"),
            ColumnSpec("amount", "bigint"),
            ColumnSpec("updated_at", "bigint"),
            ColumnSpec("region", "string"),
        ),
        primary_key=("id",),
        comparison_columns=("updated_at",),
        key_partitions=SEGMENTS,
    )


def build_data(
    spark: Any, rows: int, root: Path, versions_per_key: int = VERSIONS_PER_KEY
) -> dict[str, Any]:
    """Write the versioned segments, the all-versions table and the latest-only table:
    ``rows`` versions in all, ``versions_per_key`` of each key."""
    from pyspark.sql import functions as F

    from horizon_broker.ingest.partitioning import key_partition
    from horizon_broker.ingest.segments import footer_summaries, write_segments
    from horizon_broker.ingest.storage import Storage

    table = descriptor()
    keys = rows // versions_per_key
    versions = spark.range(keys).crossJoin(
        spark.range(versions_per_key).withColumnRenamed("id", "v")
    )

    def commit_ts(version: Any) -> Any:
        # Commit order within a batch is unrelated to the key, as in a real change stream.
        jitter = F.pmod(F.xxhash64(F.col("id"), version), F.lit(1_000_000_000))
        return (version * F.lit(BATCH_SPAN) + jitter).cast("long")

    start = commit_ts(F.col("v"))
    versioned = versions.select(
        F.col("id"),
        (F.abs(F.xxhash64("id", "v")) % 10_000).cast("long").alias("amount"),
        start.alias("updated_at"),
        F.concat(F.lit("r"), (F.abs(F.xxhash64("id")) % REGIONS).cast("string")).alias("region"),
        start.alias("validFrom"),
        F.when(F.col("v") < versions_per_key - 1, commit_ts(F.col("v") + 1)).alias("validUntil"),
    )
    snapshot = versions_per_key * BATCH_SPAN

    storage = Storage(spark)
    written = write_segments(
        versioned.withColumn("_chunk", F.lit(0).cast("long")).withColumn(
            "_seg", key_partition(table.primary_key, SEGMENTS)
        ),
        [*table.column_names, "validFrom", "validUntil"],
        str(root / "segments"),
        SEGMENTS,
        storage,
        primary_key=table.primary_key,
    )
    summaries = footer_summaries(storage, list(written.values()))
    all_versions = versioned.drop("validFrom", "validUntil")
    latest = versioned.where(F.col("validUntil").isNull()).drop("validFrom", "validUntil")
    for name, frame in (("all_versions", all_versions), ("latest", latest)):
        (
            frame.repartitionByRange(TABLE_FILES, "id")
            .sortWithinPartitions("id")
            .write.option("parquet.block.size", 4 * 1024 * 1024)
            .parquet(str(root / name))
        )
    return {
        "keys": keys,
        "snapshot": snapshot,
        "segments": list(zip(written.values(), summaries, strict=True)),
        "table": table,
    }


def table_view(data: dict[str, Any]) -> Any:
    """The follower's picture of the benchmark table: one segment per key partition, described
    as ingestion announces it."""
    from horizon_broker.timeline.interval import Interval
    from horizon_broker.timeline.segment import Segment
    from horizon_broker.watermark.follower import TableState

    segments = tuple(
        Segment(
            table="accounts",
            interval=Interval(0, 86_400_000),
            version="v1",
            partition=written.partition,
            location=written.locations,
            row_count=summary.rows,
            size_bytes=written.size_bytes,
            max_valid_from=summary.max_valid_from,
            open_files=written.open_locations,
            max_valid_until=summary.max_valid_until,
        )
        for written, summary in data["segments"]
    )
    return TableState(
        table="accounts",
        descriptor=data["table"],
        generation=1,
        visible_segments=segments,
        lwm=data["snapshot"],
        retention_horizon=0,
        staleness_s=0.0,
        laggard=None,
    )


@contextmanager
def horizon_rewriter(spark: Any, view: Any) -> Iterator[Callable[[str], str]]:
    """Hold the broker's segment views of a table (a follower's ``TableState``) and yield the
    broker's query rewriter, as the broker runs a query at the view's LWM."""
    from horizon_broker.broker.engine.catalog import build_catalog
    from horizon_broker.broker.spark.views import ViewCache
    from horizon_broker.broker.sql import rewrite
    from horizon_broker.broker.sql.functions_from_spark import function_policy_from_spark

    catalog = build_catalog([view])
    policy = function_policy_from_spark(spark)
    views = ViewCache(spark)
    with views.lease([view]):
        yield lambda sql: rewrite(sql, catalog, functions=policy).sql
    views.clear()


def time_variants(
    spark: Any, variants: dict[str, str], repeats: int
) -> tuple[dict[str, list[float]], dict[str, list[Any]]]:
    """Time each variant ``repeats`` times, interleaved round by round, after one warm-up run."""
    answers = {name: spark.sql(sql).collect() for name, sql in variants.items()}
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, sql in variants.items():
            started = time.perf_counter()
            spark.sql(sql).collect()
            samples[name].append((time.perf_counter() - started) * 1000)
    return samples, answers


def measure_variants(
    spark: Any, variants: dict[str, str], repeats: int
) -> tuple[dict[str, dict[str, int]], dict[str, list[float]], dict[str, list[tuple]]]:
    """What each variant's scans read (one run), its timings (:func:`time_variants`) and its
    answer, sorted, for the caller to compare before trusting the timings."""
    scans = {}
    for variant, sql in variants.items():
        frame = spark.sql(sql)
        frame.collect()
        scans[variant] = scan_metrics(frame)
    samples, rows = time_variants(spark, variants, repeats)
    answers = {variant: sorted(tuple(row) for row in r) for variant, r in rows.items()}
    return scans, samples, answers


def scan_metrics(frame: Any) -> dict[str, int]:
    """Files and rows the (executed) query's Parquet scans read, from Spark's SQL metrics."""
    plan = frame._jdf.queryExecution().executedPlan()
    totals = {"files": 0, "rows_scanned": 0}
    pending = [plan]
    while pending:
        node = pending.pop()
        name = node.nodeName()
        if name == "AdaptiveSparkPlan":
            pending.append(node.executedPlan())
            continue
        if "QueryStage" in name:
            pending.append(node.plan())
            continue
        if name.startswith("Scan parquet"):
            metrics = node.metrics()
            totals["files"] += int(metrics.apply("numFiles").value())
            totals["rows_scanned"] += int(metrics.apply("numOutputRows").value())
        children = node.children()
        pending.extend(children.apply(i) for i in range(children.size()))
    return totals


def run(cases: list[tuple[int, int]], repeats: int) -> dict[str, Any]:
    """Each (rows, versions per key) case; results keyed ``"<rows>"`` at the default 3 versions
    per key, ``"<rows>x<versions>"`` otherwise."""
    from horizon_broker._core.spark_session import create_spark_session

    spark = create_spark_session(master="local[2]", app_name="horizon-bench-query")
    results: dict[str, Any] = {}
    table_rows = []
    for size, versions_per_key in cases:
        case = str(size) if versions_per_key == VERSIONS_PER_KEY else f"{size}x{versions_per_key}"
        root = Path(tempfile.mkdtemp(prefix=f"horizon-bench-query-{case}-"))
        try:
            data = build_data(spark, size, root, versions_per_key)
            spark.read.parquet(str(root / "all_versions")).createOrReplaceTempView("all_versions")
            spark.read.parquet(str(root / "latest")).createOrReplaceTempView("latest_only")
            row_number_source = (
                "(SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY id ORDER BY "
                "updated_at DESC) AS rn FROM all_versions) WHERE rn = 1) AS accounts"
            )
            per_size: dict[str, Any] = {}
            with horizon_rewriter(spark, table_view(data)) as rewrite_sql:
                for name, template in QUERIES.items():
                    client_sql = template.format(key=data["keys"] // 2)
                    variants = {
                        "horizon": rewrite_sql(client_sql),
                        "row_number": client_sql.replace(
                            "FROM accounts", f"FROM {row_number_source}"
                        ),
                        "floor": client_sql.replace(
                            "FROM accounts", "FROM latest_only AS accounts"
                        ),
                    }
                    scans, samples, answers = measure_variants(spark, variants, repeats)
                    if not answers["horizon"] == answers["row_number"] == answers["floor"]:
                        raise SystemExit(f"{name} at {case}: the three variants disagree")
                    timings = {variant: summarize(s) for variant, s in samples.items()}
                    ratio_row_number = statistics.median(
                        rn / h
                        for rn, h in zip(samples["row_number"], samples["horizon"], strict=True)
                    )
                    ratio_floor = statistics.median(
                        h / f for h, f in zip(samples["horizon"], samples["floor"], strict=True)
                    )
                    per_size[name] = {
                        "timings_ms": timings,
                        "speedup_vs_row_number": ratio_row_number,
                        "cost_vs_floor": ratio_floor,
                        "scans": scans,
                        "horizon_sql": variants["horizon"],
                    }
                    table_rows.append(
                        (
                            f"{size:,}",
                            versions_per_key,
                            name,
                            f"{timings['horizon']['p50']:.0f}",
                            f"{timings['row_number']['p50']:.0f}",
                            f"{timings['floor']['p50']:.0f}",
                            f"{ratio_row_number:.1f}x",
                            f"{ratio_floor:.2f}x",
                            f"{scans['horizon']['rows_scanned']:,}",
                            f"{scans['floor']['rows_scanned']:,}",
                        )
                    )
            results[case] = per_size
        finally:
            shutil.rmtree(root, ignore_errors=True)
    print_table(
        "Consistent read vs ROW_NUMBER vs latest-only floor (p50 ms, local[2]; "
        "ratios are medians of per-round ratios)",
        [
            "rows",
            "versions/key",
            "query",
            "horizon",
            "row_number",
            "floor",
            "rn/horizon",
            "horizon/floor",
            "rows read h",
            "rows read f",
        ],
        table_rows,
    )
    spark.stop()
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    parser.add_argument("--sizes", help="comma-separated row counts (default 1000000,5000000)")
    parser.add_argument(
        "--versions", help="comma-separated versions per key for the curve at the smallest size "
        "(default 1,3,10)",
    )  # fmt: skip
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    if args.sizes:
        sizes = [int(part) for part in args.sizes.split(",")]
    else:
        sizes = [60_000] if args.quick else [1_000_000, 5_000_000]
    versions = [int(part) for part in (args.versions or "1,3,10").split(",")]
    # Every size at 3 versions per key (the rows curve), then the other version counts at the
    # smallest size (the versions curve: the same rows, fewer keys as versions grow).
    cases = [(size, VERSIONS_PER_KEY) for size in sizes]
    cases += [(min(sizes), count) for count in versions if count != VERSIONS_PER_KEY]
    repeats = 2 if args.quick else args.repeats
    results = run(cases, repeats)
    results["targets"] = {"full_aggregate_speedup_vs_row_number_at_5M": ">= 10x"}
    path = write_results("query", results)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
