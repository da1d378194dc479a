"""An ingestion server of a fault-injection run (``python -m chaos.worker``), killed, stopped and
restarted by the run at will.

One :class:`~horizon_broker.ingest.server.IngestServer` serves every table of the run. It ingests the changelog
files the workload drops into ``<work>/inbox/<table>/<server>/``, one file per batch in name order
(the file is the batch's source, so a file is ingested exactly once across crashes), and
acknowledges each in ``<work>/acks/<server>.jsonl`` with the batch's first commit timestamp (read
back from its own commit log when the file was committed before a crash) and when the batch
started (``time.monotonic()``, the readers' clock: the checker proves no commit lands at or below a
snapshot served before it). Idle tables need nothing: their partitions follow the server's
heartbeats. SIGTERM finishes the current batch, parks every partition and exits 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

SCHEMAS = {
    "bank": "account bigint, balance bigint, txn string, seq bigint, deleted boolean",
    "register": "key bigint, value bigint, seq bigint, deleted boolean",
    "quiet": "key bigint, value bigint, seq bigint, deleted boolean",
}
POLL_S = 0.05
HEARTBEAT_S = 0.25
"""Idle partitions' LWM follows the clock these beats carry: a beat lands inside most batches,
where a partition that was not resumed first would show (the ``resume_skipped`` mutation)."""


def committed_base(job: Any, source: str) -> int | None:
    """The first commit timestamp of the batch that ingested ``source``, from the commit log."""
    from horizon_broker.ingest.manifest import COMMIT, INGEST

    for record in job.manifest.records():
        ingested = record.phase == COMMIT and record.kind == INGEST
        if ingested and source in record.body.get("sources", ()):
            return int(record.body["base"])
    return None


def acknowledge(path: Path, entry: dict[str, Any]) -> None:
    with path.open("a") as handle:
        handle.write(json.dumps(entry) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


BATCH_MARK = ": batch "
"""In the line a worker prints for every batch it committed."""
CAUGHT_UP_MARK = " caught up"
"""In the line a worker prints the first time it finds nothing to ingest after it started."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True, type=Path)
    parser.add_argument("--server-id", required=True)
    parser.add_argument("--redis", required=True)
    parser.add_argument("--partitions", required=True)
    parser.add_argument("--spark-master", default="local[1]")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())

    from horizon_broker._core.spark_session import INGESTION_CONF, create_spark_session
    from horizon_broker.ingest.server import IngestServer
    from horizon_broker.ingest.table import TableDefinition

    spark = create_spark_session(
        master=args.spark_master,
        app_name=f"chaos-{args.server_id}",
        conf={**INGESTION_CONF, "spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
    )
    partitions = [int(p) for p in args.partitions.split(",")]
    server = IngestServer(args.redis, args.server_id, spark, heartbeat_s=HEARTBEAT_S)
    for table in SCHEMAS:
        definition = json.loads((args.work / f"{table}.json").read_text())
        server.add_table(TableDefinition.from_dict(definition), partitions=partitions)
    acks = args.work / "acks" / f"{args.server_id}.jsonl"
    acks.parent.mkdir(parents=True, exist_ok=True)
    acked = set()
    if acks.exists():
        acked = {json.loads(line)["file"] for line in acks.read_text().splitlines() if line}
    print(f"{_now()} {args.server_id} ready", flush=True)
    caught_up = False
    while not stop.is_set():
        worked = False
        for table in SCHEMAS:
            inbox = args.work / "inbox" / table / args.server_id
            pending = sorted(p for p in inbox.glob("*.json") if str(p) not in acked)
            if not pending or stop.is_set():
                continue
            source = str(pending[0])
            _ingest_one(spark, server, table, source, acks)
            acked.add(source)
            worked = True
        if not worked:
            if not caught_up:
                print(f"{_now()} {args.server_id}{CAUGHT_UP_MARK}", flush=True)
                caught_up = True
            stop.wait(POLL_S)
    skipped = server.park()
    print(f"{_now()} {args.server_id} parked (not parked: {skipped})", flush=True)
    server.close()
    return 0


def _ingest_one(spark: Any, server: Any, table: str, source: str, acks: Path) -> None:
    """Ingest one inbox file as one batch and acknowledge it (with the base it was committed
    at, and when it started unless a crash left that unknown)."""
    started: float | None
    started = began = time.monotonic()
    frame = spark.read.schema(SCHEMAS[table]).json(source)
    result = server.run_batch(table, frame, sources=[source])
    if result.skipped:  # committed before a crash: when it started is unknown
        base, started = committed_base(server.job(table), source), None
    else:
        base = result.base
    entry = {"table": table, "file": source, "base": base, "started": started}
    acknowledge(acks, entry)
    took = time.monotonic() - began
    print(f"{_now()} {table}{BATCH_MARK}{result.seq} of {result.rows} rows in {took:.1f} s",
          flush=True)  # fmt: skip


def _now() -> str:
    return time.strftime("%H:%M:%S")


if __name__ == "__main__":
    raise SystemExit(main())
