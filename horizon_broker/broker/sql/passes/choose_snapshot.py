"""Pick the query's one snapshot and check it against every scanned table's bounds."""

from __future__ import annotations

from sqlglot import exp

from horizon_broker.broker.sql.constants import integer_literal, timestamp_literal
from horizon_broker.broker.sql.errors import InvalidSnapshot, NoLowWatermark, SnapshotOutOfRange
from horizon_broker.broker.sql.state import Reference, ReferenceKind, state_of
from horizon_broker.broker.sql.timestamps import timestamp_to_hlc

DEFAULT_SOURCE = "default: min LWM"


def explicit_snapshot(reference: Reference, version: exp.Version) -> tuple[int, str]:
    """The HLC a ``VERSION AS OF`` / ``TIMESTAMP AS OF`` clause names, and the clause's kind."""
    kind = version.name.upper()
    clause = version.sql(dialect="spark")
    if (version.text("kind") or "").upper() != "AS OF":
        raise InvalidSnapshot(
            f"{reference.written}: only AS OF snapshots are supported, got {clause}"
        )
    if not reference.table.upsert:
        raise InvalidSnapshot(
            f"{reference.written} {clause}: table {reference.table.name} is append-only and has "
            "no versions to travel to"
        )
    if kind == "VERSION":
        value = integer_literal(version.expression)
        if value is None or value < 0:
            raise InvalidSnapshot(
                f"{reference.written} {clause}: VERSION AS OF takes a non-negative integer HLC"
            )
        return value, "VERSION AS OF"
    if kind == "TIMESTAMP":
        text = timestamp_literal(version.expression)
        if text is None:
            raise InvalidSnapshot(
                f"{reference.written} {clause}: TIMESTAMP AS OF (and FOR SYSTEM_TIME AS OF) takes "
                "a timestamp string such as '2026-11-21T10:00:00Z'; use VERSION AS OF for an HLC"
            )
        return timestamp_to_hlc(text), "TIMESTAMP AS OF"
    raise InvalidSnapshot(f"{reference.written}: unsupported snapshot clause {clause}")


def check_bounds(snapshot: int, reference: Reference) -> None:
    """FAILED_PRECONDITION when ``snapshot`` is past the table's LWM or before its horizon."""
    table = reference.table
    if table.lwm is None:
        raise NoLowWatermark(
            f"table {table.name} has no low-watermark yet: no snapshot of it can be read"
        )
    if snapshot > table.lwm:
        raise SnapshotOutOfRange(
            f"snapshot {snapshot} is in the future: above the low-watermark {table.lwm} "
            f"of table {table.name}"
        )
    if snapshot < table.retention_horizon:
        raise SnapshotOutOfRange(
            f"snapshot {snapshot} is below the retention horizon {table.retention_horizon} "
            f"of table {table.name}: that history has been collected"
        )


def choose_snapshot(tree: exp.Expr) -> exp.Expr:
    """Set the state's snapshot: the explicit one (all explicit clauses must agree) or the lowest
    LWM of the upsert tables scanned, then check it against every scanned upsert table. Tables
    read only through ``table_changes`` and append-only tables do not take part.

    >>> import sqlglot
    >>> from horizon_broker.watermark.catalog import ColumnSpec
    >>> from horizon_broker.broker.sql.catalog import Catalog, CatalogTable
    >>> from horizon_broker.broker.sql.passes.resolve_references import resolve_references
    >>> t = CatalogTable("t", (ColumnSpec("k", "int"),), ("k",), True, 10, 0, "__horizon_t_g1")
    >>> tree = sqlglot.parse_one("SELECT * FROM t VERSION AS OF 7", read="spark")
    >>> state_of(choose_snapshot(resolve_references(tree, Catalog([t])))).snapshot
    7
    """
    state = state_of(tree)
    scans = [ref for ref in state.references if ref.kind is ReferenceKind.SCAN]
    chosen: tuple[int, str, Reference] | None = None
    for reference in scans:
        version = reference.node.args.get("version")
        if version is None:
            continue
        value, source = explicit_snapshot(reference, version)
        if chosen is not None and chosen[0] != value:
            raise InvalidSnapshot(
                "all references of one query read one snapshot: "
                f"{chosen[2].written} {chosen[2].node.args['version'].sql(dialect='spark')} "
                f"(= {chosen[0]}) differs from {reference.written} {version.sql(dialect='spark')} "
                f"(= {value})"
            )
        if chosen is None:
            chosen = (value, source, reference)
    upserts = [ref for ref in scans if ref.table.upsert]
    if not upserts:
        return tree
    if chosen is None:
        for reference in upserts:
            if reference.table.lwm is None:
                raise NoLowWatermark(
                    f"table {reference.table.name} has no low-watermark yet: "
                    "it cannot be queried until its servers report progress"
                )
        state.snapshot = min(ref.table.lwm for ref in upserts if ref.table.lwm is not None)
        state.snapshot_source = DEFAULT_SOURCE
    else:
        state.snapshot, state.snapshot_source = chosen[0], chosen[1]
    for reference in upserts:
        check_bounds(state.snapshot, reference)
    return tree
