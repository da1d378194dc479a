"""``horizon compact``: compact one table once, or keep compacting it under a policy.

    horizon compact --table accounts.toml --redis redis://127.0.0.1:6379/0 [--interval A/B]
    horizon compact ... --watch 60 --min-segments 8 --skip-newest 1   # the automatic policy
    horizon compact ... --mode major --interval 2026-01-01/2026-02-01  # new major versions

Each pass runs a minor compaction (segment locks at priority 25: ingestion preempts it) of every
chunk holding at least ``--min-segments`` visible segments or ``--min-small-files`` small files
(merging runs of adjacent small segments), then withdraws and deletes
what earlier compactions replaced once the table's ``gc_grace`` has passed. With ``--reclaim`` a
pass also rewrites the segments holding the most history below the retention horizon
(:mod:`horizon_broker.compaction.reclaim`), ``--reclaim-rows`` / ``--reclaim-files`` per step.
"""

from __future__ import annotations

import argparse
import logging
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from horizon_broker._core.commands import key_value_pairs, run_command
from horizon_broker._core.errors import InvalidArgument
from horizon_broker._core.store_address import STORE_URL_HELP
from horizon_broker.timeline.interval import Interval

if TYPE_CHECKING:
    from horizon_broker.compaction.metrics import CompactionMetrics
    from horizon_broker.compaction.plan import CompactionSettings
    from horizon_broker.compaction.run import Compactor
    from horizon_broker.watermark.server import ServerClient

log = logging.getLogger("horizon.compact")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="horizon compact", description=__doc__.split("\n")[0])
    parser.add_argument("--table", required=True, help="table definition (TOML)")
    parser.add_argument(
        "--redis",
        required=True,
        help=STORE_URL_HELP,
    )
    parser.add_argument("--prefix", default="horizon", help="Redis key prefix")
    parser.add_argument("--interval", help="only chunks overlapping START/END (ISO-8601)")
    parser.add_argument("--mode", default="minor", choices=["minor", "major"])
    parser.add_argument("--target-rows", type=int, default=5_000_000)
    parser.add_argument("--target-bytes", type=int, default=512 * 1024 * 1024)
    parser.add_argument(
        "--min-segments", type=int, default=2, help="compact a chunk holding this many segments"
    )
    parser.add_argument(
        "--min-small-files", type=int, default=0, help="... or this many small files (0: off)"
    )
    parser.add_argument("--small-file-bytes", type=int, default=16 * 1024 * 1024)
    parser.add_argument("--skip-newest", type=int, default=0, help="leave the newest N chunks")
    parser.add_argument("--priority", type=int, default=25, help="lock priority (Druid: 25)")
    parser.add_argument("--wait", type=float, default=0.0, help="seconds to wait for locks")
    parser.add_argument("--watch", type=float, help="run a pass every N seconds")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    parser.add_argument(
        "--reclaim", action="store_true", help="also rewrite segments holding expired history"
    )
    parser.add_argument("--reclaim-rows", type=int, default=2_000_000, help="rows per step")
    parser.add_argument("--reclaim-files", type=int, default=64, help="files per step")
    parser.add_argument("--storage-root", help="override the table's storage root")
    parser.add_argument(
        "--metrics-listen", help="serve Prometheus metrics on host:port (e.g. 127.0.0.1:9466)"
    )
    parser.add_argument("--spark-master", default="local[*]")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE")
    return parser


def main_compact(argv: Sequence[str] | None = None) -> int:
    """Entry point for ``horizon compact``; returns the process exit code."""
    return run_command("horizon compact", build_parser(), _run, argv)


def _run(args: argparse.Namespace) -> int:
    from horizon_broker._core.spark_session import create_spark_session
    from horizon_broker.compaction.run import Compactor
    from horizon_broker.ingest.table import TableDefinition
    from horizon_broker.watermark.server import ServerClient

    for name in ("target_rows", "target_bytes", "min_segments"):
        if getattr(args, name) < 1:
            raise InvalidArgument(f"--{name.replace('_', '-')} must be at least 1")
    table = TableDefinition.load(args.table, storage_root=args.storage_root)
    interval = Interval.parse(args.interval) if args.interval else None
    settings = _settings(args)
    spark = create_spark_session(
        master=args.spark_master, app_name=f"horizon-compact-{table.name}",
        conf=key_value_pairs(args.spark_conf, "--spark-conf"),
    )  # fmt: skip
    client = ServerClient(args.redis, f"compactor-{uuid.uuid4().hex[:8]}", prefix=args.prefix)
    metrics = _metrics(args.metrics_listen)
    try:
        compactor = Compactor(
            spark, table, client, settings=settings, priority=args.priority, wait_s=args.wait,
            progress=lambda message: print(message, flush=True),
        )  # fmt: skip
        one_pass = _major_pass if args.mode == "major" else _minor_pass
        while True:
            outcome = one_pass(compactor, client, interval, args, metrics)
            if outcome is None:  # a dry run: the plan was printed
                return 0
            if not args.watch:
                return 0 if outcome != "revoked" else 3
            time.sleep(args.watch)
    finally:
        client.close()


