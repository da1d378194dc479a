"""Where ingestion's time goes with the updater's merges and without: lineitem and orders at
scale factor 1 through ``IngestJob`` as ``bench.tpch`` ingests them (three upsert batches, the
updater after each), once with ``rewrite_target_rows = 0`` (each segment rewritten alone) and
once with the default, in one Spark and one Redis: per batch its seconds and stage seconds,
and the visible segments and open files it leaves.

Run: ``PYTHONPATH=. python bench/runs/2026-11-30-tpch-sf1-merged-rewrites/ingest_profile.py``
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from bench.tpch import _services, definition
from bench.tpch_data import batches, generate
from horizon_broker.ingest.job import IngestJob
from horizon_broker.watermark.server import ServerClient

TABLES = ("orders", "lineitem")

with _services(None, None, {}) as (spark, redis_url), tempfile.TemporaryDirectory() as tmp:
    finals = {name: table for name, table in generate(1.0).items() if name in TABLES}
    changes = {name: batches(name, final) for name, final in finals.items()}
    for target in (0, 2_000_000):
        server = ServerClient(redis_url, f"profile-{target}")
        work = Path(tmp) / f"t{target}"
        for name in TABLES:
            table = dataclasses.replace(
                definition(name, changes[name][0].schema, work / "horizon"),
                name=f"{name}_{target}",
                rewrite_target_rows=target,
            )
            job = IngestJob(spark, table, server).start()
            total = 0.0
            for number, batch in enumerate(changes[name]):
                path = work / "batches" / f"{name}-{number + 1}.parquet"
                path.parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(batch, path)
                started = time.perf_counter()
                result = job.run_batch(spark.read.parquet(str(path)))
                seconds = time.perf_counter() - started
                total += seconds
                stages = {k: round(v, 2) for k, v in result.stage_seconds}
                print(f"target {target} {name} batch {number + 1}: {seconds:.1f} s, "
                      f"updated {result.updated_segments}, stages {stages}", flush=True)  # fmt: skip
            visible = server.announced_segments(table.name)
            print(f"target {target} {name}: {total:.1f} s; announced segments "
                  f"{sorted((s.root_start, s.root_end, s.row_count, len(s.open_files)) for s in visible)}",
                  flush=True)  # fmt: skip
        server.close()
