"""Compaction benchmark: what compaction does for reads, what it costs, and reclaiming history.

On a local Spark with 2 cores and a private redis-server, through the real parts:

1. **history**: an ``accounts`` table (4 days, 4 key partitions) gets ``--rows`` rows (5M by
   default) with 3 versions per key, through :class:`horizon_broker.ingest.job.IngestJob` in ``--batches`` small
   batches (50 of 100,000 rows): the first third inserts every key, the rest update every key
   twice, in an order unrelated to the key, with the updater applying ``validUntil`` every 10
   batches. Every batch adds a small segment per key partition and day, so each day ends up with
   hundreds of small files.
2. **reads before and after**: a full aggregate and a filtered aggregate at the LWM, as the broker
   runs them (the broker's rewrite over the broker's segment views, from a real follower), side by
   side with the query a user writes without Horizon (``ROW_NUMBER() OVER (PARTITION BY id ORDER
   BY seq DESC) = 1`` over the very files the visible segments hold: the same rows in the same
   layout) and with the same query over a **latest-only** table of the same rows (one file per
   day, sorted by key: what perfect compaction would leave), interleaved round by round. The
   answers are compared before a timing is trusted. Targets: at least 3x faster than ROW_NUMBER
   before compaction and 10x after; after compaction at most 1.2x the floor.
3. **compaction cost**: one minor compaction run of the whole table (locks, Spark merge, guarded
   publish), rows/s against a bare Spark read+write of the same input files; files and segments
   per day before and after.
4. **reclaiming history**: once ingestion has stopped and the retention period has passed (one
   small batch moves the horizon, as a server's next batch would), the background pass rewrites
   the segments holding the most history below the horizon in bounded steps; bytes before and
   after, steps, rows reclaimed, and the answer at the LWM unchanged.

Run: ``python -m bench.compaction [--quick] [--rows N] [--batches N]``.
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.history_table import (
    DAYS,
    TABLE,
    VERSIONS_PER_KEY,
    compact_whole_table,
    definition,
    latest_only,
    rows_of,
    version_columns,
)
from bench.query import horizon_rewriter, measure_variants
from bench.report import print_table, summarize, write_results

QUERIES = {
    "full_aggregate": (
        "SELECT region, COUNT(*) AS n, SUM(amount) AS total FROM accounts GROUP BY region"
    ),
    "filtered_aggregate": (
        "SELECT region, COUNT(*) AS n, SUM(amount) AS total FROM accounts "
        "WHERE amount BETWEEN 1000 AND 2000 GROUP BY region"
    ),
}


def layout(view: Any) -> dict[str, Any]:
    """Segments, files and bytes of the visible segments, per day."""
    segments = Counter(segment.interval.start_ms for segment in view.visible_segments)
    files = Counter()
    for segment in view.visible_segments:
        files[segment.interval.start_ms] += len(segment.location)
    return {
        "segments": sum(segments.values()),
        "files": sum(files.values()),
        "files_per_day": round(statistics.fmean(files.values()), 1) if files else 0,
        "segments_per_day": round(statistics.fmean(segments.values()), 1) if segments else 0,
        "bytes": sum(segment.size_bytes for segment in view.visible_segments),
        "rows_stored": sum(segment.row_count for segment in view.visible_segments),
    }


NEWEST_VERSIONS = (
    "(SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY id ORDER BY seq DESC) AS _rn "
    "FROM all_versions) WHERE _rn = 1) AS accounts"
)
"""What a user without Horizon writes over the same files: each key's newest version."""


def reads(spark: Any, view: Any, repeats: int) -> dict[str, Any]:
    """Each query as the broker runs it at the view's LWM, beside ROW_NUMBER over the very
    files the view reads (every version once: the same data and layout) and the latest-only
    floor."""
    files = [location for segment in view.visible_segments for location in segment.location]
    spark.read.parquet(*files).createOrReplaceTempView("all_versions")
    figures: dict[str, Any] = {}
    with horizon_rewriter(spark, view) as rewrite_sql:
        for name, sql in QUERIES.items():
            variants = {
                "horizon": rewrite_sql(sql),
                "row_number": sql.replace("FROM accounts", f"FROM {NEWEST_VERSIONS}"),
                "floor": sql.replace("FROM accounts", "FROM latest_only AS accounts"),
            }
            scans, samples, answers = measure_variants(spark, variants, repeats)
            for other in ("row_number", "floor"):
                if answers["horizon"] != answers[other]:
                    raise SystemExit(f"{name}: Horizon's answer differs from {other}'s")
            figures[name] = {
                "timings_ms": {variant: summarize(s) for variant, s in samples.items()},
                "cost_vs_floor": statistics.median(
                    h / f for h, f in zip(samples["horizon"], samples["floor"], strict=True)
                ),
                "speedup_vs_row_number": statistics.median(
                    r / h for h, r in zip(samples["horizon"], samples["row_number"], strict=True)
                ),
                "scans": scans,
                "answer": answers["horizon"],
            }
    spark.catalog.dropTempView("all_versions")
    return figures


