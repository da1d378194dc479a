"""Replace each scanned registered table with a derived table over its visible segments."""

from __future__ import annotations

from sqlglot import exp

from horizon_broker.broker.sql.derived import append_scan_sql, visible_scan_sql
from horizon_broker.broker.sql.errors import NoLowWatermark
from horizon_broker.broker.sql.state import ReferenceKind, state_of


def substitute_tables(tree: exp.Expr) -> exp.Expr:
    """Turn every scan reference into ``(SELECT cols, validFrom, validUntil FROM <source view>
    WHERE <visible at S>) AS <alias or table name>`` (append-only tables: no predicate, user
    columns only; a table with settled segments: the union of its two views, see
    :func:`horizon_broker.broker.sql.derived.visible_scan_sql`).

    The filter sits inside the derived table, so it belongs to that scan alone: an outer join
    keeps its meaning, and nothing the user writes around the reference can remove it. The Table
    node is edited in place, which keeps its alias (with column list), sample, pivots and nested
    joins where they were.

    >>> import sqlglot
    >>> from horizon_broker.watermark.catalog import ColumnSpec
    >>> from horizon_broker.broker.sql.catalog import Catalog, CatalogTable
    >>> from horizon_broker.broker.sql.passes.resolve_references import resolve_references
    >>> from horizon_broker.broker.sql.passes.choose_snapshot import choose_snapshot
    >>> t = CatalogTable("t", (ColumnSpec("k", "int"),), ("k",), True, 10, 0, "__horizon_t_g1")
    >>> tree = sqlglot.parse_one("SELECT k FROM t", read="spark")
    >>> substitute_tables(choose_snapshot(resolve_references(tree, Catalog([t])))).sql("spark")
    'SELECT k FROM (SELECT k, validFrom, validUntil FROM __horizon_t_g1 WHERE validFrom <= 10 AND (validUntil IS NULL OR validUntil > 10)) AS t'

    A table whose settled segments (no validFrom above 8) have a view of their own reads them
    without the validFrom test at snapshots from 8 on, and with it below 8:

    >>> from dataclasses import replace
    >>> s = replace(t, source_view="__horizon_t_g1_t8", settled_view="__horizon_t_g1_t8_s",
    ...             settled_through=8)
    >>> tree = sqlglot.parse_one("SELECT k FROM t", read="spark")
    >>> substitute_tables(choose_snapshot(resolve_references(tree, Catalog([s])))).sql("spark")
    'SELECT k FROM (SELECT k, validFrom, validUntil FROM __horizon_t_g1_t8_s WHERE (validUntil IS NULL OR validUntil > 10) UNION ALL SELECT k, validFrom, validUntil FROM __horizon_t_g1_t8 WHERE validFrom <= 10 AND (validUntil IS NULL OR validUntil > 10)) AS t'
    >>> tree = sqlglot.parse_one("SELECT k FROM t VERSION AS OF 7", read="spark")
    >>> sql = substitute_tables(choose_snapshot(resolve_references(tree, Catalog([s])))).sql()
    >>> sql.count("validFrom <= 7 AND (validUntil IS NULL OR validUntil > 7)")
    2

    Files of open versions of settled segments are read without any test from 8 on, and files
    of closed versions (none valid after 9) not at all from 9 on:

    >>> o = replace(t, source_view="", open_view="__horizon_t_g1_t8_o",
    ...             closed_view="__horizon_t_g1_t8_c", settled_through=8, closed_through=9)
    >>> tree = sqlglot.parse_one("SELECT k FROM t", read="spark")
    >>> substitute_tables(choose_snapshot(resolve_references(tree, Catalog([o])))).sql("spark")
    'SELECT k FROM (SELECT k, validFrom, validUntil FROM __horizon_t_g1_t8_o) AS t'
    """
    state = state_of(tree)
    for reference in state.references:
        if reference.kind is not ReferenceKind.SCAN:
            continue
        node = reference.node
        table = reference.table
        if table.upsert:
            if state.snapshot is None:
                raise NoLowWatermark(f"no snapshot was chosen for table {table.name}")
            derived = visible_scan_sql(table, state.snapshot)
        else:
            derived = append_scan_sql(table)
        if not node.args.get("alias"):
            node.set("alias", exp.TableAlias(this=node.this))
        node.set("this", exp.Var(this=derived))
        node.set("db", None)
        node.set("catalog", None)
        node.set("version", None)
    return tree
