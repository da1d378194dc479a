"""``horizon ingest``: run one ingestion server for one or many tables.

    horizon ingest --config server.toml [--server-id ID] [--redis URL] [--watch 5 | --once]
    horizon ingest --table orders.toml --table customer.toml --source /landing \\
        --server-id s1 --redis redis://127.0.0.1:6379/0 [--watch 5]     # /landing/<table>/
    horizon ingest --table accounts.toml --source /data/changelog --format json \\
        --server-id s1 --redis redis://127.0.0.1:6379/0 [--partitions 0,1] [--watch 5]
    horizon ingest ... --stream --checkpoint /data/ckpt [--trigger "5 seconds"]
    horizon ingest ... --stream --source-format kafka --source-option kafka.bootstrap.servers=h:9092 \\
        --source-option subscribe=accounts --checkpoint /data/ckpt   # value = one JSON changelog row

Every table runs in one process and one Spark application (:mod:`horizon_broker.ingest.server`); each batch
prints one line ``<table>: batch <n>: ... token <token>``. The configuration is checked whole
before anything is written. Without ``--watch`` the server makes one pass over every source and
parks; with it, it polls until SIGTERM or Ctrl-C, finishes the current batches and parks (a second
signal stops at once, unparked). The storage root comes from the table file unless
``--storage-root`` overrides it; any Hadoop URI works (``s3a://...``) given the matching
``--spark-conf`` (credentials, endpoint).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from horizon_broker._core.commands import EXIT_INTERRUPTED, key_value_pairs, run_command
from horizon_broker._core.errors import FailedPrecondition, InvalidArgument
from horizon_broker._core.store_address import STORE_URL_HELP

if TYPE_CHECKING:
    from horizon_broker.ingest.server_config import ServerConfig

log = logging.getLogger("horizon.ingest")
EXIT_TABLE_FAILED = 1
STREAM_SCHEMES = ("redis://", "rediss://", "unix://")
"""A ``--source`` starting so names a Redis stream, not a directory."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="horizon ingest", description=__doc__.split("\n")[0])
    parser.add_argument("--config", help="server configuration (TOML): server, tables, sources")
    parser.add_argument(
        "--table", action="append", default=[], help="a table definition (TOML); repeat for more"
    )
    parser.add_argument(
        "--source",
        help="changelog directory (several tables: one subdirectory per table), or one table's "
        "Redis stream, redis://host:port/db#stream-key",
    )
    parser.add_argument(
        "--format", help="changelog format: json (default), parquet, csv, debezium (change events)"
    )
    parser.add_argument(
        "--server-id",
        help="this server's identity in the LWM (its commits and held-back partitions are "
        "reported under it; keep it across restarts)",
    )
    parser.add_argument(
        "--redis",
        help=STORE_URL_HELP,
    )
    parser.add_argument("--prefix", help="Redis key prefix (default horizon)")
    parser.add_argument("--partitions", help="key partitions this server owns, e.g. 0,1 (all)")
    parser.add_argument("--storage-root", help="override the tables' storage root")
    parser.add_argument("--watch", type=float, help="poll the sources every N seconds")
    parser.add_argument("--once", action="store_true", help="one pass even if the config watches")
    parser.add_argument("--concurrency", type=int, help="tables ingesting at once (default all)")
    parser.add_argument("--stream", action="store_true", help="run as Structured Streaming")
    parser.add_argument("--checkpoint", help="streaming checkpoint directory (one per table)")
    parser.add_argument("--trigger", help='streaming processing-time trigger, e.g. "5 seconds"')
    parser.add_argument("--available-now", action="store_true", help="stream what is there, exit")
    parser.add_argument("--source-format", help="any Spark streaming source format (e.g. kafka)")
    parser.add_argument(
        "--source-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the streaming source (repeatable), e.g. subscribe=orders",
    )
    parser.add_argument("--lock-priority", type=int, help="priority of the batches' locks (75)")
    parser.add_argument(
        "--metrics-listen", help="serve Prometheus metrics on host:port (e.g. 127.0.0.1:9465)"
    )
    parser.add_argument("--spark-master", help="Spark master (default local[*])")
    parser.add_argument(
        "--spark-remote", help="a Spark Connect URL: refused (ingestion needs a classic session)"
    )
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE")
    return parser


