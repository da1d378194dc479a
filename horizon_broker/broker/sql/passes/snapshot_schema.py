"""Each reference to an altered table reads the schema version in effect at its snapshot.

A query at snapshot ``S`` sees the columns the table had at ``S`` (a scan: the query's snapshot;
``table_changes``: its window's end; an append-only table: the newest version), so an answer at
a snapshot never changes after a later ``horizon table alter``, and a column the query names that
did not exist at ``S`` (dropped before, or added after) is refused with an error naming the
column and the snapshot, instead of a late Spark error or a silent NULL. Values read under the
column's newest type: a widening is exact, so an old snapshot's values are unchanged.

Runs after :func:`~horizon_broker.broker.sql.passes.choose_snapshot.choose_snapshot` and before
the references are substituted (their derived tables select the version's columns).
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from horizon_broker.broker.sql.catalog import CatalogTable
from horizon_broker.broker.sql.errors import ColumnNotAtSnapshot
from horizon_broker.broker.sql.passes.expand_table_changes import change_window
from horizon_broker.broker.sql.state import Reference, ReferenceKind, RewriteState, state_of
from horizon_broker.watermark.catalog import ColumnSpec


def snapshot_schema(tree: exp.Expr) -> exp.Expr:
    """Give every reference to an altered table its snapshot's columns; refuse a query naming a
    column of that table that its snapshot does not have."""
    state = state_of(tree)
    missing: dict[str, tuple[Reference, int, CatalogTable]] = {}
    for reference in state.references:
        table = reference.table
        history = table.schema_history
        if history is None:
            continue
        at = _reference_snapshot(reference, state)
        version = history.current if at is None else history.at(at)
        storage = {column.name.lower(): column for column in history.storage_columns()}
        reference.table = replace(
            table,
            columns=tuple(
                ColumnSpec(c.name, storage[c.name.lower()].type) for c in version.columns
            ),
        )
        if at is None:
            continue
        present = {name.lower() for name in version.names}
        for name in storage:
            if name not in present:
                missing.setdefault(name, (reference, at, table))
    if missing:
        _refuse_named(tree, state, missing)
    return tree


def _reference_snapshot(reference: Reference, state: RewriteState) -> int | None:
    if reference.kind is ReferenceKind.CHANGES:
        return change_window(reference)[1]
    return state.snapshot if reference.table.upsert else None


def _refuse_named(
    tree: exp.Expr, state: RewriteState, missing: dict[str, tuple[Reference, int, CatalogTable]]
) -> None:
    """Refuse the first column reference that names a column missing at its table's snapshot.

    An unqualified name counts unless another table the query reads has that column at its
    snapshot or the query defines it (an alias, a CTE's column); a qualified one when the
    qualifier is the reference's alias or table name.
    """
    elsewhere = {column.name.lower() for ref in state.references for column in ref.table.columns}
    defined = {alias.alias.lower() for alias in tree.find_all(exp.Alias) if alias.alias}
    defined |= {
        column.name.lower() for alias in tree.find_all(exp.TableAlias) for column in alias.columns
    }
    for column in tree.find_all(exp.Column):
        name = column.name.lower()
        found = missing.get(name)
        if found is None:
            continue
        reference, at, table = found
        qualifier = column.table.lower()
        names = {reference.node.alias_or_name.lower(), table.name.lower()}
        if qualifier and qualifier not in names:
            continue
        if not qualifier and (name in elsewhere or name in defined):
            continue
        history = table.schema_history
        assert history is not None  # only altered tables have missing columns
        raise ColumnNotAtSnapshot(
            f"column {column.name!r} is not in table {table.name}'s schema at snapshot {at}: "
            f"{history.when(column.name, at)} (columns at {at}: "
            f"{', '.join(history.at(at).names)})"
        )
