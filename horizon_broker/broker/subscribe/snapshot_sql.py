"""A subscription's query at one snapshot: its text with ``VERSION AS OF`` that snapshot. Pure.

Every read of a query shares one snapshot, so the clause goes on each reference to one of the
upsert tables the query reads (a name its own WITH defines is a CTE, not the table); a clause the
client wrote (the stream's start) is replaced.

>>> at_snapshot("SELECT * FROM t JOIN u USING (k)", {"t"}, 9)
'SELECT * FROM t VERSION AS OF 9 JOIN u USING (k)'
"""

from __future__ import annotations

from collections.abc import Collection

import sqlglot
from sqlglot import exp


def _cte_names(tree: exp.Expr) -> set[str]:
    return {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}


def at_snapshot(sql: str, tables: Collection[str], snapshot: int) -> str:
    """``sql`` reading ``tables`` (lowercase names) at ``snapshot``."""
    tree = sqlglot.parse_one(sql, read="spark")
    wanted = {t.lower() for t in tables} - _cte_names(tree)
    for table in tree.find_all(exp.Table):
        if table.name.lower() in wanted:
            version = exp.Version(
                this="VERSION", kind="AS OF", expression=exp.Literal.number(snapshot)
            )
            table.set("version", version)
    return tree.sql(dialect="spark")
