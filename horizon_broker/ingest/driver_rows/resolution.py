"""Key resolution of a small batch as Python rows: :mod:`horizon_broker.ingest.resolve`'s rules, restated (pure).

Every function here mirrors a Spark one and must agree with it row for row (a property test runs
both on the same records): :func:`stamp_rows` is :func:`horizon_broker.ingest.commit_times.stamp`,
:func:`resolve_rows` is :func:`horizon_broker.ingest.resolve.resolve` with a left join (the batch's keys, and
the carried entries of :func:`carried_rows`), :func:`stored_rows` is
:func:`horizon_broker.ingest.resolve.stored_versions`, :func:`entries_of` is :func:`horizon_broker.ingest.resolve.index_entries`
and :func:`update_summary` is :func:`horizon_broker.ingest.resolve.resolution_summary`. Rows are dicts keyed by
column name, as a resolution file holds them.

Example::

    >>> from horizon_broker.ingest.table import TableDefinition
    >>> table = TableDefinition.from_dict({"name": "t", "columns": {"k": "string", "v": "int"},
    ...     "primary_key": ["k"], "comparison": ["v"]})
    >>> source = {"_kp": 0, "_chunk": 0, "_sourceFile": "f", "_sourcePosition": 0}
    >>> rows = [{"k": "a", "v": 2, "_ts": 10, "_ord": 10, **source},
    ...         {"k": "a", "v": 1, "_ts": 11, "_ord": 11, **source}]
    >>> [(row["v"], row["_acc"], row["_next"]) for row in resolve_rows(rows, {}, table, {})]
    [(2, True, None), (1, False, None)]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from horizon_broker._core.errors import Internal
from horizon_broker.ingest.commit_times import SourceSpan, span_bases
from horizon_broker.ingest.granularity import chunk_start_ms
from horizon_broker.ingest.resolve import SOURCE_FILE, SOURCE_POSITION, commit_order
from horizon_broker.ingest.table import OutOfOrder, TableDefinition
from horizon_broker.watermark.catalog import VALID_FROM, VALID_UNTIL

Key = tuple[Any, ...]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """A key's key index entry: its current version's comparison value, commit timestamp,
    whether it is a tombstone, and the time chunk and first-generation partition holding it."""

    cmp: Any
    valid_from: int
    deleted: bool
    chunk: int | None
    seg: int | None
    kp: int


def order_key(value: Any) -> Any:
    """A sort key under which Python orders values as Spark does: nulls lowest, a struct (a
    tuple) field by field."""
    if isinstance(value, tuple):
        return tuple(order_key(item) for item in value)
    return (0,) if value is None else (1, value)


def at_least(value: Any, other: Any) -> bool:
    """:func:`horizon_broker.ingest.resolve.at_least`: ``value >= other`` with nulls lowest, never null."""
    return other is None or (value is not None and order_key(value) >= order_key(other))


def comparison(row: Mapping[str, Any], table: TableDefinition) -> Any:
    """:func:`horizon_broker.ingest.resolve.comparison_struct` of a row (a tuple for several columns)."""
    names = table.comparison_columns
    if not names:
        return 0
    if len(names) == 1:
        return row[names[0]]
    return tuple(row[name] for name in names)


def deleted(row: Mapping[str, Any], table: TableDefinition) -> bool:
    """:func:`horizon_broker.ingest.resolve.delete_flag` of a row."""
    return table.delete_column is not None and bool(row[table.delete_column])


def key_of(row: Mapping[str, Any], table: TableDefinition) -> Key:
    return tuple(row[name] for name in table.primary_key)


def epoch_ms(value: Any) -> int | None:
    """A time column's value as epoch milliseconds, as ``unix_millis(CAST(v AS TIMESTAMP))``
    reads it in a UTC session (floored), or the integer itself."""
    if value is None:
        return None
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return (moment - _EPOCH) // timedelta(milliseconds=1)
    if isinstance(value, date):
        return (value - _EPOCH.date()).days * 86_400_000
    return int(value)


def stamp_rows(
    rows: Iterable[Mapping[str, Any]],
    table: TableDefinition,
    spans: Sequence[SourceSpan],
    base: int,
) -> list[dict[str, Any]]:
    """Each row with its source order ``_ord``, commit timestamp ``_ts`` and time chunk
    ``_chunk`` (:func:`horizon_broker.ingest.commit_times.stamp`)."""
    offsets = span_bases(spans, base)
    stamped = []
    for row in rows:
        item = dict(row)
        item["_ord"] = offsets[(row[SOURCE_FILE], row["_pid"])] + row["_row"]
        stamped.append(item)
    if table.transaction_column is not None:
        name = table.transaction_column
        first: dict[Any, int] = {}
        for item in stamped:
            if item[name] is not None:
                first[item[name]] = min(first.get(item[name], item["_ord"]), item["_ord"])
        for item in stamped:
            item["_ts"] = item["_ord"] if item[name] is None else first[item[name]]
    else:
        for item in stamped:
            item["_ts"] = item["_ord"]
    for item in stamped:
        event = epoch_ms(item[table.time_column]) if table.time_column is not None else None
        item["_chunk"] = chunk_start_ms(
            table.granularity, event if event is not None else item["_ts"] >> 16
        )
    return stamped


def resolve_rows(
    stamped: Iterable[Mapping[str, Any]],
    index: Mapping[Key, IndexEntry],
    table: TableDefinition,
    segments: Mapping[tuple[int, int], int],
) -> list[dict[str, Any]]:
    """The resolved frame of a batch's own keys (:func:`horizon_broker.ingest.resolve.resolve`, a left join):
    one row per record, in key then commit order (:func:`horizon_broker.ingest.resolve.commit_order`:
    a transaction's records of a key resolve together, at its timestamp). ``index`` holds the current entry of (at
    least) every key of the batch; ``segments`` maps ``(_chunk, _kp)`` to the new segment's
    partition number."""
    by_key: dict[Key, list[Mapping[str, Any]]] = {}
    order = commit_order(table)
    for row in sorted(stamped, key=lambda item: tuple(item[name] for name in order)):
        by_key.setdefault(key_of(row, table), []).append(row)
    resolved = []
    for key in sorted(by_key, key=order_key):
        records = by_key[key]
        entry = index.get(key)
        cmps = [comparison(row, table) for row in records]
        prevs: list[Any] = []
        best = None  # max() over the earlier records: nulls ignored
        for cmp in cmps:
            prevs.append(best)
            if cmp is not None and (best is None or order_key(cmp) > order_key(best)):
                best = cmp
        chains = [at_least(cmp, prev) for cmp, prev in zip(cmps, prevs, strict=True)]
        nexts: list[int | None] = [None] * len(records)
        upcoming = None  # lead(CASE WHEN _chain THEN _ts END) ignoring nulls
        for i in range(len(records) - 1, -1, -1):
            nexts[i] = upcoming
            if chains[i]:
                upcoming = records[i]["_ts"]
        i_cmp = entry.cmp if entry is not None else None
        for i, row in enumerate(records):
            indexed = entry is not None
            accepted = chains[i] and (not indexed or at_least(cmps[i], i_cmp))
            first = accepted and (i == 0 or (indexed and not at_least(prevs[i], i_cmp)))
            chain_end = chains[i] and nexts[i] is None
            item = {name: row[name] for name in table.column_names}
            item.update(
                _ts=row["_ts"],
                _next=nexts[i],
                _cmp=cmps[i],
                _del=deleted(row, table),
                _kp=row["_kp"],
                _chunk=row["_chunk"],
                _inBatch=True,
                _acc=accepted,
                _first=first,
                _carry=indexed and chain_end and not accepted,
                _i_cmp=i_cmp,
                _i_validFrom=entry.valid_from if entry is not None else None,
                _i_deleted=entry.deleted if entry is not None else None,
                _i_chunk=entry.chunk if entry is not None else None,
                _i_seg=entry.seg if entry is not None else None,
                _newSeg=segments.get((row["_chunk"], row["_kp"])),
            )
            item[SOURCE_FILE] = row[SOURCE_FILE]
            item[SOURCE_POSITION] = row[SOURCE_POSITION]
            resolved.append(item)
    return resolved


def carried_rows(entries: Mapping[Key, IndexEntry], table: TableDefinition) -> list[dict[str, Any]]:
    """Rows that keep index entries in a new level without a record of their key (what the
    Spark path's full join gives an untouched key): only the key and the ``_i_`` columns."""
    rows = []
    for key in sorted(entries, key=order_key):
        entry = entries[key]
        item: dict[str, Any] = dict.fromkeys(table.column_names)
        item.update(zip(table.primary_key, key, strict=True))
        item.update(
            _ts=None,
            _next=None,
            _cmp=None,
            _del=False,
            _kp=entry.kp,
            _chunk=None,
            _inBatch=False,
            _acc=False,
            _first=False,
            _carry=True,
            _i_cmp=entry.cmp,
            _i_validFrom=entry.valid_from,
            _i_deleted=entry.deleted,
            _i_chunk=entry.chunk,
            _i_seg=entry.seg,
            _newSeg=None,
        )
        item[SOURCE_FILE] = None
        item[SOURCE_POSITION] = None
        rows.append(item)
    return rows


def stored_rows(resolved: Iterable[Mapping[str, Any]], table: TableDefinition) -> list[dict]:
    """The versions to store (:func:`horizon_broker.ingest.resolve.stored_versions`): user columns, validFrom,
    validUntil, source position, ``_kp``, ``_chunk`` and ``_seg``."""
    stored = []
    for row in resolved:
        if not row["_inBatch"]:
            continue
        empty = row["_next"] is not None and row["_next"] == row["_ts"]
        kept = row["_acc"] and not row["_del"] and not empty
        lost = (not row["_acc"] or empty) and not row["_del"]
        if not (kept or (table.out_of_order is OutOfOrder.STORE and lost)):
            continue
        if row["_newSeg"] is None:
            raise Internal(f"no segment was reserved for time chunk {row['_chunk']}")
        item = {name: row[name] for name in table.column_names}
        item[VALID_FROM] = row["_ts"]
        item[VALID_UNTIL] = row["_next"] if kept else row["_ts"]
        item[SOURCE_FILE] = row[SOURCE_FILE]
        item[SOURCE_POSITION] = row[SOURCE_POSITION]
        item.update(_kp=row["_kp"], _chunk=row["_chunk"], _seg=row["_newSeg"])
        stored.append(item)
    return stored


def entries_of(rows: Iterable[Mapping[str, Any]], table: TableDefinition) -> dict[Key, IndexEntry]:
    """The key index entries one level holds (:func:`horizon_broker.ingest.resolve.index_entries`), from its
    rows as written (the user columns give the comparison value and the delete flag)."""
    entries = {}
    for row in rows:
        if row["_carry"]:
            entry = IndexEntry(
                row["_i_cmp"], row["_i_validFrom"], row["_i_deleted"], row["_i_chunk"],
                row["_i_seg"], row["_kp"],
            )  # fmt: skip
        elif row["_acc"] and row["_next"] is None:
            gone = deleted(row, table)
            entry = IndexEntry(
                comparison(row, table), row["_ts"], gone, row["_chunk"],
                None if gone else row["_newSeg"], row["_kp"],
            )  # fmt: skip
        else:
            continue
        entries[key_of(row, table)] = entry
    return entries


@dataclass(frozen=True, slots=True)
class UpdateSummary:
    """What :func:`horizon_broker.ingest.resolve.resolution_summary` tells a batch before its commit."""

    rows: int
    targets: list[list[int]]
    """``[chunk, partition, updates]`` of every earlier segment the batch's updates are for."""
    oldest: int | None
    """The oldest update's commit timestamp (None: no updates)."""


def update_summary(resolved: Iterable[Mapping[str, Any]]) -> UpdateSummary:
    rows, counts, oldest = 0, {}, None
    for row in resolved:
        rows += bool(row["_inBatch"])
        if row["_first"] and row["_i_seg"] is not None and row["_i_deleted"] is False:
            target = (int(row["_i_chunk"]), int(row["_i_seg"]))
            counts[target] = counts.get(target, 0) + 1
            oldest = row["_ts"] if oldest is None else min(oldest, row["_ts"])
    return UpdateSummary(rows, sorted([*target, n] for target, n in counts.items()), oldest)
