"""The profile behind efbbeeb: bench.ingest_streams' partial way (10,000 changes a batch, 10%
partial, 3 untimed then 5 timed batches) twice in one Spark session, the merge forced onto the
Python fold (as before efbbeeb), then as it is (the columnar scan), cProfile around each timed
``run_source``. Run from the checkout under the Spark lock:
``flock /tmp/horizon-spark.lock .venv/bin/python bench/runs/2026-11-29-ingest-streams-scan/profile_merge.py``.
"""

from __future__ import annotations

import cProfile
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.ingest_streams import PARTIAL, Rig, draw
from horizon_broker._core.spark_session import INGESTION_CONF, create_spark_session
from horizon_broker.ingest import partial_upsert_batch as pub
from tests.processes import RedisProcess


def profiled(rig: Rig, mode: str, out: str) -> None:
    key = rig.stream_table(f"partial_{mode}", partial=True)
    profile = cProfile.Profile()
    seconds = []
    for number, batch in enumerate(draw(8, 10_000, PARTIAL)):
        rig.xadd(key, batch)
        if number >= 3:
            profile.enable()
        started = time.perf_counter()
        result = rig.server.run_source(f"partial_{mode}")
        seconds.append(round(time.perf_counter() - started, 3))
        if number >= 3:
            profile.disable()
        assert result.rows == len(batch), result
    print(mode, "batches", seconds, "timed total", round(sum(seconds[3:]), 2), flush=True)
    profile.dump_stats(out)
    pstats.Stats(out).sort_stats("cumulative").print_stats(40)


def main() -> None:
    redis_process = RedisProcess().start()
    conf = {**INGESTION_CONF, "spark.sql.shuffle.partitions": "4"}
    spark = create_spark_session(master="local[2]", app_name="prof", conf=conf)
    work = Path(tempfile.mkdtemp(prefix="prof47-"))
    scan = pub.scanned_columns
    out = sys.argv[1] if len(sys.argv) > 1 else str(work)
    try:
        rig = Rig(spark, redis_process.url, work, "ist")
        for mode in ("python", "scan"):
            python: Any = lambda *_: None  # noqa: E731
            pub.scanned_columns = scan if mode == "scan" else python  # type: ignore[assignment]
            profiled(rig, mode, f"{out}/spark_{mode}.prof")
        rig.close()
    finally:
        spark.stop()
        redis_process.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
