"""Which layout difference makes Spark scan the updater's lineitem file slower."""

import glob
import os
import sys
import time

import pyarrow.parquet as pq

from bench.tpch_metrics import last_execution_id, read_by_scan
from horizon_broker._core.spark_session import create_spark_session

work = sys.argv[1]
src = glob.glob(
    f"{work}/horizon/lineitem/segments/*/u0000000003/*/_seg=32768/_rows=open/*.parquet"
)[0]
table = pq.read_table(src).select([c for c in pq.read_schema(src).names if c.startswith("l_")])
out = "/tmp/tpch49/variants"
os.makedirs(out, exist_ok=True)
variants = {
    "as_written": dict(row_group_size=31300),
    "decimal_int_small_groups": dict(row_group_size=31300, store_decimal_as_integer=True),
    "flba_big_groups": dict(row_group_size=2_000_000),
    "decimal_int_big_groups": dict(row_group_size=2_000_000, store_decimal_as_integer=True),
}
for name, opts in variants.items():
    rg = opts.pop("row_group_size")
    pq.write_table(table, f"{out}/{name}.parquet", row_group_size=rg, compression="snappy", **opts)
spark = create_spark_session(master="local[2]", app_name="probe")
sql = "select sum(l_extendedprice * (1 - l_discount)), count(l_orderkey) from {t} where l_shipdate > date '1995-03-15'"
for name in list(variants) * 1:
    spark.read.parquet(f"{out}/{name}.parquet").createOrReplaceTempView(name)
for rep in range(3):
    for name in variants:
        before = last_execution_id(spark)
        start = time.perf_counter()
        spark.sql(sql.format(t=name)).collect()
        ms = (time.perf_counter() - start) * 1000
        r = read_by_scan(spark, before).as_dict()
        print(rep, name, f"{ms:.0f} ms", r["scan_ms"], r["tasks"], flush=True)
spark.stop()
