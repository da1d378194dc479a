"""Write a comma join as the inner join Spark makes of it, not the cross join sqlglot reads.

sqlglot reads ``FROM a, b`` as ``a CROSS JOIN b``; Spark plans the first as an ``Inner`` join
and the second as a ``Cross`` one. Both give the same rows, but Spark keeps the ``Cross`` type
after the WHERE clause's equalities become the join's keys, and its runtime filters and dynamic
partition pruning apply to ``Inner`` (and semi, right outer) joins only: a comma-joined report
would lose them on Horizon's views that it has on plain tables. A cross join with no condition
is an inner join with none, so every such join is written ``INNER JOIN``.
"""

from __future__ import annotations

from sqlglot import exp


def inner_cross_joins(tree: exp.Expr) -> exp.Expr:
    """Turn every condition-less cross join of a table or a plain subquery into an inner join.

    A lateral join (``LATERAL (...)``, a generator or table function that may read the tables
    before it) is left as it is: its correlation is the comma's, not a join's.

    >>> import sqlglot
    >>> inner_cross_joins(sqlglot.parse_one(
    ...     "SELECT * FROM a, b, (SELECT 1 AS y) s WHERE a.x = b.x", read="spark")).sql("spark")
    'SELECT * FROM a INNER JOIN b INNER JOIN (SELECT 1 AS y) AS s WHERE a.x = b.x'
    >>> inner_cross_joins(sqlglot.parse_one(
    ...     "SELECT * FROM a, LATERAL (SELECT a.x) s", read="spark")).sql("spark")
    'SELECT * FROM a CROSS JOIN LATERAL (SELECT a.x) AS s'
    """
    for join in tree.find_all(exp.Join):
        if _is_plain_cross_join(join):
            join.set("kind", "INNER")
    return tree


def _is_plain_cross_join(join: exp.Join) -> bool:
    if (join.args.get("kind") or "").upper() != "CROSS":
        return False
    if join.args.get("side") or join.args.get("method"):
        return False
    if join.args.get("on") is not None or join.args.get("using"):
        return False
    joined = join.this
    if isinstance(joined, exp.Table):
        return isinstance(joined.this, exp.Identifier)  # a table or view, not a function
    return isinstance(joined, exp.Subquery) and not isinstance(joined.this, exp.Lateral)