def time_travel(spark: Any, view: Any, snapshots: list[int], keys: int) -> dict[int, tuple]:
    """Count, distinct keys and total at each snapshot, as the broker answers ``VERSION AS OF``;
    every key exists by then, so each must be visible exactly once."""
    answers = {}
    with horizon_rewriter(spark, view) as rewrite_sql:
        for snapshot in snapshots:
            sql = (
                "SELECT COUNT(*) AS n, COUNT(DISTINCT id) AS ids, SUM(amount) AS total "
                f"FROM accounts VERSION AS OF {snapshot}"
            )
            row = tuple(spark.sql(rewrite_sql(sql)).first())
            if row[0] != keys or row[1] != keys:
                raise SystemExit(f"at snapshot {snapshot}: {row[0]} rows for {keys} keys")
            answers[snapshot] = row
    return answers


def bare_read_write(spark: Any, files: list[str], target: Path) -> float:
    """Seconds for Spark to read ``files`` and write them back as Parquet, nothing else."""
    started = time.perf_counter()
    spark.read.parquet(*files).write.mode("overwrite").parquet(str(target))
    return time.perf_counter() - started


ROUNDS = 3


def write_rounds(
    spark: Any, compactor: Any, targets: Any, files: list[str], work: Path, rounds: int
) -> dict[str, Any]:
    """The compaction's Spark work (its merge and write, without locks or publishing) and a bare
    read+write of the same input files, in alternating rounds, warm: the medians and their
    ratio (the same rows on both sides, so the ratio of rows/s is the inverse ratio of time)."""
    merge: list[float] = []
    bare: list[float] = []
    for number in range(rounds):
        started = time.perf_counter()
        compactor.rewrite(targets, str(work / f"rewrite-{number}"))
        merge.append(time.perf_counter() - started)
        bare.append(bare_read_write(spark, files, work / f"bare-{number}"))
    merge_s, bare_s = statistics.median(merge), statistics.median(bare)
    return {
        "merge_seconds": [round(value, 2) for value in merge],
        "bare_seconds": [round(value, 2) for value in bare],
        "merge_median_s": round(merge_s, 2),
        "bare_median_s": round(bare_s, 2),
        "merge_vs_bare": round(bare_s / merge_s, 2),
    }


def ingest_batches(spark: Any, job: Any, keys: int, rows: int, batches: int) -> list[int]:
    """Ingest the table's rows in ``batches`` batches; each batch's high snapshot."""
    per_batch = math.ceil(rows / batches)
    highs = []
    for batch in range(batches):
        result = job.run_batch(
            rows_of(spark, keys, batch * per_batch, min(rows, (batch + 1) * per_batch))
        )
        highs.append(result.high)
        if (batch + 1) % 10 == 0 or batch + 1 == batches:
            print(f"  ingested batch {batch + 1}/{batches}", flush=True)
    job.flush_updates()
    return highs


def compaction_figures(
    spark: Any, report: Any, input_files: list[str], work: Path
) -> dict[str, Any]:
    """The compaction's sizes and speed, beside a bare read and write of the same files."""
    bare_s = bare_read_write(spark, input_files, work / "bare")
    bare_rows = spark.read.parquet(*input_files).count()
    figures: dict[str, Any] = {
        "seconds": round(report.seconds, 2),
        "inputs": len(report.inputs),
        "outputs": len(report.outputs),
        "rows_in": report.rows_in,
        "rows_out": report.rows_out,
        "bytes_in": report.bytes_in,
        "bytes_out": report.bytes_out,
        "rows_per_s": round(report.rows_in / report.seconds),
        "bare_read_write_seconds": round(bare_s, 2),
        "bare_rows_per_s": round(bare_rows / bare_s),
    }
    figures["vs_bare"] = round(figures["rows_per_s"] / figures["bare_rows_per_s"], 2)
    return figures


