"""Horizon's files before compaction (three per key partition) against the same rows in one file
a key partition (``per_partition``: a partition's three files as one, sorted by key: the layout
merging them as they are written would give), in four files a table sorted by key across the
table (``merged``: key ranges, which also helps joins on the key), and plain's four, in one
Spark, the product's writer and row-group size: is the gap the number of files?

Run: ``PYTHONPATH=. python bench/runs/2026-11-30-tpch-sf1-ingest-32mib/files_probe.py
bench/results/tpch-sf1/tpch_plans_before.md 9``
"""

from __future__ import annotations

import re
import shutil
import sys
from collections import defaultdict
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
PARTITIONS = {"lineitem": 4, "orders": 4, "customer": 2, "part": 2}


def key_partition(path: str, partitions: int) -> int:
    """The key partition of a segment file: its root partition modulo the table's partitions
    (each batch numbers its segments from the next free root; an overwrite's ``_seg`` is
    32,768 plus its root). Checked on lineitem: no key is in two of the groups it makes."""
    seg = int(re.search(r"_seg=(\d+)", path).group(1))  # type: ignore[union-attr]
    return (seg - 32_768 if seg >= 32_768 else seg) % partitions


merged: dict[str, list[str]] = {}
per_partition: dict[str, list[str]] = {}
for (side, table), paths in files.items():
    if side != "horizon":
        continue
    order = [(key, "ascending") for key in KEYS[table]]
    writer = Writer("TIMESTAMP_MICROS")
    groups = defaultdict(list)
    for path in paths:
        local = path.removeprefix("file:")
        groups[key_partition(local, PARTITIONS[table])].append(pq.read_table(local))
    whole = pa.concat_tables([rows for group in groups.values() for rows in group])
    plain = plain_segment_columns(whole.schema.names, KEYS[table])
    per_partition[table] = [
        writer.write(
            str(out / "per_partition" / table),
            pa.concat_tables(group).sort_by(order),
            SEGMENT_ROW_GROUP_BYTES,
            plain,
        )
        for group in groups.values()
    ]
    whole = whole.sort_by(order)
    parts = PARTITIONS[table]
    step = -(-whole.num_rows // parts)
    merged[table] = [
        writer.write(
            str(out / "merged" / table), whole.slice(i * step, step), SEGMENT_ROW_GROUP_BYTES, plain
        )
        for i in range(parts)
    ]
spark = create_spark_session(master="local[2]", app_name="files-probe")
spark.sparkContext.setLogLevel("ERROR")
variants = {
    "plain": {table: paths for (side, table), paths in files.items() if side == "plain"},
    "horizon": {table: paths for (side, table), paths in files.items() if side == "horizon"},
    "per_partition": per_partition,
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
