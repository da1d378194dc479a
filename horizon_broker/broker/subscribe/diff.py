"""The exact delta between two answers of one query: change rows by key, or a multiset diff.

Pure. A delta is the ``after`` answer's columns plus :data:`CHANGE_COLUMN`, whose values are
Delta's change-data-feed kinds in Flink's words: ``insert``, ``delete``, ``update_before`` and
``update_after`` (a key's old row, then its new one, next to each other). Applying a delta to
the ``before`` answer (:func:`apply_delta`) gives the ``after`` answer, as a multiset of rows.

With ``key`` (columns whose values are unique in both answers) a changed row is an update of its
key; without one (or when the key is not unique in either answer) the whole row is the key and a
row present ``n`` more times is ``n`` inserts (fewer: deletes). A row that is the same in both
answers is no change, whatever file it came from: compaction changes files, not rows, so it
gives an empty delta.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .keyed_arrow import is_unique, keyed_changes, usable_key, without_keys

CHANGE_COLUMN = "_change_type"
INSERT = "insert"
DELETE = "delete"
UPDATE_BEFORE = "update_before"
UPDATE_AFTER = "update_after"
CHANGE_KINDS = (INSERT, DELETE, UPDATE_BEFORE, UPDATE_AFTER)

Row = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Delta:
    """Change rows (``rows``: the answer's columns plus :data:`CHANGE_COLUMN`) and the key they
    were matched by (empty: the whole row, a multiset diff)."""

    rows: pa.Table
    key: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return self.rows.num_rows == 0


def frozen(value: Any) -> Any:
    """A hashable stand-in for a cell (lists and maps, as pyarrow gives them, become tuples)."""
    if isinstance(value, list):
        return tuple(frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, frozen(v)) for k, v in value.items()))
    return value


def _rows(table: pa.Table) -> list[Row]:
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return [tuple(frozen(v) for v in row) for row in zip(*columns, strict=True)]


def _order(row: Row) -> str:
    """A total, deterministic order over rows of mixed and missing values."""
    return repr(row)


def unique_key(table: pa.Table, key: Sequence[str]) -> bool:
    """Whether ``key``'s columns are all in ``table`` and unique in it."""
    if not key or not set(key) <= set(table.column_names):
        return False
    keys = _rows(table.select(list(key)))
    return len(set(keys)) == len(keys)


def _keyed_changes(before: list[Row], after: list[Row], at: list[int]) -> list[tuple[str, Row]]:
    old = {tuple(row[i] for i in at): row for row in before}
    new = {tuple(row[i] for i in at): row for row in after}
    changes: list[tuple[str, Row]] = []
    for key in sorted(old.keys() | new.keys(), key=_order):
        was, now = old.get(key), new.get(key)
        if was == now:
            continue
        if now is None:
            changes.append((DELETE, was))  # type: ignore[arg-type]
        elif was is None:
            changes.append((INSERT, now))
        else:
            changes += [(UPDATE_BEFORE, was), (UPDATE_AFTER, now)]
    return changes


def _multiset_changes(before: list[Row], after: list[Row]) -> list[tuple[str, Row]]:
    counts = Counter(after)
    counts.subtract(Counter(before))
    changes: list[tuple[str, Row]] = []
    for row in sorted(counts, key=_order):
        surplus = counts[row]
        kind = INSERT if surplus > 0 else DELETE
        changes += [(kind, row)] * abs(surplus)
    return changes


def delta_schema(schema: pa.Schema) -> pa.Schema:
    """An answer's schema with the change column first."""
    return pa.schema([pa.field(CHANGE_COLUMN, pa.string(), nullable=False), *schema])


def _table(schema: pa.Schema, changes: list[tuple[str, Row]], source: dict[Row, dict]) -> pa.Table:
    records = [{CHANGE_COLUMN: kind, **source[row]} for kind, row in changes]
    return pa.Table.from_pylist(records, schema=delta_schema(schema))


def _originals(*tables: pa.Table) -> dict[Row, dict]:
    """Each frozen row's original cells (pyarrow wants lists and maps back, not tuples)."""
    found: dict[Row, dict] = {}
    for table in tables:
        for frozen_row, record in zip(_rows(table), table.to_pylist(), strict=True):
            found.setdefault(frozen_row, record)
    return found


def diff(before: pa.Table, after: pa.Table, key: Sequence[str] = ()) -> Delta:
    """The change rows that turn ``before`` into ``after`` (same columns), by ``key`` when it is
    unique in both, else as a multiset of whole rows. A plain key is matched by Arrow
    (:mod:`.keyed_arrow`), anything else by :func:`diff_rows`."""
    before = before.select(after.column_names).cast(after.schema)
    if usable_key((before, after), key) and is_unique(before, key) and is_unique(after, key):
        kinds = (INSERT, DELETE, UPDATE_BEFORE, UPDATE_AFTER)
        rows = keyed_changes(before, after, key, kinds, CHANGE_COLUMN)
        if rows is not None:  # Arrow compared every column
            return Delta(rows.cast(delta_schema(after.schema)), tuple(key))
    return diff_rows(before, after, key)


def diff_rows(before: pa.Table, after: pa.Table, key: Sequence[str] = ()) -> Delta:
    """:func:`diff` by comparing Python rows: any column type, a key with nulls, no key."""
    before = before.select(after.column_names).cast(after.schema)
    old, new = _rows(before), _rows(after)
    by_key = tuple(key) if unique_key(before, key) and unique_key(after, key) else ()
    if by_key:
        at = [after.column_names.index(name) for name in by_key]
        changes = _keyed_changes(old, new, at)
    else:
        changes = _multiset_changes(old, new)
    return Delta(_table(after.schema, changes, _originals(before, after)), by_key)


def _without(rows: list[Row], removed: Iterable[Row], at: list[int] | None) -> list[Row]:
    if at is not None:
        gone = {tuple(row[i] for i in at) for row in removed}
        return [row for row in rows if tuple(row[i] for i in at) not in gone]
    left = Counter(removed)
    kept = []
    for row in rows:
        if left[row] > 0:
            left[row] -= 1
        else:
            kept.append(row)
    return kept


def apply_delta(result: pa.Table, delta: pa.Table, key: Sequence[str] = ()) -> pa.Table:
    """``result`` with ``delta``'s change rows applied (by ``key``, or one copy of each whole
    row): what a subscriber does with each message."""
    changes = delta.drop_columns([CHANGE_COLUMN]).cast(result.schema)
    if usable_key((result, changes), key):
        kind = delta.column(CHANGE_COLUMN)
        gone = pc.is_in(kind, pa.array([DELETE, UPDATE_BEFORE]))
        kept = without_keys(result, changes.filter(gone), key)
        if kept is not None:  # matched by Arrow
            return pa.concat_tables([kept, changes.filter(pc.invert(gone))])
    return apply_rows(result, delta, key)


def apply_rows(result: pa.Table, delta: pa.Table, key: Sequence[str] = ()) -> pa.Table:
    """:func:`apply_delta` with Python rows: any column type, a key with nulls, no key."""
    changes = delta.drop_columns([CHANGE_COLUMN]).cast(result.schema)
    kinds = delta.column(CHANGE_COLUMN).to_pylist()
    rows = _rows(changes)
    removed = [r for r, k in zip(rows, kinds, strict=True) if k in (DELETE, UPDATE_BEFORE)]
    added = [r for r, k in zip(rows, kinds, strict=True) if k in (INSERT, UPDATE_AFTER)]
    at = [result.column_names.index(name) for name in key] if key else None
    kept = _without(_rows(result), removed, at)
    source = _originals(result, changes)
    return pa.Table.from_pylist([source[row] for row in kept + added], schema=result.schema)
