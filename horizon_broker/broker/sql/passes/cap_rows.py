"""Make the query itself return at most a given number of rows."""

from __future__ import annotations

from sqlglot import exp

from horizon_broker.broker.sql.constants import integer_value


def cap_rows(tree: exp.Expr, limit: int) -> exp.Expr:
    """Give the outermost query a ``LIMIT`` of at most ``limit`` rows (the smaller of its own
    and ``limit``), so Spark plans the row cap instead of the broker counting rows it already
    computed. The broker asks for one row more than its cap, to tell "exactly the cap" from "over".

    >>> import sqlglot
    >>> cap_rows(sqlglot.parse_one("SELECT k FROM t ORDER BY k", read="spark"), 11).sql("spark")
    'SELECT k FROM t ORDER BY k LIMIT 11'
    >>> cap_rows(sqlglot.parse_one("SELECT k FROM t LIMIT 5", read="spark"), 11).sql("spark")
    'SELECT k FROM t LIMIT 5'
    >>> cap_rows(sqlglot.parse_one("SELECT 1 UNION ALL SELECT 2", read="spark"), 3).sql("spark")
    'SELECT 1 UNION ALL SELECT 2 LIMIT 3'
    """
    if "limit" not in type(tree).arg_types:
        return exp.select("*").from_(exp.Subquery(this=tree, alias="__horizon_result")).limit(limit)
    current = tree.args.get("limit")
    if not isinstance(current, exp.Limit):
        tree.set("limit", exp.Limit(expression=exp.Literal.number(limit)))
        return tree
    value = integer_value(current.expression)
    if value is not None:
        current.set("expression", exp.Literal.number(min(value, limit)))
    else:
        current.set("expression", exp.Least(this=current.expression, expressions=[
            exp.Literal.number(limit)
        ]))  # fmt: skip
    return tree
