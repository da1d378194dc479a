"""The SQL the incremental strategies run, built from the subscription's own query. Pure.

Every text here is an ordinary query the engine runs (grants, budgets, admission): the table's
change feed is read through ``table_changes``, never from its files.

A key may change several times between two snapshots; its row at ``start`` is its first change
if that change ends a version (``delete`` / ``update_preimage``), and its row at ``end`` is its
last change if that change begins one (``insert`` / ``update_postimage``). At one commit instant
the ending version comes before the beginning one.
"""

from __future__ import annotations

import datetime
import decimal
import math
from collections.abc import Collection, Sequence
from typing import Any

import sqlglot
from sqlglot import exp

from .choose import Choice
from .snapshot_sql import at_snapshot

KEY_PREFIX = "_subscribe_k"
"""The change feed events' copies of the primary key's columns (``_subscribe_k0``, ...)."""
AT = "_subscribe_at"
ENDS = "_subscribe_ends"
PASSES = "_subscribe_passes"
SIDE = "_subscribe_side"
"""The column telling a changed key's row at the first snapshot (``before``) from the last."""
BEFORE, AFTER = "before", "after"
_IS_END = "_change_type IN ('delete', 'update_preimage')"


def _name(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect="spark")


def _feed(table: str, start: int, end: int) -> str:
    return f"table_changes({exp.Literal.string(table).sql(dialect='spark')}, {start}, {end})"


def feed_sql(choice: Choice, start: int, end: int) -> str:
    """The change feed of ``choice``'s table in ``(start, end]``, named as the query names the
    table."""
    return f"{_feed(choice.table, start, end)} AS {_name(choice.alias)}"


def images_sql(table: str, primary_key: Sequence[str], start: int, end: int) -> str:
    """Each key changed in ``(start, end]``: its row at ``start`` and its row at ``end`` (when
    it has one), the table's columns plus ``_change_type``."""
    keys = ", ".join(_name(k) for k in primary_key)
    ends_first = f"CASE WHEN {_IS_END} THEN 0 ELSE 1 END"
    ranked = (
        f"SELECT *, ROW_NUMBER() OVER (PARTITION BY {keys} ORDER BY _commit_timestamp, "
        f"{ends_first}) AS _subscribe_first, ROW_NUMBER() OVER (PARTITION BY {keys} ORDER BY "
        f"_commit_timestamp DESC, {ends_first} DESC) AS _subscribe_last "
        f"FROM {_feed(table, start, end)} AS _subscribe_feed"
    )
    return (
        f"SELECT * FROM ({ranked}) AS _subscribe_ranked WHERE (_subscribe_first = 1 AND "
        f"{_IS_END}) OR (_subscribe_last = 1 AND NOT {_IS_END})"
    )


def _parse(sql: str) -> exp.Select:
    tree = sqlglot.parse_one(sql, read="spark")
    assert isinstance(tree, exp.Select), "the chooser let only a SELECT through"
    return tree


def _reference(tree: exp.Expr) -> exp.Table:
    return next(iter(tree.find_all(exp.Table)))


def feed_images_sql(sql: str, choice: Choice, start: int, end: int) -> str:
    """The query's projection and filter over the rows of each key that changed in
    ``(start, end]``, at ``start`` (:data:`SIDE` ``before``) and at ``end`` (``after``): the
    changed keys' part of both answers."""
    tree = _parse(sql)
    images = sqlglot.parse_one(
        images_sql(choice.table, choice.primary_key, start, end), read="spark"
    )
    _reference(tree).replace(
        exp.Subquery(this=images, alias=exp.TableAlias(this=exp.to_identifier(choice.alias)))
    )
    side = sqlglot.parse_one(
        f"CASE WHEN {_name(choice.alias)}.{_IS_END} THEN '{BEFORE}' ELSE '{AFTER}' END AS {SIDE}",
        read="spark",
    )
    tree.set("expressions", [side, *tree.expressions])
    tree.set("order", None)
    return tree.sql(dialect="spark")


def _output(projection: exp.Expr) -> str | None:
    """The column name Spark gives ``projection`` when sqlglot can say it (aliased, a column)."""
    if isinstance(projection, exp.Alias):
        return projection.alias
    if isinstance(projection, exp.Column) and not isinstance(projection.this, exp.Star):
        return projection.name
    return None


