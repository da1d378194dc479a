"""Which construct of the rewritten SQL makes Spark plan it slower than the original text
(diagnosis only). Scale factor 0.01's tables as Parquet with the validity columns, each
registered twice in one session: as ``<table>`` (the original text reads it) and as the
rewritten text's open view. Per query, interleaved: the planning time (parse to physical plan,
no job) of the original text, the rewritten text, the rewritten text with each derived table
``(SELECT cols FROM view) AS t`` written ``view AS t``, and with ``CAST('d' AS DATE)`` written
``DATE 'd'``.

Run: flock /tmp/horizon-spark.lock .venv/bin/python bench/runs/2026-11-29-tpch-gaps/planning_probe.py
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq

from bench.tpch import SPARK_TYPES
from bench.tpch_data import generate
from bench.tpch_queries import QUERIES
from horizon_broker._core.spark_session import create_spark_session
from horizon_broker.broker.sql import Catalog, CatalogTable, FunctionPolicy, rewrite
from horizon_broker.watermark.catalog import ColumnSpec

REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 15
OUT = "/tmp/planning49"
tables = generate(0.01)
os.makedirs(OUT, exist_ok=True)
catalog = Catalog(
    CatalogTable(
        name=name,
        columns=tuple(ColumnSpec(f.name, SPARK_TYPES[str(f.type)]) for f in table.schema),
        primary_key=(table.schema[0].name,),
        upsert=True,
        lwm=1000,
        retention_horizon=0,
        source_view="",
        open_view=f"__horizon_{name}_g7_t900_o",
        closed_view=f"__horizon_{name}_g7_t900_c",
        settled_through=900,
        closed_through=950,
    )
    for name, table in tables.items()
)
functions = FunctionPolicy.from_names(
    ["sum", "avg", "count", "max", "min", "substring", "extract", "exists", "year"]
)
texts: dict[int, dict[str, str]] = {}
for number, sql in QUERIES.items():
    try:
        rewritten = rewrite(sql, catalog, functions=functions).sql
    except Exception as error:  # a function the policy above lacks: skip the query
        print(f"Q{number:02d}: not rewritten offline ({type(error).__name__}: {error})")
        continue
    direct = re.sub(r"\(SELECT [^()]*? FROM (__horizon_\w+)\)", r"\1", rewritten)
    dates = re.sub(r"CAST\('(\d{4}-\d\d-\d\d)' AS DATE\)", r"DATE '\1'", rewritten)
    texts[number] = {"original": sql, "rewritten": rewritten, "direct": direct, "dates": dates}
spark = create_spark_session(master="local[2]", app_name="planning-probe")
for name, table in tables.items():
    n = table.num_rows
    stored = table.append_column("validFrom", pa.array([1] * n, pa.int64())).append_column(
        "validUntil", pa.nulls(n, pa.int64())
    )
    path = f"{OUT}/{name}.parquet"
    pq.write_table(stored, path, store_decimal_as_integer=True)
    frame = spark.read.parquet(path)
    frame.createOrReplaceTempView(name)
    frame.createOrReplaceTempView(f"__horizon_{name}_g7_t900_o")


def plan_ms(sql: str) -> float:
    started = time.perf_counter()
    spark.sql(sql)._jdf.queryExecution().executedPlan()
    return (time.perf_counter() - started) * 1000


kinds = ["original", "rewritten", "direct", "dates"]
sums = dict.fromkeys(kinds, 0.0)
for number, variants in texts.items():
    samples: dict[str, list[float]] = {kind: [] for kind in kinds}
    for kind in kinds:
        plan_ms(variants[kind])  # warm-up
    for rep in range(REPS):
        order = kinds[rep % 4 :] + kinds[: rep % 4]
        for kind in order:
            samples[kind].append(plan_ms(variants[kind]))
    medians = {kind: statistics.median(values) for kind, values in samples.items()}
    for kind in kinds:
        sums[kind] += medians[kind]
    print(f"Q{number:02d} " + " ".join(f"{k} {v:.1f}" for k, v in medians.items()), flush=True)
print("sums ms: " + " ".join(f"{k} {v:.0f}" for k, v in sums.items()), flush=True)
spark.stop()