def _settings(args: argparse.Namespace) -> CompactionSettings:
    from horizon_broker.compaction.plan import CompactionSettings

    return CompactionSettings(
        target_rows=args.target_rows,
        target_bytes=args.target_bytes,
        min_segments=args.min_segments,
        min_small_files=args.min_small_files,
        small_file_bytes=args.small_file_bytes,
    )


def _major_pass(
    compactor: Compactor,
    client: ServerClient,
    interval: Interval | None,
    args: argparse.Namespace,
    metrics: CompactionMetrics | None,
) -> str:
    """One major compaction (new major versions of the chunks); its outcome."""
    report = compactor.compact_major(interval=interval, skip_newest=args.skip_newest)
    if metrics is not None:
        metrics.observe_run(compactor.table.name, report)
    print(f"{report.outcome}: {len(report.inputs)} -> {len(report.outputs)} segments "
          f"in new major versions {report.message}".rstrip(), flush=True)  # fmt: skip
    return report.outcome


def _minor_pass(
    compactor: Compactor,
    client: ServerClient,
    interval: Interval | None,
    args: argparse.Namespace,
    metrics: CompactionMetrics | None,
) -> str | None:
    """One minor pass: compact the planned chunks, reclaim history if asked, collect what
    earlier passes replaced; its outcome (None for a dry run, which only prints the plan)."""
    targets = compactor.plan(interval=interval, skip_newest=args.skip_newest)
    if args.dry_run:
        for target in targets:
            print(
                f"{target.interval} roots [{target.root_range[0]}, "
                f"{target.root_range[1]}) <- {len(target.inputs)} segments, "
                f"{target.rows} rows, {target.size_bytes} bytes"
            )
        return None
    report = compactor.compact(targets)
    if metrics is not None:
        metrics.observe_run(compactor.table.name, report)
    print(
        f"{report.outcome}: {len(report.inputs)} -> {len(report.outputs)} segments, "
        f"{report.rows_in} -> {report.rows_out} rows {report.message}".rstrip(),
        flush=True,
    )
    if args.reclaim:
        _reclaim_history(compactor, args, metrics)
    _collect_replaced(compactor, client, metrics)
    return report.outcome


def _reclaim_history(
    compactor: Compactor, args: argparse.Namespace, metrics: CompactionMetrics | None
) -> None:
    from horizon_broker.compaction.reclaim import ReclaimSettings, reclaim

    history = reclaim(
        compactor,
        ReclaimSettings(max_rows_per_step=args.reclaim_rows, max_files_per_step=args.reclaim_files),
    )
    if metrics is not None:
        metrics.observe_reclaim(compactor.table.name, history.rows_reclaimed)
    print(
        f"reclaimed {history.rows_reclaimed} of {history.reclaimable_rows} versions "
        f"below horizon {history.horizon} in {len(history.steps)} steps: "
        f"{history.bytes_before} -> {history.bytes_after} bytes rewritten",
        flush=True,
    )


def _collect_replaced(
    compactor: Compactor, client: ServerClient, metrics: CompactionMetrics | None
) -> None:
    """Withdraw and delete what earlier compactions replaced, once the table's grace passed."""
    from horizon_broker.compaction.collect import collect_replaced

    table = compactor.table
    collected = collect_replaced(
        compactor.storage, client, table.name, compactor.root,
        grace_ms=table.gc_grace_ms, now_ms=time.time_ns() // 1_000_000,
    )  # fmt: skip
    if metrics is not None:
        metrics.observe_collected(table.name, collected.bytes_freed)
    if collected.withdrawn or collected.deleted_files or collected.unpublished_runs:
        print(
            f"collected: {collected.withdrawn} replaced segments withdrawn, "
            f"{collected.deleted_files} files ({collected.bytes_freed} bytes) deleted, "
            f"{collected.unpublished_runs} unpublished runs' directories deleted",
            flush=True,
        )


def _metrics(listen: str | None) -> CompactionMetrics | None:
    """The compactor's metrics served on ``listen`` (None when not asked for)."""
    if not listen:
        return None
    from horizon_broker._core.metrics_endpoint import MetricsEndpoint
    from horizon_broker.compaction.metrics import CompactionMetrics

    metrics = CompactionMetrics()
    endpoint = MetricsEndpoint(listen, [metrics.registry])
    print(f"metrics on {endpoint.url}", flush=True)
    return metrics
