"""(Second run, 2026-11-29, eighth session: Parquet reader options on the 8 MiB layout, per view,
against 32 MiB groups; adapted from ``../2026-11-29-tpch-gaps/row_group_probe.py``.)

Scale factor 1's lineitem as compaction writes it (Spark, one file sorted by key, validity
columns, ``parquet.block.size``) at several row-group sizes, against plain Spark's files: TPC-H
scans (Q06, Q19) and key lookups side by side in one Spark (diagnosis only).

Run: PYTHONPATH=. flock /tmp/horizon-spark.lock .venv/bin/python bench/runs/2026-11-29-tpch-sf1-32mib/reader_options_probe.py
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time

import pyarrow.parquet as pq

from bench.tpch_data import generate
from bench.tpch_metrics import last_execution_id, read_by_scan
from bench.tpch_queries import QUERIES
from horizon_broker._core.spark_session import create_spark_session

SCALE = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 7
OUT = f"/tmp/rg50-sf{SCALE:g}"
SIZES = {"horizon_8m": "8m", "horizon_32m": "32m"}
VARIANTS = {
    "h8m_nocolidx": ("horizon_8m", {"parquet.filter.columnindex.enabled": "false"}),
    "h8m_nodict": ("horizon_8m", {"parquet.filter.dictionary.enabled": "false"}),
    "h8m_nostats": (
        "horizon_8m",
        {
            "parquet.filter.columnindex.enabled": "false",
            "parquet.filter.dictionary.enabled": "false",
            "parquet.filter.stats.enabled": "false",
        },
    ),
    "h8m_nopush": (
        "horizon_8m",
        {
            "parquet.filter.columnindex.enabled": "false",
            "parquet.filter.dictionary.enabled": "false",
            "parquet.filter.stats.enabled": "false",
            "parquet.filter.record-level.enabled": "false",
        },
    ),
}

started = time.perf_counter()
tables = generate(SCALE)
os.makedirs(OUT, exist_ok=True)
for name in ("lineitem", "part"):
    pq.write_table(tables[name], f"{OUT}/{name}-source.parquet", store_decimal_as_integer=True)
keys = tables["lineitem"].column("l_orderkey").to_pylist()
print(f"generated in {time.perf_counter() - started:.0f} s", flush=True)
spark = create_spark_session(master="local[2]", app_name="row-group-probe")
from pyspark.sql import functions as F  # noqa: E402

source = spark.read.parquet(f"{OUT}/lineitem-source.parquet")
spark.read.parquet(f"{OUT}/part-source.parquet").repartition(2, "p_partkey").write.mode(
    "overwrite"
).parquet(f"{OUT}/part")
spark.read.parquet(f"{OUT}/part").createOrReplaceTempView("part")
source.repartition(4, "l_orderkey", "l_linenumber").write.mode("overwrite").parquet(f"{OUT}/plain")
horizon = source.withColumn("validFrom", F.lit(1_700_000_000_000).cast("long")).withColumn(
    "validUntil", F.lit(None).cast("long")
)
for name, size in SIZES.items():
    (
        horizon.repartition(1)
        .sortWithinPartitions("l_orderkey", "l_linenumber")
        .write.mode("overwrite")
        .option("parquet.block.size", str(int(size[:-1]) * 1024 * 1024))
        .option("parquet.enable.dictionary#validFrom", "false")
        .option("parquet.enable.dictionary#validUntil", "false")
        .parquet(f"{OUT}/{name}")
    )
print(f"written in {time.perf_counter() - started:.0f} s", flush=True)
layouts = ["plain", *SIZES, *VARIANTS]
for name in ["plain", *SIZES]:
    files = sorted(
        f"{OUT}/{name}/{f}" for f in os.listdir(f"{OUT}/{name}") if f.endswith(".parquet")
    )
    groups = sum(pq.ParquetFile(f).metadata.num_row_groups for f in files)
    size = sum(os.path.getsize(f) for f in files) / 2**20
    print(f"{name}: {len(files)} files, {groups} row groups, {size:.0f} MiB", flush=True)
    spark.read.parquet(*files).createOrReplaceTempView(name)
for name, (base, options) in VARIANTS.items():
    files = sorted(
        f"{OUT}/{base}/{f}" for f in os.listdir(f"{OUT}/{base}") if f.endswith(".parquet")
    )
    spark.read.options(**options).parquet(*files).createOrReplaceTempView(name)
rng = random.Random(49)
lookup_keys = [rng.choice(keys) for _ in range(5)]
queries = {
    "Q06": QUERIES[6].replace("from lineitem", "from {t}"),
    "Q19": QUERIES[19].replace("from lineitem", "from {t}"),
    "lookup": "select * from {t} where l_orderkey = {k} and l_linenumber = 1",
}
assert all("{t}" in sql for sql in queries.values())
for label, sql in queries.items():
    wall: dict[str, list[float]] = {name: [] for name in layouts}
    scan: dict[str, list[int]] = {name: [] for name in layouts}
    rows: dict[str, int] = {}
    for round_index in range(ROUNDS + 1):
        order = layouts[:]
        rng.shuffle(order)
        for name in order:
            text = sql.format(t=name, k=lookup_keys[round_index % len(lookup_keys)])
            before = last_execution_id(spark)
            begun = time.perf_counter()
            spark.sql(text).collect()
            elapsed = (time.perf_counter() - begun) * 1000
            reads = read_by_scan(spark, before).as_dict()
            if round_index:  # the first round warms up
                wall[name].append(elapsed)
                scan[name].append(sum(reads["scan_ms"].values()))
                rows[name] = reads["rows"].get("lineitem", 0)
    plain_ms = statistics.median(wall["plain"])
    for name in layouts:
        print(
            f"{label} {name}: {statistics.median(wall[name]):.0f} ms "
            f"({statistics.median(wall[name]) / plain_ms:.2f}x plain), scan time "
            f"{statistics.median(scan[name]):.0f} ms, lineitem rows out of the scan {rows[name]}",
            flush=True,
        )
spark.stop()