def main_ingest(argv: Sequence[str] | None = None) -> int:
    """Entry point for ``horizon ingest``; returns the process exit code."""
    return run_command("horizon ingest", build_parser(), _run, argv)


def server_config_of(args: argparse.Namespace) -> ServerConfig:
    """The :class:`~horizon_broker.ingest.server_config.ServerConfig` the arguments describe (checked whole)."""
    from horizon_broker.ingest.server_config import load_server_config, server_config

    if args.spark_remote:
        from horizon_broker.ingest.storage import CONNECT_REFUSAL

        raise FailedPrecondition(CONNECT_REFUSAL)
    overrides: dict[str, Any] = {
        "server_id": args.server_id,
        "redis": args.redis,
        "prefix": args.prefix,
        "storage_root": args.storage_root,
        "concurrency": args.concurrency,
        "lock_priority": args.lock_priority,
        "watch": args.watch,
        "format": args.format,
    }
    spark = {"master": args.spark_master} if args.spark_master else {}
    conf = key_value_pairs(args.spark_conf, "--spark-conf")
    if args.config:
        if args.table:
            raise InvalidArgument("give --config or --table, not both")
        config = load_server_config(args.config, **overrides)
    else:
        data = _server_data_of_tables(args, overrides, spark)
        config = server_config(data, base=Path.cwd(), origin="the command line")
    config = _with_command_line_spark(config, spark, conf)
    if args.once:
        from dataclasses import replace

        config = replace(config, watch_s=None)
    if args.stream and not args.checkpoint:
        raise InvalidArgument("--stream needs --checkpoint")
    return config


def _server_data_of_tables(
    args: argparse.Namespace, overrides: dict[str, Any], spark: dict[str, str]
) -> dict[str, Any]:
    """A server file's contents, written from ``--table`` (one per table) and ``--source``."""
    if not args.table:
        raise InvalidArgument("give --config server.toml, or one --table per table")
    if not args.source and not args.source_format:
        raise InvalidArgument("give --source (a changelog directory) or --source-format")
    tables = []
    for path in args.table:
        entry: dict[str, Any] = {"definition": str(Path(path).resolve())}
        if args.partitions:
            entry["partitions"] = args.partitions
        if len(args.table) == 1 and args.source:
            entry["stream" if args.source.startswith(STREAM_SCHEMES) else "source"] = args.source
        tables.append(entry)
    data = {key: value for key, value in overrides.items() if value is not None}
    data.update(tables=tables, spark=spark)
    if len(args.table) > 1 and args.source:
        data["source_root"] = args.source
    return data


def _with_command_line_spark(
    config: ServerConfig, spark: dict[str, str], conf: dict[str, str]
) -> ServerConfig:
    """The configuration with ``--spark-master`` and ``--spark-conf`` over the file's."""
    if not spark and not conf:
        return config
    from dataclasses import replace

    return replace(
        config,
        spark_master=spark.get("master", config.spark_master),
        spark_conf={**config.spark_conf, **conf},
    )


def _run(args: argparse.Namespace) -> int:
    from horizon_broker.ingest.server import IngestServer

    config = server_config_of(args)  # every configuration error before anything is written
    observe = _batch_metrics(args.metrics_listen)
    with _stop_signals() as stop:
        server = IngestServer.from_config(config)
        names = ", ".join(source.name for source in config.tables)
        count = len(config.tables)
        _status(f"server {config.server_id} serves {count} table{'s' * (count > 1)}: {names}")
        failed: set[str] = set()

        def failure(table: str, error: Exception) -> None:
            failed.add(table)
            print(f"{table}: batch failed: {_describe(error)}", flush=True)

        try:
            if args.stream:
                _stream(server, config, args, stop, observe(_print_batch))
            elif config.watch_s:
                _status(f"watching every {config.watch_s:g}s; SIGTERM or Ctrl-C parks and stops")
                server.serve(
                    config.watch_s,
                    stop,
                    on_result=observe(_print_new_batch),
                    on_error=observe(failure),
                )
            else:
                server.run_once(on_result=observe(_print_batch), on_error=observe(failure))
        finally:
            skipped = server.park()
            parked = sum(len(job.partitions) for job in map(server.job, server.tables))
            _status(
                f"server {config.server_id} parked {parked - len(skipped)} partitions"
                + (f"; not parked (an update is pending): {skipped}" if skipped else "")
            )
            server.close()
    return EXIT_TABLE_FAILED if failed else 0


