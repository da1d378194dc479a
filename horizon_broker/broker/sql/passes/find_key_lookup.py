"""Recognise the plainest key lookup: ``SELECT cols FROM t [AS OF ..] WHERE k = v [AND ..]``.

The broker reads such a query straight from the segment files (:mod:`horizon_broker.broker.direct_lookup.direct_read`)
instead of running a Spark job. The shape accepted is deliberately narrow, so its meaning can be
reproduced exactly outside Spark: one table, a projection of plain columns (or ``*``), a
conjunction of ``column = literal`` and ``column IN (literals)`` that fixes every primary-key
column, and an optional ``LIMIT n``. Anything else (functions, casts, other operators, joins,
ORDER BY, hints, backslash escapes, qualified names that are not the table's) is not a direct
lookup and runs on Spark.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from sqlglot import exp

from horizon_broker.broker.sql.model import KeyLookup, Predicate, Value
from horizon_broker.broker.sql.passes.describe_shape import MAX_IN_LIST
from horizon_broker.broker.sql.state import ReferenceKind, state_of

_INTEGER = re.compile(r"^[0-9]+$")
_INT64 = (-(2**63), 2**63 - 1)
_SELECT_ARGS = frozenset({"expressions", "from_", "where", "limit"})
_TABLE_ARGS = frozenset({"this", "alias", "version"})


def find_key_lookup(tree: exp.Expr) -> exp.Expr:
    """Set the rewrite state's ``shape.key_lookup`` when ``tree`` is the plainest key lookup of
    its one table (before the reference is substituted; the text had no backslash).

    >>> import sqlglot
    >>> from horizon_broker.watermark.catalog import ColumnSpec
    >>> from horizon_broker.broker.sql.catalog import Catalog, CatalogTable
    >>> from horizon_broker.broker.sql.passes.resolve_references import resolve_references
    >>> t = CatalogTable("t", (ColumnSpec("k", "int"),), ("k",), True, 10, 0, "__horizon_t_g1")
    >>> tree = resolve_references(sqlglot.parse_one("SELECT k FROM t WHERE k = 3", read="spark"),
    ...                           Catalog([t]))
    >>> state_of(find_key_lookup(tree)).shape.key_lookup.predicates
    (Predicate(column='k', values=(3,)),)
    """
    state = state_of(tree)
    scans = [ref for ref in state.references if ref.kind is ReferenceKind.SCAN]
    if len(state.references) != 1 or len(scans) != 1 or state.raw_backslash:
        return tree
    table = scans[0].table
    lookup = key_lookup_of(tree, table.name, table.primary_key)
    if lookup is not None:
        state.shape = replace(state.shape, key_lookup=lookup)
    return tree


def key_lookup_of(tree: exp.Expr, table: str, primary_key: Sequence[str]) -> KeyLookup | None:
    """The lookup ``tree`` describes, or None when it is not a plain key lookup of ``table``."""
    if not primary_key:
        return None
    if not isinstance(tree, exp.Select) or not _only_args(tree, _SELECT_ARGS):
        return None
    source = tree.args.get("from_")
    if not isinstance(source, exp.From) or not isinstance(source.this, exp.Table):
        return None
    names = _table_names(source.this, table)
    if names is None:
        return None
    projection = _projection(tree.expressions, names)
    where = tree.args.get("where")
    predicates = _predicates(where.this, names) if where is not None else None
    limit = _limit(tree.args.get("limit"))
    if projection is False or predicates is None or limit is False:
        return None
    if not {column.lower() for column in primary_key} <= {p.column for p in predicates}:
        return None
    select = tuple(item.sql(dialect="spark") for item in tree.expressions)
    return KeyLookup(
        table=table, projection=projection, predicates=predicates, limit=limit, select=select
    )


def _only_args(node: exp.Expr, allowed: frozenset[str]) -> bool:
    return all(key in allowed for key, value in node.args.items() if value)


def _table_names(node: exp.Table, table: str) -> set[str] | None:
    """The names a column may be qualified with, or None when ``node`` is not plainly ``table``."""
    if not _only_args(node, _TABLE_ARGS) or node.name.lower() != table.lower():
        return None
    names = {table.lower()}
    alias = node.args.get("alias")
    if alias is not None:
        if not isinstance(alias, exp.TableAlias) or alias.args.get("columns"):
            return None
        names = {alias.name.lower()}  # Spark hides the table's own name behind an alias
    return names


def _column(node: exp.Expr, names: set[str]) -> str | None:
    if not isinstance(node, exp.Column) or not isinstance(node.this, exp.Identifier):
        return None
    if node.args.get("db") or node.args.get("catalog"):
        return None
    qualifier = node.args.get("table")
    if qualifier is not None and qualifier.name.lower() not in names:
        return None
    return node.name.lower()


def _projection(
    items: Sequence[exp.Expr], names: set[str]
) -> tuple[str, ...] | Literal[False] | None:
    """Source columns in order, None for a bare ``*``, False when not a plain projection."""
    if len(items) == 1 and isinstance(items[0], exp.Star) and not _only_args(items[0], frozenset()):
        return False
    if len(items) == 1 and isinstance(items[0], exp.Star):
        return None
    columns = []
    for item in items:
        if isinstance(item, exp.Alias):
            item = item.this
        column = _column(item, names)
        if column is None:
            return False
        columns.append(column)
    return tuple(columns)


def _predicates(condition: exp.Expr, names: set[str]) -> tuple[Predicate, ...] | None:
    parts = condition.flatten() if isinstance(condition, exp.And) else (condition,)
    predicates = []
    for part in parts:
        part = part.unnest()
        if isinstance(part, exp.EQ):
            left, right = part.left.unnest(), part.right.unnest()
            if not isinstance(left, exp.Column):
                left, right = right, left
            column, value = _column(left, names), _literal(right)
            if column is None or value is None:
                return None
            predicates.append(Predicate(column, (value,)))
        elif isinstance(part, exp.In) and _only_args(part, frozenset({"this", "expressions"})):
            column = _column(part.this, names)
            values = [_literal(v.unnest()) for v in part.expressions]
            if column is None or not values or len(values) > MAX_IN_LIST:
                return None
            if any(v is None for v in values):
                return None
            predicates.append(Predicate(column, tuple(dict.fromkeys(values))))  # type: ignore[arg-type]
        else:
            return None
    return tuple(predicates)


def _literal(node: exp.Expr) -> Value | None:
    """A string or a 64-bit integer literal (``-`` allowed); anything else is None."""
    negative = isinstance(node, exp.Neg)
    if negative:
        node = node.this
    if not isinstance(node, exp.Literal):
        return None
    if node.is_string:
        return None if negative else str(node.this)
    text = str(node.this)
    if not _INTEGER.match(text):
        return None
    value = -int(text) if negative else int(text)
    return value if _INT64[0] <= value <= _INT64[1] else None


def _limit(node: exp.Expr | None) -> int | bool | None:
    if node is None:
        return None
    if not isinstance(node, exp.Limit) or not _only_args(node, frozenset({"expression"})):
        return False
    value = node.expression
    if not isinstance(value, exp.Literal) or value.is_string or not _INTEGER.match(str(value.this)):
        return False
    return int(str(value.this))
