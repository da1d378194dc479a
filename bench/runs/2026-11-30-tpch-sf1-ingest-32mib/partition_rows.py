"""Rows per scan task of lineitem, Horizon's 12 files before compaction against plain's 4,
under Spark's split settings (diagnosis: five tasks on two cores against four).

Run: ``PYTHONPATH=. python bench/runs/2026-11-30-tpch-sf1-ingest-32mib/partition_rows.py
bench/results/tpch-sf1/tpch_plans_before.md``
"""

from __future__ import annotations

import sys
from pathlib import Path

from pyspark.sql import functions as F

from horizon_broker._core.spark_session import create_spark_session

sys.path.insert(0, str(Path(__file__).parent))
from probe_common import plan_files

files = plan_files(Path(sys.argv[1]).read_text())
sides = {side: files[(side, "lineitem")] for side in ("horizon", "plain")}
spark = create_spark_session(master="local[2]", app_name="partition-rows")
spark.sparkContext.setLogLevel("ERROR")
CONFS = (
    {},
    {"spark.sql.files.minPartitionNum": "4"},
    {"spark.sql.files.maxPartitionBytes": "24m"},
    {"spark.sql.files.maxPartitionBytes": "48m"},
)
for conf in CONFS:
    session = spark.newSession()
    for key, value in conf.items():
        session.conf.set(key, value)
    for side, paths in sides.items():
        frame = session.read.parquet(*paths).select("l_shipdate")
        counts = frame.groupBy(F.spark_partition_id().alias("p")).agg(F.count("*").alias("n"))
        rows = sorted((row["n"] for row in counts.collect()), reverse=True)
        tasks = frame.rdd.getNumPartitions()
        print(conf, side, tasks, [round(n / 1e6, 2) for n in rows], flush=True)
