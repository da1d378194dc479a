"""Horizon's files before compaction (three per key partition) against the same rows merged
into four files a table (sorted by key, the product's writer and row-group size) and plain's
four, in one Spark: is the gap the number of files?

Run: ``PYTHONPATH=. python bench/runs/2026-11-30-tpch-sf1-ingest-32mib/files_probe.py
bench/results/tpch-sf1/tpch_plans_before.md 9``
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from horizon_broker._core.spark_session import create_spark_session
from horizon_broker.ingest.segment_files import Writer
from horizon_broker.ingest.segments import SEGMENT_ROW_GROUP_BYTES, plain_segment_columns

sys.path.insert(0, str(Path(__file__).parent))
from probe_common import compare, plan_files

files = plan_files(Path(sys.argv[1]).read_text())
rounds = int(sys.argv[2])
out = Path("/tmp/files-probe")
shutil.rmtree(out, ignore_errors=True)
KEYS = {
    "lineitem": ["l_orderkey", "l_linenumber"],
    "orders": ["o_orderkey"],
    "customer": ["c_custkey"],
    "part": ["p_partkey"],
}
merged = {}
for (side, table), paths in files.items():
    if side != "horizon":
        continue
    rows = [pq.read_table(path.removeprefix("file:")) for path in paths]
    whole = pa.concat_tables(rows).sort_by([(key, "ascending") for key in KEYS[table]])
    writer = Writer("TIMESTAMP_MICROS")
    parts = 4 if whole.num_rows > 100_000 else 2
    step = -(-whole.num_rows // parts)
    plain = plain_segment_columns(whole.schema.names, KEYS[table])
    merged[table] = [
        writer.write(str(out / table), whole.slice(i * step, step), SEGMENT_ROW_GROUP_BYTES, plain)
        for i in range(parts)
    ]
spark = create_spark_session(master="local[2]", app_name="files-probe")
spark.sparkContext.setLogLevel("ERROR")
variants = {
    "plain": {table: paths for (side, table), paths in files.items() if side == "plain"},
    "horizon": {table: paths for (side, table), paths in files.items() if side == "horizon"},
    "merged": merged,
}
sessions = {}
for name, tables in variants.items():
    session = spark.newSession()
    for table, paths in tables.items():
        session.read.parquet(*paths).createOrReplaceTempView(table)
    sessions[name] = session
    print(name, {table: len(paths) for table, paths in tables.items()}, flush=True)
compare(sessions, [1, 6, 18, 19, 3], rounds)
