"""What the executor needs to know about a query's shape: is it a key lookup, is it ordered.

A key lookup fetches a few rows of one table by its primary key. It reads one row group of one file (segments are sorted, so Parquet min/max statistics prune
the rest), so it is dominated by Spark's fixed per-query costs. The largest of these is compiling
a whole-stage code class: the key literal is inlined into the generated Java, so every new key
compiles a new class. Lookups therefore run on a session with whole-stage code generation off,
while scans and aggregates keep it (there it pays for itself many times over).

The plainest lookups over local files do not reach Spark's executors at all: see
:mod:`broker.key_lookup` and :mod:`broker.direct_read`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sqlglot
from sqlglot import exp

MAX_IN_LIST = 1_000
"""More keys than this in one ``IN`` list is a scan, not a lookup."""

_NOT_A_LOOKUP = (exp.AggFunc, exp.Window, exp.Join, exp.Group, exp.Having, exp.Union, exp.Lateral)


def is_key_lookup(sql: str, primary_keys: Mapping[str, Sequence[str]]) -> bool:
    """True when ``sql`` selects from one table with every primary-key column fixed to literals.

    ``primary_keys`` maps lower-case table names to their key columns. Joins, aggregates,
    windows, set operations and subqueries make a query not a lookup.
    """
    try:
        tree = sqlglot.parse_one(sql, dialect="spark")
    except sqlglot.errors.SqlglotError:
        return False
    if not isinstance(tree, exp.Select) or tree.args.get("distinct"):
        return False
    if any(True for _ in tree.find_all(*_NOT_A_LOOKUP)):
        return False
    if sum(1 for _ in tree.find_all(exp.Select)) != 1:
        return False
    source = tree.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table):
        return False
    key = [column.lower() for column in primary_keys.get(source.this.name.lower(), ())]
    where = tree.args.get("where")
    if not key or where is None:
        return False
    return set(key) <= _fixed_columns(where.this)


def _fixed_columns(condition: exp.Expression) -> set[str]:
    """Columns a conjunction pins to literal values (``c = 1``, ``1 = c``, ``c IN (1, 2)``)."""
    fixed: set[str] = set()
    for part in condition.flatten() if isinstance(condition, exp.And) else (condition,):
        part = part.unnest()
        if isinstance(part, exp.EQ):
            left, right = part.left.unnest(), part.right.unnest()
            if isinstance(right, exp.Column) and _is_literal(left):
                left, right = right, left
            if isinstance(left, exp.Column) and _is_literal(right):
                fixed.add(left.name.lower())
        elif isinstance(part, exp.In) and isinstance(part.this, exp.Column):
            values = part.expressions
            if values and len(values) <= MAX_IN_LIST and all(_is_literal(v) for v in values):
                fixed.add(part.this.name.lower())
    return fixed


def _is_literal(node: exp.Expression) -> bool:
    node = node.unnest()
    if isinstance(node, exp.Neg):
        node = node.this
    return isinstance(node, exp.Literal)


def is_ordered(sql: str) -> bool:
    """True when the result's row order may be part of the answer (any ORDER BY: Spark keeps a
    sorted subquery's order through a projection, and clients rely on it).

    Unparseable SQL counts as ordered: holding batches back is always correct.
    """
    try:
        tree = sqlglot.parse_one(sql, dialect="spark")
    except sqlglot.errors.SqlglotError:
        return True
    return tree.find(exp.Order) is not None
