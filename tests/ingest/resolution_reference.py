"""A reference model of key resolution within one batch, to check every road against.

The rule, stated as simply as it can be: at a snapshot ``S`` a key shows the record that, among
the index's entry and the batch's records committed by ``S`` taken in commit order (timestamp,
then source order), was the last to compare ``>=`` everything before it (nulls lowest) — unless
that is a delete, or the index's entry (then no record of the batch shows). A transaction's
records share one timestamp, so at most one of them (its newest by comparison) ever shows, and a
change from outside it that commits later but compares below it never shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from horizon_broker.ingest.driver_rows.resolution import IndexEntry, order_key
from horizon_broker.ingest.table import TableDefinition

Identity = tuple[Any, Any]
"""A record's source place: ``(_sourceFile, _sourcePosition)`` (unique in the tests' batches)."""


def _cmp(row: Mapping[str, Any], table: TableDefinition) -> Any:
    names = table.comparison_columns
    if not names:
        return 0
    return row[names[0]] if len(names) == 1 else tuple(row[name] for name in names)


def _beats(value: Any, best: Any) -> bool:
    return best is None or (value is not None and order_key(value) >= order_key(best))


def visible_records(
    stamped: Iterable[Mapping[str, Any]],
    index: Mapping[tuple[Any, ...], IndexEntry],
    table: TableDefinition,
    snapshot: int,
) -> dict[tuple[Any, ...], Identity]:
    """Each key's batch record visible at ``snapshot`` by the rule above (keys showing none are
    left out)."""
    best = {key: entry.cmp for key, entry in index.items()}
    shown: dict[tuple[Any, ...], Identity | None] = {}
    committed = sorted(
        (row for row in stamped if row["_ts"] <= snapshot), key=lambda r: (r["_ts"], r["_ord"])
    )
    for row in committed:
        key = tuple(row[name] for name in table.primary_key)
        cmp = _cmp(row, table)
        if key in best and not _beats(cmp, best[key]):
            continue
        if cmp is not None or key not in best:
            best[key] = cmp
        gone = table.delete_column is not None and bool(row[table.delete_column])
        shown[key] = None if gone else (row["_sourceFile"], row["_sourcePosition"])
    return {key: place for key, place in shown.items() if place is not None}


def check_against_reference(
    stamped: list[Mapping[str, Any]],
    index: Mapping[tuple[Any, ...], IndexEntry],
    table: TableDefinition,
    stored: Iterable[Mapping[str, Any]],
) -> None:
    """The stored versions of a batch show, at every snapshot, what the rule shows; none has an
    inverted interval."""
    stored = list(stored)
    for row in stored:
        until = row["validUntil"]
        assert until is None or row["validFrom"] <= until, f"an inverted interval: {row}"
    for snapshot in sorted({row["_ts"] for row in stamped}):
        seen: dict[tuple[Any, ...], list[Identity]] = {}
        for row in stored:
            if row["validFrom"] <= snapshot and (
                row["validUntil"] is None or row["validUntil"] > snapshot
            ):
                key = tuple(row[name] for name in table.primary_key)
                seen.setdefault(key, []).append((row["_sourceFile"], row["_sourcePosition"]))
        expected = visible_records(stamped, index, table, snapshot)
        assert seen == {key: [place] for key, place in expected.items()}, f"at {snapshot}"
