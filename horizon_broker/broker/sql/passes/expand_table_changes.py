"""Replace each ``table_changes('t', from, to)`` with the change feed of ``t`` in ``(from, to]``."""

from __future__ import annotations

from sqlglot import exp

from horizon_broker.broker.sql.constants import integer_literal, timestamp_literal
from horizon_broker.broker.sql.derived import change_feed_sql
from horizon_broker.broker.sql.errors import InvalidChangeWindow, NoLowWatermark, SnapshotOutOfRange
from horizon_broker.broker.sql.state import Reference, ReferenceKind, state_of
from horizon_broker.broker.sql.timestamps import timestamp_to_hlc


def _bound(argument: exp.Expr, which: str) -> int:
    """An integer HLC, or a timestamp string meaning the last HLC of its millisecond."""
    value = integer_literal(argument)
    if value is not None:
        if value < 0:
            raise InvalidChangeWindow(f"table_changes: {which} bound {value} is negative")
        return value
    text = timestamp_literal(argument)
    if text is not None:
        return timestamp_to_hlc(text)
    raise InvalidChangeWindow(
        f"table_changes: the {which} bound must be an integer HLC or a timestamp string, "
        f"got {argument.sql(dialect='spark')}"
    )


def change_window(reference: Reference) -> tuple[int, int]:
    """The checked ``(from, to]`` window of one ``table_changes`` call."""
    table = reference.table
    arguments = reference.node.this.expressions
    start = _bound(arguments[1], "from")
    if len(arguments) > 2:
        end = _bound(arguments[2], "to")
    elif table.lwm is None:
        raise NoLowWatermark(
            f"table_changes: table {table.name} has no low-watermark yet, so the window has no end"
        )
    else:
        end = table.lwm
    if start > end:
        raise InvalidChangeWindow(f"table_changes: from ({start}) is after to ({end})")
    if table.lwm is None:
        raise NoLowWatermark(f"table_changes: table {table.name} has no low-watermark yet")
    if end > table.lwm:
        raise SnapshotOutOfRange(
            f"table_changes: to = {end} is in the future: above the low-watermark {table.lwm} "
            f"of table {table.name}"
        )
    if start < table.retention_horizon:
        raise SnapshotOutOfRange(
            f"table_changes: from = {start} is below the retention horizon "
            f"{table.retention_horizon} of table {table.name}: that history has been collected"
        )
    return start, end


def expand_table_changes(tree: exp.Expr) -> exp.Expr:
    """Substitute every ``table_changes`` call in FROM with its change-feed derived table.

    >>> import sqlglot
    >>> from horizon_broker.watermark.catalog import ColumnSpec
    >>> from horizon_broker.broker.sql.catalog import Catalog, CatalogTable
    >>> from horizon_broker.broker.sql.passes.resolve_references import resolve_references
    >>> t = CatalogTable("t", (ColumnSpec("k", "int"),), ("k",), True, 10, 0, "__horizon_t_g1")
    >>> tree = sqlglot.parse_one("SELECT * FROM table_changes('t', 1, 5) AS c", read="spark")
    >>> expand_table_changes(resolve_references(tree, Catalog([t]))).sql("spark")[:40]
    'SELECT * FROM (SELECT k, CASE WHEN __hor'

    A table with settled segments in a view of their own is read from the union of both views
    (the feed needs every version):

    >>> from dataclasses import replace
    >>> s = replace(t, source_view="__horizon_t_g1_t8", settled_view="__horizon_t_g1_t8_s",
    ...             settled_through=8)
    >>> tree = sqlglot.parse_one("SELECT * FROM table_changes('t', 1, 5) AS c", read="spark")
    >>> sql = expand_table_changes(resolve_references(tree, Catalog([s]))).sql("spark")
    >>> "FROM (SELECT k, validFrom, validUntil FROM __horizon_t_g1_t8 UNION ALL SELECT k, validFrom, validUntil FROM __horizon_t_g1_t8_s) AS __horizon_v" in sql
    True
    """
    for reference in state_of(tree).references:
        if reference.kind is not ReferenceKind.CHANGES:
            continue
        start, end = change_window(reference)
        reference.change_window = (start, end)
        node = reference.node
        if not node.args.get("alias"):
            node.set("alias", exp.TableAlias(this=exp.to_identifier(reference.table.name)))
        node.set("this", exp.Var(this=change_feed_sql(reference.table, start, end)))
    return tree
