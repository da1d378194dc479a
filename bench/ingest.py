"""Ingestion benchmark: throughput, event-to-visible latency, write amplification vs cadence.

On a local Spark with 2 cores and a private redis-server:

* **throughput**: sustained upserts/s with 30% updates on a grown table: Parquet changelog files
  ingested with ``run_directory`` as a server does, 10 batches timed after 10 earlier ones (so the
  key index has several levels and updates land in old segments), end to end: commit timestamps,
  key resolution, the resolution file, segment files, announcements, the updater (after every
  batch, and every fifth) and the progress report; with the Spark actions' seconds per batch and
  the floor (a bare read+shuffle+write of one of the same changelog batches) from the same run;
* **latency**: from an event file landing in a watched changelog directory (Structured Streaming,
  1-second trigger) to the event being visible at the served LWM, read as a broker would
  (follower view, Parquet rows, visibility rule); the first event after the stream starts is
  reported on its own (it also pays the stream's start). Micro-batches this small run on the
  driver (:mod:`horizon_broker.ingest.driver_rows`); the stream with updates is measured again with every batch on
  Spark (``driver_batch_rows = 0``), side by side;
* **write amplification**: bytes of overwrite segments the updater writes per updated row, against
  the updater's cadence (apply validUntil updates every N batches), with the LWM lag it costs;
* **streams**: Debezium events from a Redis stream against Parquet files, events/s and
  event-to-visible p50/p99 side by side (:mod:`bench.ingest_streams`).

Run: ``python -m bench.ingest [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import ingest_streams
from bench.report import percentile, print_table, summarize, write_results

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

PARTS = ("throughput", "latency", "amplification", "streams")


def accounts(root: Path, **overrides: Any) -> Any:
    from horizon_broker.ingest.table import TableDefinition

    data: dict[str, Any] = {
        "name": "accounts",
        "columns": {
            "user_id": "string",
            "balance": "bigint",
            "seq": "bigint",
            "deleted": "boolean",
        },
        "primary_key": ["user_id"],
        "comparison": ["seq"],
        "delete_column": "deleted",
        "key_partitions": 4,
        "storage_root": str(root),
        "granularity": "DAY",
    }
    data.update(overrides)
    return TableDefinition.from_dict(data)


def changes(spark: Any, start: int, count: int, seq: int, update_fraction: float, keys: int) -> Any:
    """``count`` rows: the first ``update_fraction`` update existing keys, the rest are new keys
    numbered from ``start``."""
    from pyspark.sql import functions as F

    updates = int(count * update_fraction)
    ids = spark.range(count).select(
        F.when(
            F.col("id") < updates, F.pmod(F.xxhash64(F.col("id"), F.lit(seq)), F.lit(max(keys, 1)))
        )
        .otherwise(F.col("id") - updates + start)
        .alias("k")
    )
    return ids.select(
        F.concat(F.lit("u"), F.col("k").cast("string")).alias("user_id"),
        (F.col("k") * 7 + seq).alias("balance"),
        F.lit(seq).cast("long").alias("seq"),
        F.lit(False).alias("deleted"),
    )


UPDATE_FRACTION = 0.3


def throughput(
    spark: Any, redis_url: str, rows: int, work: Path, prior: int, measured: int
) -> list[dict[str, Any]]:
    """Sustained upserts/s on a table that already holds ``prior`` batches, for each updater
    cadence, then the floor on the same changelog files.

    The changelog is Parquet files (what a server usually ingests), staged before the clock
    starts and copied into the watched directory one batch at a time; ``run_directory`` ingests
    them as a server does. Every batch after the first updates 30% existing keys, drawn uniformly
    from all keys written so far, and inserts 70% new ones, so the table grows and the key index
    has several levels before anything is measured. The figure is the measured batches' rows over
    their wall time, the updater's rewrites included (with a cadence of N they run every N
    batches: ``measured`` is a multiple of every cadence, so each pays its share)."""
    staged = work / "changelog-staged"
    stage_changelog(spark, staged, rows, prior + measured)
    results = [
        grown_table(spark, redis_url, rows, staged, work, prior, measured, cadence)
        for cadence in CADENCES
    ]
    results.append(floor(spark, rows, staged / f"{prior:05d}", work, repeats=3))
    return results


CADENCES = (1, 5)
"""Updater cadences measured: after every batch (the default, freshest LWM) and every fifth."""


def stage_changelog(spark: Any, staged: Path, rows: int, batches: int) -> None:
    """Write ``batches`` changelog batches of ``rows`` rows as Parquet, one directory each."""
    existing = 0
    for batch in range(batches):
        fraction = 0.0 if batch == 0 else UPDATE_FRACTION
        changes(spark, existing, rows, batch + 1, fraction, existing).write.parquet(
            str(staged / f"{batch:05d}")
        )
        existing += rows - int(rows * fraction)


def grown_table(
    spark: Any,
    redis_url: str,
    rows: int,
    staged: Path,
    work: Path,
    prior: int,
    measured: int,
    cadence: int,
) -> dict[str, Any]:
    """Ingest the staged batches into a fresh table; time the last ``measured`` ones."""
    from horizon_broker.ingest.job import IngestJob
    from horizon_broker.watermark.server import ServerClient

    name = f"grown-c{cadence}"
    watched = work / f"{name}-changelog"
    watched.mkdir(parents=True)
    client = ServerClient(redis_url, f"bench-{name}", prefix=f"g{cadence}")
    job = IngestJob(spark, accounts(work / name, update_cadence=cadence), client).start()
    seconds: list[float] = []
    stages: dict[str, float] = {}
    rewritten = 0
    try:
        for batch in range(prior + measured):
            for part in sorted((staged / f"{batch:05d}").glob("*.parquet")):
                shutil.copy(part, watched / f"{batch:05d}-{part.name}")
            started = time.perf_counter()
            result = job.run_directory(str(watched), "parquet")
            elapsed = time.perf_counter() - started
            if batch < prior:
                continue
            seconds.append(elapsed)
            rewritten += result.updated_segments
            for stage, spent in result.stage_seconds:
                stages[stage] = stages.get(stage, 0.0) + spent
        levels = max((len(index.levels) for index in job.state.key_index.values()), default=0)
        segments = len(client.announced_segments("accounts"))
    finally:
        client.close()
        shutil.rmtree(work / name, ignore_errors=True)
    total = sum(seconds)
    stages["outside Spark actions"] = total - sum(stages.values())
    return {
        "workload": f"30% updates, updater every {'batch' if cadence == 1 else f'{cadence} batches'}",
        "cadence": cadence, "rows": rows, "prior_batches": prior, "measured_batches": measured,
        "seconds": round(total, 2), "rows_per_s": round(rows * measured / total),
        "batch_seconds": [round(s, 2) for s in seconds],
        "segments_rewritten": rewritten, "key_index_levels": levels, "segments": segments,
        "stage_seconds_per_batch": {k: round(v / measured, 2) for k, v in stages.items()},
    }  # fmt: skip


def floor(spark: Any, rows: int, source: Path, work: Path, repeats: int) -> dict[str, Any]:
    """The reference figure: a bare Spark pass over one of the same changelog batches (read its
    Parquet files, shuffle by key, write Parquet). Any upsert pipeline does at least this per
    batch, plus the key join; the median of ``repeats`` warm runs."""
    target = str(work / "floor-target")
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        (
            spark.read.parquet(str(source))
            .repartition(4, "user_id")
            .sortWithinPartitions("user_id")
            .write.mode("overwrite")
            .parquet(target)
        )
        timings.append(time.perf_counter() - started)
    elapsed = sorted(timings)[len(timings) // 2]
    return {
        "workload": "floor: bare read+shuffle+write", "rows": rows, "seconds": round(elapsed, 2),
        "rows_per_s": round(rows / elapsed), "segments_rewritten": 0,
        "samples_s": [round(t, 2) for t in timings],
    }  # fmt: skip


def latency(
    spark: Any,
    redis_url: str,
    samples: int,
    work: Path,
    *,
    update_every: int = 0,
    driver_batch_rows: int = 10_000,
) -> dict[str, Any]:
    """Event file lands -> event visible at the follower's LWM.

    ``driver_batch_rows`` is the table's setting: small micro-batches run on the driver (the
    default), or every one on Spark (0), for the side-by-side figure.

    ``update_every`` N > 0: the table first holds 100,000 keys, and every Nth event updates
    one of them (the rest insert new keys), so the updater (after every batch) is on the path:
    the old version's segment is rewritten before the LWM may pass the new one. An event is
    visible when its own version is the one the LWM shows.
    """
    import pyarrow.parquet as pq

    from horizon_broker.ingest.job import IngestJob
    from horizon_broker.watermark.follower import Follower
    from horizon_broker.watermark.server import ServerClient

    name = f"latency-u{update_every}-d{driver_batch_rows}"
    root, source = work / name, work / f"{name}-changelog"
    source.mkdir(parents=True)
    prefix = f"lat{update_every}d{driver_batch_rows}"
    client = ServerClient(redis_url, f"bench-{name}", prefix=prefix)
    follower = Follower(redis_url, prefix=prefix)
    follower.start()
    table = accounts(root, key_partitions=2, driver_batch_rows=driver_batch_rows)
    job = IngestJob(spark, table, client)
    job.start()
    existing = 100_000 if update_every else 0
    if existing:
        job.run_batch(changes(spark, 0, existing, 1, 0.0, 0))
    batches: list[Any] = []
    query = job.run_stream(
        job.stream_directory(str(source), "json"), str(work / f"{name}-ckpt"),
        processing_time="1 second", on_batch=batches.append,
    )  # fmt: skip
    measured: list[float] = []
    updates = 0
    try:
        # One more event than samples: the first one also pays the stream's start (its first
        # micro-batch plans and compiles everything); it is reported on its own.
        for i in range(samples + 1):
            update = bool(update_every) and i % update_every == update_every - 1
            key = f"u{(i * 7919) % existing}" if update else f"event{i}"
            balance = 10_000_000 + i
            updates += update
            temporary = source / f".{i:05d}.json.tmp"
            temporary.write_text(
                f'{{"user_id":"{key}","balance":{balance},"seq":{100 + i},"deleted":false}}\n'
            )
            started = time.perf_counter()
            temporary.rename(source / f"{i:05d}.json")
            deadline = started + 120
            while time.perf_counter() < deadline:
                if _visible(follower, key, balance, pq):
                    measured.append(time.perf_counter() - started)
                    break
                time.sleep(0.02)
            else:
                raise RuntimeError(f"event {i} ({key}) was not visible within 120 s")
    finally:
        query.stop()
        follower.stop()
        client.close()
    first, steady = measured[:1], measured[1:]
    # Where a micro-batch's time goes (its first, which starts the stream, left out): the
    # median of each Spark action, and of the whole batch up to its report.
    ran = [batch for batch in batches[1:] if not batch.skipped]
    stages = sorted({stage for batch in ran for stage, _ in batch.stage_seconds})
    return {
        "samples": len(steady),
        "updates": updates,
        "micro_batches": len(ran),
        "batch_seconds_p50": round(percentile([batch.seconds or 0.0 for batch in ran], 0.5), 3),
        "stage_seconds_p50": {
            stage: round(
                percentile([dict(batch.stage_seconds).get(stage, 0.0) for batch in ran], 0.5), 3
            )
            for stage in stages
        },
        **{k: round(v, 3) for k, v in summarize(steady).items()},
        "each_s": [round(v, 3) for v in steady],
        "first_event_s": round(first[0], 3) if first else None,
    }


def _visible(follower: Any, key: str, balance: int, pq: Any) -> bool:
    """Whether ``key``'s version with ``balance`` is the one visible at the follower's LWM."""
    import pyarrow.compute as pc

    try:
        view = follower.view("accounts")
    except Exception:
        return False
    if view.lwm is None:
        return False
    for segment in view.visible_segments:
        for location in segment.location:
            path = location.removeprefix("file:")
            rows = pq.read_table(
                path,
                columns=["user_id", "balance", "validFrom", "validUntil"],
                filters=[("user_id", "=", key)],
            )
            rows = rows.filter(pc.equal(rows["user_id"], key)).to_pylist()
            for row in rows:
                if (
                    row["balance"] == balance
                    and row["validFrom"] <= view.lwm
                    and (row["validUntil"] is None or row["validUntil"] > view.lwm)
                ):
                    return True
    return False


def amplification(
    spark: Any, redis_url: str, keys: int, batches: int, updates: int, work: Path
) -> list[dict[str, Any]]:
    from horizon_broker.ingest.job import IngestJob
    from horizon_broker.watermark.server import ServerClient

    results = []
    for cadence in (1, 2, 4, 8):
        if cadence > batches:
            continue
        root = work / f"amplification-{cadence}"
        client = ServerClient(redis_url, f"bench-amp-{cadence}", prefix=f"amp{cadence}")
        job = IngestJob(spark, accounts(root, update_cadence=cadence), client).start()
        job.run_batch(changes(spark, 0, keys, 1, 0.0, 0))
        job.flush_updates()
        waiting: list[tuple[int, float]] = []  # (batch high, when it was ingested)
        lags, started = [], time.perf_counter()
        for batch in range(batches):
            result = job.run_batch(
                changes(spark, keys + batch * updates, updates, 2 + batch, 1.0, keys)
            )
            waiting.append((result.high, time.perf_counter()))
            progress = client.partition_progress("accounts")
            lwm = min(min(p.ingested, p.applied) for p in progress.values())
            lags += [time.perf_counter() - at for high, at in waiting if high <= lwm]
            waiting = [(high, at) for high, at in waiting if high > lwm]
        job.flush_updates()
        lags += [time.perf_counter() - at for _, at in waiting]
        elapsed = time.perf_counter() - started
        rewritten = _bytes_written_by_updates(job.manifest.records())
        updated_rows = batches * updates
        results.append({
            "cadence": cadence, "updated_rows": updated_rows,
            "bytes_rewritten": rewritten,
            "bytes_per_updated_row": round(rewritten / updated_rows, 1),
            "max_lwm_lag_s": round(max(lags), 2), "seconds": round(elapsed, 1),
        })  # fmt: skip
        client.close()
    return results


def _bytes_written_by_updates(records: Any) -> int:
    """Bytes of the files the updater's commits added that no earlier commit had: a rewrite
    links a segment's closed files into it instead of writing them again (one file on disk
    under two names), and those bytes were not written. Read before the replaced files' grace
    period ends (ten minutes), so every file is still there."""
    seen: set[tuple[int, int]] = set()
    written = 0
    for record in sorted(records, key=lambda r: r.seq):
        if record.phase != "commit":
            continue
        for segment in record.body.get("add", ()):
            for location in segment["location"]:
                stat = os.stat(location.removeprefix("file:"))
                inode = (stat.st_dev, stat.st_ino)
                if inode not in seen and record.kind == "update":
                    written += stat.st_size
                seen.add(inode)
    return written


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes for a short run")
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"comma-separated subset of {', '.join(PARTS)} (default: all)",
    )
    parser.add_argument(
        "--rows",
        type=int,
        default=None,
        help="rows per changelog batch (default 500,000; quick 100,000)",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown parts {unknown}: choose from {', '.join(PARTS)}")
    rows = args.rows or (100_000 if args.quick else 500_000)
    samples = 5 if args.quick else 20
    # Ten timed batches: the tenth after the prior ones resolves against the full key index
    # (horizon_broker.ingest.key_index.MAX_INDEX_LEVELS), as one batch in eight does in a steady stream.
    prior, measured = 10, 10
    keys, batches, updates = (50_000, 4, 2_000) if args.quick else (200_000, 8, 5_000)

    from horizon_broker._core.spark_session import INGESTION_CONF, create_spark_session
    from tests.processes import RedisProcess

    redis_process = RedisProcess().start()
    # The session an ingestion server creates (the floor runs on it too).
    spark = create_spark_session(
        master="local[2]",
        app_name="bench-ingest",
        conf={**INGESTION_CONF, "spark.sql.shuffle.partitions": "4"},
    )
    work = Path(tempfile.mkdtemp(prefix="horizon-bench-ingest-"))
    try:
        speed: list[dict[str, Any]] = []
        delay: dict[str, Any] = {}
        delay_updates: dict[str, Any] = {}
        delay_on_spark: dict[str, Any] = {}
        amp: list[dict[str, Any]] = []
        if "throughput" in parts:
            speed = throughput(spark, redis_process.url, rows, work, prior, measured)
            floor_rate = speed[-1]["rows_per_s"]
            print_table(
                f"ingest throughput (2 cores, Parquet changelog, {rows:,} rows a batch; "
                f"{measured} batches timed after {prior})",
                ["workload", "seconds", "rows/s", "of the floor", "segments rewritten",
                 "segments", "index levels"],
                [[r["workload"], r["seconds"], r["rows_per_s"],
                  f"{r['rows_per_s'] / floor_rate:.0%}", r["segments_rewritten"],
                  r.get("segments", "-"), r.get("key_index_levels", "-")] for r in speed],
            )  # fmt: skip
            for r in speed:
                if "stage_seconds_per_batch" in r:
                    print(f"  {r['workload']}: batches {r['batch_seconds']} s")
                    print(f"    per batch: {r['stage_seconds_per_batch']}")
        if "latency" in parts:
            delay = latency(spark, redis_process.url, samples, work)
            delay_updates = latency(spark, redis_process.url, samples, work, update_every=3)
            delay_on_spark = latency(
                spark, redis_process.url, samples, work, update_every=3, driver_batch_rows=0
            )
            measured = (
                ("inserts", delay),
                ("1 in 3 updates", delay_updates),
                ("1 in 3 updates, every batch on Spark", delay_on_spark),
            )
            print_table(
                "event landing -> visible at the LWM (seconds; 1 s trigger)",
                ["events", "samples", "of them updates", "p50", "p99", "mean"],
                [[label, r["samples"], r["updates"], r["p50"], r["p99"], r["mean"]]
                 for label, r in measured],
            )  # fmt: skip
            for label, r in measured:
                print(
                    f"  {label}: {r['micro_batches']} micro-batches, each {r['batch_seconds_p50']} s "
                    f"(p50) from its start to its report: {r['stage_seconds_p50']}"
                )
        if "amplification" in parts:
            amp = amplification(spark, redis_process.url, keys, batches, updates, work)
            print_table(
                f"write amplification ({keys} keys, {batches} batches x {updates} updates)",
                ["cadence", "bytes rewritten", "bytes/updated row", "max LWM lag s", "seconds"],
                [[r["cadence"], r["bytes_rewritten"], r["bytes_per_updated_row"],
                  r["max_lwm_lag_s"], r["seconds"]] for r in amp],
            )  # fmt: skip
        streams = ingest_streams.run_part(parts, spark, redis_process.url, work, args.quick)
        if set(parts) != set(PARTS):
            print("a partial run: bench/results/ingest.json is left as it was")
            return
        path = write_results("ingest", {
            "quick": args.quick, "throughput": speed, "latency_s": delay,
            "latency_with_updates_s": delay_updates,
            "latency_with_updates_on_spark_s": delay_on_spark, "amplification": amp,
            "streams": streams,
        })  # fmt: skip
        print(f"wrote {path}")
    finally:
        spark.stop()
        redis_process.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    threading.current_thread().name = "bench-ingest"
    main()