def check_same_answers(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Every query answers the same after compaction as before it."""
    for name in QUERIES:
        if after[name]["answer"] != before[name]["answer"]:
            raise SystemExit(f"{name}: the answer changed with compaction")


def run(rows: int, batches: int, repeats: int, retention_s: int) -> dict[str, Any]:
    from horizon_broker._core.spark_session import create_spark_session
    from horizon_broker.ingest.job import IngestJob
    from horizon_broker.watermark.follower import Follower
    from horizon_broker.watermark.server import ServerClient
    from tests.processes import RedisProcess

    keys = rows // VERSIONS_PER_KEY
    rows = keys * VERSIONS_PER_KEY
    redis_process = RedisProcess().start()
    spark = create_spark_session(
        master="local[2]", app_name="bench-compaction", conf={"spark.sql.shuffle.partitions": "4"}
    )
    work = Path(tempfile.mkdtemp(prefix="horizon-bench-compaction-"))
    server = ServerClient(redis_process.url, "bench-ingest")
    server.start_heartbeats(1.0)
    compactor_client = ServerClient(redis_process.url, "bench-compactor")
    follower = Follower(redis_process.url)
    results: dict[str, Any] = {"rows": rows, "keys": keys, "batches": batches}
    try:
        table = definition(work / "table", retention_s)
        job = IngestJob(spark, table, server).start()
        started = time.perf_counter()
        highs = ingest_batches(spark, job, keys, rows, batches)
        results["ingest_seconds"] = round(time.perf_counter() - started, 1)

        latest_only(spark, keys, work / "latest")
        spark.read.parquet(str(work / "latest")).createOrReplaceTempView("latest_only")
        follower.start()
        follower.wait_until_synced(30)

        before_view = follower.view(TABLE)
        # The last batches' snapshots: inside the retention period, so still permitted.
        snapshots = [high for high in highs[-3:] if high > before_view.retention_horizon]
        travel = time_travel(spark, before_view, snapshots, keys)
        results["before"] = {
            "layout": layout(before_view),
            "reads": reads(spark, before_view, repeats),
        }
        print(f"  before compaction: {results['before']['layout']}", flush=True)

        compactor, targets, report = compact_whole_table(
            spark, table, compactor_client, rows, follower
        )
        input_files = [location for segment in report.inputs for location in segment.location]
        results["compaction"] = compaction_figures(spark, report, input_files, work)
        results["compaction"]["rounds"] = write_rounds(
            spark, compactor, targets, input_files, work, ROUNDS
        )
        after_view = follower.view(TABLE)
        if time_travel(spark, after_view, snapshots, keys) != travel:
            raise SystemExit("compaction changed a time-travel answer")
        results["time_travel_snapshots_checked"] = len(snapshots)
        results["after"] = {
            "layout": layout(after_view),
            "reads": reads(spark, after_view, repeats),
        }
        check_same_answers(results["before"]["reads"], results["after"]["reads"])

        results["reclaim"] = reclaim_history(
            spark, job, compactor, follower, keys, retention_s, rows
        )
    finally:
        follower.stop()
        server.close()
        compactor_client.close()
        spark.stop()
        redis_process.close()
        shutil.rmtree(work, ignore_errors=True)
    for phase in ("before", "after"):
        for figures in results[phase]["reads"].values():
            figures.pop("answer")
    return results


def reclaim_history(
    spark: Any,
    job: Any,
    compactor: Any,
    follower: Any,
    keys: int,
    retention_s: int,
    rows: int,
) -> dict[str, Any]:
    """Let the retention period pass with the table idle, move the horizon with one small batch
    on the first day, then reclaim in steps of at most an eighth of the table."""
    from pyspark.sql import functions as F

    from horizon_broker.compaction.reclaim import ReclaimSettings, reclaim

    time.sleep(retention_s + 2)
    touched = spark.range(0, min(keys, 400), DAYS).select(
        *version_columns(F.col("id"), F.lit(VERSIONS_PER_KEY - 1).cast("long"))
    )
    job.run_batch(touched)  # the same values again: a new version, the same answer
    job.flush_updates()
    generation = follower.view(TABLE).generation
    follower.wait_for(lambda f: f.view(TABLE).generation > generation, 10)
    before = follower.view(TABLE)
    with horizon_rewriter(spark, before) as rewrite_sql:
        answer_before = sorted(
            tuple(r) for r in spark.sql(rewrite_sql(QUERIES["full_aggregate"])).collect()
        )
    settings = ReclaimSettings(max_rows_per_step=max(rows // 8, 1), max_files_per_step=16)
    started = time.perf_counter()
    report = reclaim(compactor, settings)
    seconds = time.perf_counter() - started
    published = {s.id for step in report.steps if step.outcome == "published" for s in step.outputs}
    follower.wait_for(lambda f: published <= {s.id for s in f.view(TABLE).visible_segments}, 60)
    after = follower.view(TABLE)
    with horizon_rewriter(spark, after) as rewrite_sql:
        answer_after = sorted(
            tuple(r) for r in spark.sql(rewrite_sql(QUERIES["full_aggregate"])).collect()
        )
    if answer_after != answer_before:
        raise SystemExit("reclaiming history changed the answer at the LWM")
    return {
        "horizon": report.horizon,
        "candidates": report.candidates,
        "reclaimable_rows": report.reclaimable_rows,
        "steps": len(report.steps),
        "step_outcomes": dict(Counter(step.outcome for step in report.steps)),
        "rows_reclaimed": report.rows_reclaimed,
        "rewritten_bytes_before": report.bytes_before,
        "rewritten_bytes_after": report.bytes_after,
        "table_bytes_before": layout(before)["bytes"],
        "table_bytes_after": layout(after)["bytes"],
        "rows_stored_before": layout(before)["rows_stored"],
        "rows_stored_after": layout(after)["rows_stored"],
        "seconds": round(seconds, 1),
    }


def print_results(results: dict[str, Any]) -> None:
    rows = []
    for name in QUERIES:
        for phase in ("before", "after"):
            figures = results[phase]["reads"][name]
            timings = figures["timings_ms"]
            rows.append(
                (
                    name,
                    phase,
                    f"{timings['horizon']['p50']:.0f}",
                    f"{timings['row_number']['p50']:.0f}",
                    f"{timings['floor']['p50']:.0f}",
                    f"{figures['speedup_vs_row_number']:.1f}x",
                    f"{figures['cost_vs_floor']:.2f}x",
                    f"{figures['scans']['horizon']['files']:,}",
                    f"{figures['scans']['horizon']['rows_scanned']:,}",
                    f"{figures['scans']['floor']['rows_scanned']:,}",
                )
            )
    print_table(
        f"Consistent read at the LWM vs ROW_NUMBER over the same files and vs the latest-only "
        "table, before and after compaction "
        f"({results['rows']:,} rows, {results['keys']:,} keys, {results['batches']} batches; "
        "p50 ms, local[2])",
        ["query", "compaction", "horizon", "row_number", "floor", "faster than row_number",
         "horizon/floor", "files read", "rows read h", "rows read f"],
        rows,
    )  # fmt: skip
    print_table(
        "Layout of the visible segments",
        ["", "segments", "segments/day", "files", "files/day", "rows stored", "bytes"],
        [
            (phase, lay["segments"], lay["segments_per_day"], lay["files"], lay["files_per_day"],
             f"{lay['rows_stored']:,}", f"{lay['bytes']:,}")
            for phase, lay in (("before", results["before"]["layout"]), ("after", results["after"]["layout"]))
        ],
    )  # fmt: skip
    c = results["compaction"]
    print_table(
        "Minor compaction of the whole table vs a bare Spark read+write of the same files",
        ["inputs -> outputs", "rows in -> out", "seconds", "rows/s", "bare rows/s", "vs bare"],
        [(f"{c['inputs']} -> {c['outputs']}", f"{c['rows_in']:,} -> {c['rows_out']:,}",
          c["seconds"], f"{c['rows_per_s']:,}", f"{c['bare_rows_per_s']:,}", f"{c['vs_bare']}x")],
    )  # fmt: skip
    w = c["rounds"]
    print_table(
        f"The compaction's merge and write vs a bare read+write, {len(w['merge_seconds'])} "
        "alternating warm rounds (target >= 0.6x)",
        ["merge+write s", "bare read+write s", "medians", "merge vs bare (rows/s)"],
        [(w["merge_seconds"], w["bare_seconds"], f"{w['merge_median_s']} / {w['bare_median_s']}",
          f"{w['merge_vs_bare']}x")],
    )  # fmt: skip
    r = results["reclaim"]
    print_table(
        "Reclaiming history below the retention horizon (table idle, bounded steps)",
        ["reclaimable rows", "steps", "rows reclaimed", "table bytes before -> after",
         "rows stored before -> after", "seconds"],
        [(f"{r['reclaimable_rows']:,}", f"{r['steps']} {r['step_outcomes']}",
          f"{r['rows_reclaimed']:,}", f"{r['table_bytes_before']:,} -> {r['table_bytes_after']:,}",
          f"{r['rows_stored_before']:,} -> {r['rows_stored_after']:,}", r["seconds"])],
    )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small table for a smoke run")
    parser.add_argument("--rows", type=int, help="rows written (default 5,000,000)")
    parser.add_argument("--batches", type=int, help="ingestion batches (default 50)")
    parser.add_argument("--repeats", type=int, help="timed rounds per query (default 7)")
    args = parser.parse_args(argv)
    rows = args.rows or (150_000 if args.quick else 5_000_000)
    batches = args.batches or (12 if args.quick else 50)
    repeats = args.repeats or (2 if args.quick else 7)
    retention_s = 10 if args.quick else 30
    results = run(rows, batches, repeats, retention_s)
    results["quick"] = args.quick
    results["targets"] = {
        "after_compaction_vs_latest_only": "<= 1.2x",
        "faster_than_row_number_before_compaction": ">= 3x",
        "faster_than_row_number_after_compaction": ">= 10x",
    }
    print_results(results)
    path = write_results("compaction", results)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
