"""``horizon ingest``: run one ingestion server for one table.

    horizon ingest --table accounts.toml --source /data/changelog --format json \\
        --server-id s1 --redis redis://127.0.0.1:6379/0 [--partitions 0,1] [--watch 5]
    horizon ingest ... --stream --checkpoint /data/ckpt [--trigger "5 seconds"]
    horizon ingest ... --stream --source-format kafka --source-option kafka.bootstrap.servers=h:9092 \\
        --source-option subscribe=accounts --checkpoint /data/ckpt   # value = one JSON changelog row

The storage root comes from the table file unless ``--storage-root`` overrides it; any Hadoop URI
works (``s3a://...``) given the matching ``--spark-conf`` (credentials, endpoint).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

from timeline.errors import FailedPrecondition, HorizonError, InvalidArgument

log = logging.getLogger("horizon.ingest")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="horizon ingest", description=__doc__.split("\n")[0])
    parser.add_argument("--table", required=True, help="table definition (TOML)")
    parser.add_argument("--source", help="directory of changelog files (or a streaming path)")
    parser.add_argument("--format", default="json", help="changelog format: json, parquet, csv")
    parser.add_argument("--server-id", required=True)
    parser.add_argument("--redis", required=True, help="state store URL, redis://host:port/db")
    parser.add_argument("--prefix", default="horizon", help="Redis key prefix")
    parser.add_argument("--partitions", help="key partitions this server owns, e.g. 0,1 (all)")
    parser.add_argument("--storage-root", help="override the table's storage root")
    parser.add_argument("--watch", type=float, help="poll the directory every N seconds")
    parser.add_argument("--stream", action="store_true", help="run as Structured Streaming")
    parser.add_argument("--checkpoint", help="streaming checkpoint directory")
    parser.add_argument("--trigger", help='streaming processing-time trigger, e.g. "5 seconds"')
    parser.add_argument("--available-now", action="store_true", help="stream what is there, exit")
    parser.add_argument("--source-format", help="any Spark streaming source format (e.g. kafka)")
    parser.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--lock-priority", type=int, default=75, help="priority of the batches' locks (Druid: 75)"
    )
    parser.add_argument(
        "--metrics-listen", help="serve Prometheus metrics on host:port (e.g. 127.0.0.1:9465)"
    )
    parser.add_argument("--spark-master", default="local[*]")
    parser.add_argument(
        "--spark-remote", help="a Spark Connect URL: refused (ingestion needs a classic session)"
    )
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE")
    return parser


def key_value_pairs(items: Sequence[str], what: str) -> dict[str, str]:
    """``KEY=VALUE`` options (``--spark-conf``, ``--source-option``) as a dict; ``what`` names the
    option in the error a malformed one gets. Shared by every ``horizon`` command that takes them."""
    result = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidArgument(f"{what} {item!r}: expected KEY=VALUE")
        result[key] = value
    return result


def main_ingest(argv: Sequence[str] | None = None) -> int:
    """Entry point for ``horizon ingest``; returns the process exit code."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except HorizonError as error:
        print(f"horizon ingest: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _run(args: argparse.Namespace) -> int:
    from core.spark_session import create_spark_session
    from ingest.job import IngestJob
    from ingest.table import TableDefinition
    from watermark.server import ServerClient

    if args.spark_remote:
        from ingest.storage import CONNECT_REFUSAL

        raise FailedPrecondition(CONNECT_REFUSAL)
    table = TableDefinition.load(args.table, storage_root=args.storage_root)
    partitions = (
        [int(p) for p in args.partitions.split(",") if p.strip()] if args.partitions else None
    )
    if args.stream and not args.checkpoint:
        raise InvalidArgument("--stream needs --checkpoint")
    if not args.source and not args.source_format:
        raise InvalidArgument("give --source (a changelog directory) or --source-format")
    spark = create_spark_session(
        master=args.spark_master, app_name=f"horizon-ingest-{args.server_id}",
        conf=key_value_pairs(args.spark_conf, "--spark-conf"),
    )  # fmt: skip
    client = ServerClient(args.redis, args.server_id, prefix=args.prefix)
    report = _batch_reporter(table.name, args.metrics_listen)
    try:
        job = IngestJob(
            spark, table, client, partitions=partitions, lock_priority=args.lock_priority
        ).start()
        client.start_heartbeats()
        if args.stream:
            source = _stream_source(spark, job, args)
            query = job.run_stream(
                source, args.checkpoint, available_now=args.available_now,
                processing_time=args.trigger, on_batch=lambda result: report(result, None),
            )  # fmt: skip
            query.awaitTermination()
            return 0
        while True:
            started = time.perf_counter()
            result = job.run_directory(args.source, args.format)
            report(result, time.perf_counter() - started)
            if not args.watch:
                return 0
            time.sleep(args.watch)
    finally:
        client.close()


def _batch_reporter(table: str, metrics_listen: str | None) -> Any:
    """What happens after each batch: its line on stdout, and its metrics when served."""
    if not metrics_listen:
        return lambda result, seconds: _print_batch(result)
    from core.metrics_endpoint import MetricsEndpoint
    from ingest.metrics import IngestMetrics

    metrics = IngestMetrics()
    endpoint = MetricsEndpoint(metrics_listen, [metrics.registry])
    print(f"metrics on {endpoint.url}", flush=True)

    def report(result: Any, seconds: float | None) -> None:
        metrics.observe_batch(table, result, seconds)
        _print_batch(result)

    return report


def _print_batch(result: Any) -> None:
    """One line per batch on stdout, ending with its snapshot token: pass it to a query's
    ``--min-snapshot`` to read this batch's writes."""
    print(
        f"batch {result.seq}: {result.rows} rows, {len(result.segments)} segments, "
        f"high {result.high}, token {result.token or '-'}",
        flush=True,
    )


def _stream_source(spark: Any, job: Any, args: argparse.Namespace) -> Any:
    options = key_value_pairs(args.source_option, "--source-option")
    if not args.source_format:
        return job.stream_directory(args.source, args.format, options=options)
    from pyspark.sql import functions as F

    reader = spark.readStream.format(args.source_format).options(**options)
    frame = reader.load(args.source) if args.source else reader.load()
    if "value" in frame.columns:  # Kafka-like: each value is one JSON changelog row
        parsed = F.from_json(F.col("value").cast("string"), job.table.spark_schema_ddl())
        return frame.select(parsed.alias("row")).select("row.*")
    return frame