def _stream(
    server: Any,
    config: Any,
    args: argparse.Namespace,
    stop: threading.Event,
    on_batch: Callable[[str, Any], None],
) -> None:
    """One streaming query per table (each in its scheduler pool) until they end or a stop."""
    several = len(config.tables) > 1
    queries = []
    for entry in config.tables:
        checkpoint = f"{args.checkpoint.rstrip('/')}/{entry.name}" if several else args.checkpoint
        source = _external_source(server, entry, args) if args.source_format else None

        def printed(result: Any, table: str = entry.name) -> None:
            on_batch(table, result)

        queries.append(
            server.run_stream(
                entry.name, source, checkpoint, available_now=args.available_now,
                processing_time=args.trigger, on_batch=printed,
            )
        )  # fmt: skip
    while not stop.wait(0.5):
        if not any(query.isActive for query in queries):
            break
    for query in queries:
        query.stop()
    for query in queries:
        error = query.exception()
        if error is not None:
            raise FailedPrecondition(f"streaming query {query.name or query.id} failed: {error}")


def _external_source(server: Any, entry: Any, args: argparse.Namespace) -> Any:
    """A ``--source-format`` stream (Kafka and the like): each value one JSON changelog row."""
    from pyspark.sql import functions as F

    options = key_value_pairs(args.source_option, "--source-option")
    reader = server.spark.readStream.format(args.source_format).options(**options)
    frame = reader.load(entry.source) if entry.source else reader.load()
    if "value" in frame.columns:
        parsed = F.from_json(F.col("value").cast("string"), entry.definition.spark_schema_ddl())
        return frame.select(parsed.alias("row")).select("row.*")
    return frame


def _batch_metrics(
    listen: str | None,
) -> Callable[[Callable[[str, Any], None]], Callable[[str, Any], None]]:
    """What wraps each per-batch printer: it also counts the batch in the server's metrics,
    served on ``listen`` (nothing when not asked for)."""
    if not listen:
        return lambda printer: printer
    from horizon_broker._core.metrics_endpoint import MetricsEndpoint
    from horizon_broker.ingest.metrics import IngestMetrics

    metrics = IngestMetrics()
    endpoint = MetricsEndpoint(listen, [metrics.registry])
    _status(f"metrics on {endpoint.url}")

    def wrap(printer: Callable[[str, Any], None]) -> Callable[[str, Any], None]:
        def observed(table: str, result: Any) -> None:
            if isinstance(result, BaseException):  # wrapping the failure printer
                metrics.observe_failure(table, result)
            else:
                metrics.observe_batch(table, result)
            printer(table, result)

        return observed

    return wrap


def _print_batch(table: str, result: Any) -> None:
    """One line per batch on stdout, ending with its snapshot token: pass it to a query's
    ``--min-snapshot`` to read this batch's writes."""
    if result.skipped and not result.rows:
        text = f"nothing new, high {result.high}"
    else:
        text = (
            f"batch {result.seq}: {result.rows} rows, {len(result.segments)} segments, "
            f"high {result.high}"
        )
    print(f"{table}: {text}, token {result.token or '-'}", flush=True)


def _print_new_batch(table: str, result: Any) -> None:
    """While watching, only batches that ingested something (a quiet table prints nothing)."""
    if not result.skipped:
        _print_batch(table, result)


def _describe(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def _status(message: str) -> None:
    print(f"horizon ingest: {message}", file=sys.stderr, flush=True)


@contextmanager
def _stop_signals() -> Iterator[threading.Event]:
    """SIGTERM and SIGINT set the event (finish the current batches, park, exit); a second one
    exits at once, without parking. The previous handlers come back afterwards."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handle(signum: int, frame: Any) -> None:
        if stop.is_set():
            _status("stopping at once: the partitions are not parked (they freeze)")
            os._exit(EXIT_INTERRUPTED)
        stop.set()
        _status("stopping: finishing the current batches, then parking (again: stop at once)")

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
