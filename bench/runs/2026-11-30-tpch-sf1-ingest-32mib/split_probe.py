"""Horizon's files before compaction against plain's, as they are and split finer
(``spark.sql.files.maxPartitionBytes``), in one Spark: is the gap the scan's task balance?

Run (after ``python -m bench.tpch --scale 1 --queries 1,6,18,19 --rounds 1 --no-compaction
--keep-work``): ``PYTHONPATH=. python bench/runs/2026-11-30-tpch-sf1-ingest-32mib/split_probe.py
bench/results/tpch-sf1/tpch_plans_before.md 1,6,19,18,3,12 7``
"""

from __future__ import annotations

import sys
from pathlib import Path

from horizon_broker._core.spark_session import create_spark_session

sys.path.insert(0, str(Path(__file__).parent))
from probe_common import compare, plan_files

files = plan_files(Path(sys.argv[1]).read_text())
numbers = [int(number) for number in sys.argv[2].split(",")]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
VARIANTS = {
    "plain": ("plain", {}),
    "horizon": ("horizon", {}),
    "h24m": ("horizon", {"spark.sql.files.maxPartitionBytes": "24m"}),
    "h32m": ("horizon", {"spark.sql.files.maxPartitionBytes": "32m"}),
    "p24m": ("plain", {"spark.sql.files.maxPartitionBytes": "24m"}),
}
spark = create_spark_session(master="local[2]", app_name="split-probe")
spark.sparkContext.setLogLevel("ERROR")
sessions = {}
for name, (side, conf) in VARIANTS.items():
    session = spark.newSession()
    for key, value in conf.items():
        session.conf.set(key, value)
    tables = {table: paths for (kind, table), paths in files.items() if kind == side}
    for table, paths in tables.items():
        session.read.parquet(*paths).createOrReplaceTempView(table)
    sessions[name] = session
    print(name, {t: session.table(t).rdd.getNumPartitions() for t in tables}, flush=True)
compare(sessions, numbers, rounds)
