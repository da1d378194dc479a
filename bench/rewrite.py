"""SQL rewrite benchmark: parse + rewrite + generate against bare sqlglot parse + generate.

The bare figure is taken on the input text, and also on the rewritten output (longer: every
upsert table becomes a subquery with the validity predicate), which the rewrite has to generate.

Two queries: a one-table filter and a 60-line TPC-H-like query (CTE, seven joins, EXISTS / NOT
EXISTS / IN / scalar subqueries, HAVING with a subquery). Both variants are timed in the same run,
interleaved round by round so machine noise hits them alike. Targets: rewrite <= 1.5x bare, and
the simple query <= 0.5 ms p50.

Run: ``.venv/bin/python -m bench.rewrite [--quick]``. Writes ``bench/results/rewrite.json``.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable

import sqlglot

from bench.report import print_table, summarize, write_results
from horizon_broker.broker.sql import Catalog, CatalogTable, FunctionPolicy, rewrite
from horizon_broker.watermark.catalog import ColumnSpec

SIMPLE = "SELECT id, amount FROM orders WHERE amount > 10 AND status = 'open'"

TPCH_LIKE = """
WITH revenue AS (
  SELECT l_suppkey AS supplier_no, SUM(l_extendedprice * (1 - l_discount)) AS total_revenue
  FROM lineitem
  WHERE l_shipdate >= DATE '1996-01-01' AND l_shipdate < DATE '1996-04-01'
  GROUP BY l_suppkey
),
big_customers AS (
  SELECT c_custkey, c_name, c_acctbal
  FROM customer
  WHERE c_acctbal > (SELECT AVG(c_acctbal) FROM customer WHERE c_acctbal > 0)
    AND c_custkey NOT IN (
      SELECT o_custkey
      FROM orders
      WHERE o_orderpriority = '5-LOW'
    )
),
ranked AS (
  SELECT
    o_orderkey,
    o_custkey,
    ROW_NUMBER() OVER (PARTITION BY o_custkey ORDER BY o_orderdate DESC) AS rn
  FROM orders
)
SELECT
  n.n_name,
  s.s_suppkey,
  s.s_name,
  SUM(l.l_extendedprice * (1 - l.l_discount)) AS revenue,
  COUNT(DISTINCT o.o_orderkey) AS orders,
  AVG(r.total_revenue) AS avg_rev,
  CASE WHEN SUM(l.l_quantity) > 100 THEN 'big' ELSE 'small' END AS size_class
FROM customer c
JOIN orders o ON c.c_custkey = o.o_custkey
JOIN lineitem l ON l.l_orderkey = o.o_orderkey
JOIN supplier s ON l.l_suppkey = s.s_suppkey
LEFT JOIN nation n ON s.s_nationkey = n.n_nationkey
LEFT JOIN region rg ON n.n_regionkey = rg.r_regionkey
JOIN revenue r ON r.supplier_no = s.s_suppkey
JOIN big_customers bc ON bc.c_custkey = c.c_custkey
JOIN ranked rk ON rk.o_orderkey = o.o_orderkey AND rk.rn <= 3
WHERE rg.r_name = 'ASIA'
  AND o.o_orderdate >= DATE '1994-01-01'
  AND o.o_orderdate < DATE '1995-01-01'
  AND c.c_nationkey = s.s_nationkey
  AND l.l_quantity BETWEEN 1 AND 50
  AND o.o_orderpriority IN ('1-URGENT', '2-HIGH')
  AND EXISTS (
    SELECT 1 FROM lineitem l2
    WHERE l2.l_orderkey = l.l_orderkey AND l2.l_suppkey <> l.l_suppkey
  )
  AND NOT EXISTS (
    SELECT 1 FROM lineitem l3
    WHERE l3.l_orderkey = l.l_orderkey
      AND l3.l_suppkey <> l.l_suppkey
      AND l3.l_receiptdate > l3.l_commitdate
  )
  AND r.total_revenue = (SELECT MAX(total_revenue) FROM revenue)
  AND s.s_suppkey IN (SELECT ps_suppkey FROM partsupp WHERE ps_availqty > 100)
