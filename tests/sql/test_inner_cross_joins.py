"""A comma join reaches Spark as the inner join plain Spark makes of it (its runtime filters and
partition pruning apply to inner joins only)."""

from __future__ import annotations

from horizon_broker.broker.sql import Catalog, FunctionPolicy
from horizon_broker.broker.sql.rewrite import rewrite


def test_a_comma_join_of_upsert_tables_is_rewritten_as_an_inner_join(
    catalog: Catalog, functions: FunctionPolicy
) -> None:
    sql = "SELECT o.id FROM orders o, customers c WHERE o.customer_id = c.id"
    rewritten = rewrite(sql, catalog, functions=functions).sql
    assert " INNER JOIN (" in rewritten and "CROSS JOIN" not in rewritten


def test_a_lateral_subquery_after_a_comma_stays_a_cross_join(
    catalog: Catalog, functions: FunctionPolicy
) -> None:
    sql = "SELECT o.id, x.n FROM orders o, LATERAL (SELECT o.id + 1 AS n) x"
    assert "CROSS JOIN LATERAL" in rewrite(sql, catalog, functions=functions).sql