def feed_events_sql(sql: str, choice: Choice, start: int, end: int) -> str | None:
    """Every change of the query's table in ``(start, end]``, one row each: the query's columns
    (computed only where its filter holds, NULL elsewhere, so nothing the filter guards is
    evaluated), the primary key (:data:`KEY_PREFIX`), the commit instant (:data:`AT`), whether
    the change ends a version (:data:`ENDS`) and whether the filter holds (:data:`PASSES`).

    The changed keys' rows at ``start`` and ``end`` are picked from these in Arrow
    (:func:`.change_feed.pick_images`), so Spark runs the feed alone, without a second shuffle
    by key. None when a column's name is not one sqlglot can tell (a star, an unnamed
    expression under a filter): :func:`feed_images_sql` then."""
    tree = _parse(sql)
    where = tree.args.get("where")
    condition = where.this.sql(dialect="spark") if where is not None else None
    alias = _name(choice.alias)
    columns = []
    for projection in tree.expressions:
        if projection.find(exp.Star) is not None:
            return None
        if condition is None:
            columns.append(projection.sql(dialect="spark"))
            continue
        output = _output(projection)
        if output is None:
            return None
        value = projection.unalias().sql(dialect="spark")
        columns.append(f"CASE WHEN {condition} THEN {value} END AS {_name(output)}")
    columns += [f"{alias}.{_name(k)} AS {KEY_PREFIX}{n}" for n, k in enumerate(choice.primary_key)]
    columns += [
        f"{alias}._commit_timestamp AS {AT}",
        f"{alias}.{_IS_END} AS {ENDS}",
        f"COALESCE({condition or 'TRUE'}, FALSE) AS {PASSES}",
    ]
    return f"SELECT {', '.join(columns)} FROM {feed_sql(choice, start, end)}"


def touched_groups_sql(sql: str, choice: Choice, start: int, end: int) -> str:
    """The groups (one column each, in :attr:`Choice.groups` order) that a change in
    ``(start, end]`` passing the query's filter left or entered: the only ones that can differ."""
    tree = _parse(sql)
    columns = ", ".join(
        f"{group.expression} AS _subscribe_g{number}" for number, group in enumerate(choice.groups)
    )
    where = tree.args.get("where")
    condition = f" WHERE {where.this.sql(dialect='spark')}" if where is not None else ""
    return f"SELECT DISTINCT {columns} FROM {feed_sql(choice, start, end)}{condition}"


def sql_literal(value: Any) -> exp.Expr | None:
    """``value`` (as Arrow gives a cell) as an exact Spark literal; None when there is no safe
    one (timestamps, NaN, binary): the caller re-runs the whole query instead."""
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int):
        return exp.Literal.number(str(value))
    if isinstance(value, str):
        return exp.Literal.string(value)
    if isinstance(value, float):
        return exp.cast(exp.Literal.string(repr(value)), "DOUBLE") if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        return exp.Literal.number(format(value, "f")) if value.is_finite() else None
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return exp.cast(exp.Literal.string(value.isoformat()), "DATE")
    return None


def _balanced(nodes: list[exp.Expr], join: Any) -> exp.Expr:
    """``nodes`` joined by AND/OR as a balanced tree (the engine caps expression depth)."""
    if len(nodes) == 1:
        return nodes[0]
    middle = len(nodes) // 2
    return exp.paren(join(_balanced(nodes[:middle], join), _balanced(nodes[middle:], join)))


def groups_at_sql(
    sql: str, tables: Collection[str], snapshot: int, choice: Choice, values: Sequence[tuple]
) -> str | None:
    """The query at ``snapshot`` for the groups ``values`` only (None: a value has no exact
    literal)."""
    tree = _parse(at_snapshot(sql, tables, snapshot))
    alternatives = []
    for row in values:
        terms: list[exp.Expr] = []
        for group, value in zip(choice.groups, row, strict=True):
            literal = sql_literal(value)
            if literal is None:
                return None
            expression = sqlglot.parse_one(group.expression, read="spark")
            terms.append(exp.NullSafeEQ(this=expression, expression=literal))
        alternatives.append(_balanced(terms, exp.and_))
    tree = tree.where(_balanced(alternatives, exp.or_))
    return tree.sql(dialect="spark")