GROUP BY n.n_name, s.s_suppkey, s.s_name
HAVING SUM(l.l_extendedprice * (1 - l.l_discount)) > (
  SELECT SUM(ps_supplycost * ps_availqty) * 0.0001 FROM partsupp
)
ORDER BY revenue DESC, n.n_name
LIMIT 100
"""

TPCH_TABLES: dict[str, tuple[str, ...]] = {
    "customer": ("c_custkey", "c_name", "c_nationkey", "c_acctbal"),
    "orders": (
        "o_orderkey",
        "o_custkey",
        "o_orderdate",
        "o_orderpriority",
        "id",
        "amount",
        "status",
    ),
    "lineitem": (
        "l_orderkey",
        "l_suppkey",
        "l_quantity",
        "l_extendedprice",
        "l_discount",
        "l_shipdate",
        "l_commitdate",
        "l_receiptdate",
        "l_linenumber",
    ),
    "supplier": ("s_suppkey", "s_name", "s_nationkey"),
    "nation": ("n_nationkey", "n_name", "n_regionkey"),
    "region": ("r_regionkey", "r_name"),
    "partsupp": ("ps_partkey", "ps_suppkey", "ps_availqty", "ps_supplycost"),
}


def _catalog() -> Catalog:
    return Catalog(
        CatalogTable(
            name=name,
            columns=tuple(ColumnSpec(column, "bigint") for column in columns),
            primary_key=(columns[0],),
            upsert=True,
            lwm=1_000_000 + index,
            retention_horizon=0,
            source_view=f"__horizon_{name}_g7",
        )
        for index, (name, columns) in enumerate(TPCH_TABLES.items())
    )


FUNCTIONS = FunctionPolicy.from_names(["sum", "avg", "count", "max", "min", "row_number"])


def _time(function: Callable[[], object], iterations: int) -> list[float]:
    samples = []
    for _ in range(iterations):
        start = time.perf_counter()
        function()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def measure(sql: str, catalog: Catalog, rounds: int, per_round: int) -> dict[str, dict]:
    def bare() -> object:
        return sqlglot.parse_one(sql, read="spark").sql(dialect="spark")

    def rewritten() -> object:
        return rewrite(sql, catalog, functions=FUNCTIONS).sql

    output = rewrite(sql, catalog, functions=FUNCTIONS).sql

    def bare_output() -> object:
        return sqlglot.parse_one(output, read="spark").sql(dialect="spark")

    for function in (bare, rewritten, bare_output):
        _time(function, 50)  # warm-up
    bare_samples: list[float] = []
    rewrite_samples: list[float] = []
    output_samples: list[float] = []
    gc.disable()
    try:
        for _ in range(rounds):
            bare_samples += _time(bare, per_round)
            rewrite_samples += _time(rewritten, per_round)
            output_samples += _time(bare_output, per_round)
            gc.collect()
    finally:
        gc.enable()
    return {
        "bare": summarize(bare_samples),
        "rewrite": summarize(rewrite_samples),
        # What the rewrite must at least cost: its output is longer than its input (each table
        # becomes a subquery with the validity predicate), and it generates that text.
        "bare_of_output": summarize(output_samples),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run")
    arguments = parser.parse_args()
    rounds, per_round = (5, 100) if arguments.quick else (20, 250)
    catalog = _catalog()
    results: dict[str, dict] = {}
    rows = []
    for name, sql in (("simple", SIMPLE), ("tpch_like_60_lines", TPCH_LIKE)):
        figures = measure(sql, catalog, rounds, per_round)
        bare, rewritten = figures["bare"], figures["rewrite"]
        ratio = rewritten["p50"] / bare["p50"]
        figures["ratio_p50"] = ratio
        figures["lines"] = len(sql.strip().splitlines())
        results[name] = figures
        figures["ratio_p50_to_bare_of_output"] = rewritten["p50"] / figures["bare_of_output"]["p50"]
        rows.append(
            (
                name,
                f"{bare['p50']:.3f}",
                f"{bare['p99']:.3f}",
                f"{rewritten['p50']:.3f}",
                f"{rewritten['p99']:.3f}",
                f"{ratio:.2f}x",
                f"{figures['bare_of_output']['p50']:.3f}",
                f"{figures['ratio_p50_to_bare_of_output']:.2f}x",
            )
        )
    results["targets"] = {
        "ratio_p50_max": 1.5,
        "simple_rewrite_p50_ms_max": 0.5,
        "met": all(results[n]["ratio_p50"] <= 1.5 for n in ("simple", "tpch_like_60_lines"))
        and results["simple"]["rewrite"]["p50"] <= 0.5,
    }
    print_table(
        "SQL rewrite (ms): parse + rewrite + generate vs bare sqlglot parse + generate",
        (
            "query",
            "bare p50",
            "bare p99",
            "rewrite p50",
            "rewrite p99",
            "ratio p50",
            "bare of the output p50",
            "ratio to it",
        ),
        rows,
    )
    path = write_results("rewrite", {"quick": arguments.quick, **results})
    print(f"targets met: {results['targets']['met']}  -> {path}")


if __name__ == "__main__":
    main()
