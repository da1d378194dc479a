"""The row estimate of ``check_budget`` on TPC-H join conditions (pure). An equality that
every branch of an OR requires links its two tables as a top-level one does (TPC-H Q19 repeats
its join condition in each branch, and was refused as a cross product of lineitem and part from
scale factor 0.1 on); one that some branch lacks does not. An equality on a CTE's or derived
table's output column links it too (Q15 was refused so at scale factor 1)."""

from __future__ import annotations

import pytest

from horizon_broker.broker.sql import Catalog, CatalogTable, FunctionPolicy, WorkBudget, rewrite
from horizon_broker.broker.sql.errors import OverBudget
from horizon_broker.watermark.catalog import ColumnSpec


def _table(name: str, *columns: str) -> CatalogTable:
    return CatalogTable(
        name=name,
        columns=tuple(ColumnSpec(column, "bigint") for column in columns),
        primary_key=(columns[0],),
        upsert=True,
        lwm=1_000,
        retention_horizon=0,
        source_view=f"__horizon_{name}_g1",
        rows=1_000_000,
    )


CATALOG = Catalog(
    [_table("lineitem", "l_id", "l_partkey", "l_quantity"), _table("part", "p_partkey", "p_size")]
)
FUNCTIONS = FunctionPolicy.from_names(["sum"])
BUDGET = WorkBudget(max_estimated_rows=5_000_000)


@pytest.mark.parametrize(
    "where",
    [
        "(p_partkey = l_partkey AND p_size = 1) OR (p_partkey = l_partkey AND l_quantity > 3)",
        "(p_partkey = l_partkey AND p_size = 1) OR (l_partkey = p_partkey AND p_size = 2)"
        " OR (p_partkey = l_partkey AND (l_quantity > 3 OR p_size = 9))",
        "l_quantity > 1 AND ((part.p_partkey = lineitem.l_partkey AND p_size = 1)"
        " OR (lineitem.l_partkey = part.p_partkey AND p_size = 5))",
        "((p_partkey = l_partkey AND p_size = 1) OR (p_partkey = l_partkey AND p_size = 2))",
    ],
)
def test_an_equality_in_every_branch_of_an_or_links_the_join(where: str) -> None:
    sql = f"SELECT sum(l_quantity) FROM lineitem, part WHERE {where}"
    rewrite(sql, CATALOG, functions=FUNCTIONS, budget=BUDGET)


@pytest.mark.parametrize(
    "where",
    [
        "(p_partkey = l_partkey AND p_size = 1) OR (p_size = 2)",
        "(p_partkey = l_partkey AND p_size = 1) OR (p_partkey = p_size AND l_quantity = 2)",
        "p_partkey = l_partkey OR p_size = 3",
    ],
)
def test_an_equality_that_some_branch_lacks_is_still_a_cross_product(where: str) -> None:
    sql = f"SELECT sum(l_quantity) FROM lineitem, part WHERE {where}"
    with pytest.raises(OverBudget, match="max_estimated_rows"):
        rewrite(sql, CATALOG, functions=FUNCTIONS, budget=BUDGET)


@pytest.mark.parametrize(
    "sql",
    [
        "WITH revenue AS (SELECT l_partkey AS part_no, sum(l_quantity) AS total FROM lineitem"
        " GROUP BY l_partkey) SELECT p_size, total FROM part, revenue WHERE p_partkey = part_no",
        "SELECT p_size, total FROM part, (SELECT l_partkey AS part_no, sum(l_quantity) AS total"
        " FROM lineitem GROUP BY l_partkey) AS revenue WHERE part_no = p_partkey",
    ],
)
def test_an_equality_on_a_derived_tables_output_column_links_the_join(sql: str) -> None:
    """TPC-H Q15 joins supplier to its revenue CTE by the CTE's own column ``supplier_no``."""
    rewrite(sql, CATALOG, functions=FUNCTIONS, budget=BUDGET)
