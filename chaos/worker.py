"""An ingestion server of a fault-injection run (``python -m chaos.worker``), killed and restarted
by the run at will.

It ingests the changelog files the workload drops into ``<work>/inbox/<table>/<server>/``, one
file per batch in name order (the file is the batch's source, so a file is ingested exactly once
across crashes), and acknowledges each in ``<work>/acks/<server>.jsonl`` with the batch's first
commit timestamp, read back from its own commit log when the file was committed before a crash.
Idle, it ticks, so its partitions do not hold the low-watermark back.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

SCHEMAS = {
    "bank": "account bigint, balance bigint, txn string, seq bigint, deleted boolean",
    "register": "key bigint, value bigint, seq bigint, deleted boolean",
}
TICK_S = 0.5


def committed_base(job: Any, source: str) -> int | None:
    """The first commit timestamp of the batch that ingested ``source``, from the commit log."""
    from ingest.manifest import COMMIT, INGEST

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True, type=Path)
    parser.add_argument("--server-id", required=True)
    parser.add_argument("--redis", required=True)
    parser.add_argument("--partitions", required=True)
    parser.add_argument("--spark-master", default="local[1]")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    from core.spark_session import create_spark_session
    from ingest.job import IngestJob
    from ingest.table import TableDefinition
    from watermark.server import ServerClient

    spark = create_spark_session(
        master=args.spark_master,
        app_name=f"chaos-{args.server_id}",
        conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
    )
    client = ServerClient(args.redis, args.server_id)
    partitions = [int(p) for p in args.partitions.split(",")]
    jobs = {}
    for table in SCHEMAS:
        definition = TableDefinition.from_dict(
            json.loads((args.work / f"{table}.json").read_text())
        )
        jobs[table] = IngestJob(spark, definition, client, partitions=partitions).start()
    client.start_heartbeats(1.0)
    acks = args.work / "acks" / f"{args.server_id}.jsonl"
    acks.parent.mkdir(parents=True, exist_ok=True)
    acked = set()
    if acks.exists():
        acked = {json.loads(line)["file"] for line in acks.read_text().splitlines() if line}
    print(f"{args.server_id} ready", flush=True)
    last_tick = 0.0
    while True:
        worked = False
        for table, job in jobs.items():
            inbox = args.work / "inbox" / table / args.server_id
            pending = sorted(p for p in inbox.glob("*.json") if str(p) not in acked)
            if not pending:
                continue
            source = str(pending[0])
            frame = spark.read.schema(SCHEMAS[table]).json(source)
            result = job.run_batch(frame, sources=[source])
            base = committed_base(job, source) if result.skipped else result.base
            acknowledge(acks, {"table": table, "file": source, "base": base})
            acked.add(source)
            worked = True
        if not worked:
            if time.monotonic() - last_tick > TICK_S:
                for job in jobs.values():
                    job.tick()
                last_tick = time.monotonic()
            time.sleep(0.05)


if __name__ == "__main__":
    raise SystemExit(main())
