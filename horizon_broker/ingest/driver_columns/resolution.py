"""Key resolution of a batch as Arrow columns: :mod:`horizon_broker.ingest.driver_rows.resolution`'s rules, vectorized
(pure).

Each function mirrors a row-wise one and must agree with it row for row (a property test runs
both on the same records; :mod:`horizon_broker.ingest.driver_columns.stamps` does the same for the count and the
commit timestamps): :func:`resolve_columns` is
:func:`~horizon_broker.ingest.driver_rows.resolution.resolve_rows`, :func:`stored_versions` is
:func:`~horizon_broker.ingest.driver_rows.resolution.stored_rows`, :func:`level_entries` is
:func:`~horizon_broker.ingest.driver_rows.resolution.entries_of` and :func:`update_summary` is
:func:`~horizon_broker.ingest.driver_rows.resolution.update_summary`.

The window of :func:`horizon_broker.ingest.resolve.resolve` becomes passes over the batch sorted by key and source
order: comparison values are replaced by their dense rank among the batch's and the index's values
(``-1`` for null, lowest, as :func:`horizon_broker.ingest.resolve.at_least` orders them), a key's running maximum
is one cumulative maximum over ranks lifted by the key's number, and the next chain record is a
binary search among the chain's positions. Only tables with at most one comparison column are
resolved here (:func:`supported`).

Example::

    >>> import pyarrow as pa
    >>> from horizon_broker.ingest.table import TableDefinition
    >>> table = TableDefinition.from_dict({"name": "t", "columns": {"k": "string", "v": "int"},
    ...     "primary_key": ["k"], "comparison": ["v"]})
    >>> rows = pa.table({"k": ["a", "a"], "v": pa.array([2, 1], pa.int32()), "_ts": [10, 11],
    ...     "_ord": [10, 11], "_kp": pa.array([0, 0], pa.int32()), "_chunk": [0, 0],
    ...     "_sourceFile": ["f", "f"], "_sourcePosition": [0, 1]})
    >>> resolved = resolve_columns(rows, None, table, {(0, 0): 3})
    >>> resolved.select(["v", "_acc", "_next", "_newSeg"]).to_pylist()
    [{'v': 2, '_acc': True, '_next': None, '_newSeg': 3}, {'v': 1, '_acc': False, '_next': None, '_newSeg': 3}]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from horizon_broker._core.errors import Internal
from horizon_broker.ingest.driver_columns.arrays import numbers, valid
from horizon_broker.ingest.driver_rows.resolution import UpdateSummary
from horizon_broker.ingest.resolve import SOURCE_FILE, SOURCE_POSITION, commit_order
from horizon_broker.ingest.table import OutOfOrder, TableDefinition
from horizon_broker.watermark.catalog import VALID_FROM, VALID_UNTIL

ENTRY_COLUMNS = ("_cmp", "_validFrom", "_deleted", "_chunk", "_seg", "_kp")
"""A key index entry's columns after the key's (:data:`horizon_broker.ingest.resolve.INDEX_COLUMNS`)."""


def supported(table: TableDefinition) -> bool:
    """Whether this module resolves the table's batches: at most one comparison column (several
    compare as a struct, which the row-wise and Spark paths handle)."""
    return len(table.comparison_columns) <= 1


def _comparison(batch: Any, table: TableDefinition) -> Any:
    """The comparison value of each row (:func:`horizon_broker.ingest.driver_rows.resolution.comparison`) as an Arrow
    array: the one comparison column, or 0 (int) without one."""
    import pyarrow as pa

    if not table.comparison_columns:
        return pa.array(np.zeros(batch.num_rows, dtype=np.int32))
    return batch[table.comparison_columns[0]].combine_chunks()


def _dense_ranks(values: Any) -> np.ndarray:
    """Each value's dense rank (0 for the least), ``-1`` for null: orders as
    :func:`horizon_broker.ingest.driver_rows.resolution.order_key` does."""
    import pyarrow.compute as pc

    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    ranks = np.asarray(pc.rank(values, sort_keys="ascending", tiebreaker="dense").to_numpy())
    ranks = ranks.astype(np.int64) - 1
    return np.where(valid(values), ranks, -1)


def _at_least(value: np.ndarray, other: np.ndarray) -> np.ndarray:
    """:func:`horizon_broker.ingest.resolve.at_least` of ranks (``-1`` is null)."""
    return (other == -1) | ((value != -1) & (value >= other))


def _key_starts(rows: Any, key: Sequence[str]) -> np.ndarray:
    """Which rows of a table sorted by ``key`` start a key (keys hold no nulls)."""
    import pyarrow.compute as pc

    n = rows.num_rows
    starts = np.ones(n, dtype=bool)
    if n < 2:
        return starts
    same = np.ones(n - 1, dtype=bool)
    for name in key:
        column = rows[name]
        same &= np.asarray(pc.equal(column.slice(0, n - 1), column.slice(1)).to_numpy())
    starts[1:] = ~same
    return starts


def empty_index(table: TableDefinition, key_types: Mapping[str, Any], cmp_type: Any) -> Any:
    """An index of no entries with :data:`ENTRY_COLUMNS` after the key."""
    import pyarrow as pa

    return pa.table(
        {
            **{name: pa.array([], key_types[name]) for name in table.primary_key},
            "_cmp": pa.array([], cmp_type),
            "_validFrom": pa.array([], pa.int64()),
            "_deleted": pa.array([], pa.bool_()),
            "_chunk": pa.array([], pa.int64()),
            "_seg": pa.array([], pa.int32()),
            "_kp": pa.array([], pa.int32()),
        }
    )


def resolve_columns(
    stamped: Any,
    index: Any | None,
    table: TableDefinition,
    segments: Mapping[tuple[int, int], int],
) -> Any:
    """The resolved frame of a batch's own keys (:func:`horizon_broker.ingest.resolve.resolve`, a left join):
    one row per record, in key then commit order (:func:`horizon_broker.ingest.resolve.commit_order`).
    ``index`` holds the key and
    :data:`ENTRY_COLUMNS` of (at least) every key of the batch, one row per key (None: none);
    ``segments`` maps ``(_chunk, _kp)`` to the new segment's partition number."""
    import pyarrow as pa
    import pyarrow.compute as pc

    pk = list(table.primary_key)
    by = [*pk, *commit_order(table)]
    order = pc.sort_indices(stamped, sort_keys=[(n, "ascending") for n in by])
    rows = stamped.take(order)
    n = rows.num_rows
    starts = _key_starts(rows, pk)
    group = np.cumsum(starts) - 1
    cmp = _comparison(rows, table)
    if index is None:
        index = empty_index(table, {n: rows.schema.field(n).type for n in pk}, cmp.type)
    # Each key's entry, aligned with the keys in their order (one row per key, or nulls).
    heads = rows.filter(pa.array(starts)).select(pk)
    heads = heads.append_column("_group", pa.array(np.arange(heads.num_rows), pa.int64()))
    entries = index.select([*pk, *ENTRY_COLUMNS]).rename_columns(
        [*pk, *["_i" + name for name in ENTRY_COLUMNS]]
    )
    entries = entries.cast(
        pa.schema([heads.schema.field(name) for name in pk] + list(entries.schema)[len(pk) :])
    )
    joined = heads.join(entries, keys=pk, join_type="left outer", use_threads=False)
    joined = joined.take(pc.sort_indices(joined["_group"]))
    if joined.num_rows != heads.num_rows:
        raise Internal("the key index holds more than one entry of a key")
    entry_cmp = joined["_i_cmp"].combine_chunks().cast(cmp.type)
    ranks = _dense_ranks(pa.concat_arrays([cmp, entry_cmp]))
    rank, entry_rank = ranks[:n], ranks[n:]
    indexed_keys = valid(joined["_i_validFrom"])

    # The greatest rank among each record's earlier records (-1: none, or all null).
    lift = int(ranks.max(initial=-1)) + 2
    lifted = np.maximum.accumulate(group * lift + rank + 1) - group * lift - 1
    prev = np.full(n, -1, dtype=np.int64)
    prev[1:] = lifted[:-1]
    prev[starts] = -1
    chain = _at_least(rank, prev)
    # The next chain record of the key: the first chain position after each row.
    ts = numbers(rows["_ts"]).astype(np.int64)
    chain_at = np.flatnonzero(chain)  # a key's first record is on its chain: never empty
    after = np.searchsorted(chain_at, np.arange(n), side="right")
    following = chain_at[np.minimum(after, len(chain_at) - 1)]
    has_next = (after < len(chain_at)) & (group[following] == group)
    next_ts = np.where(has_next, ts[following], 0)

    indexed = indexed_keys[group]
    i_rank = entry_rank[group]
    accepted = chain & (~indexed | _at_least(rank, i_rank))
    first = accepted & (starts | (indexed & ~_at_least(prev, i_rank)))
    carry = indexed & chain & ~has_next & ~accepted
    deleted = (
        numbers(rows[table.delete_column]).astype(bool)
        if table.delete_column is not None
        else np.zeros(n, dtype=bool)
    )
    gathered = pa.array(group, pa.int64())
    columns: dict[str, Any] = {name: rows[name] for name in table.column_names}
    columns.update(
        _ts=rows["_ts"],
        _next=pa.array(next_ts, pa.int64(), mask=~has_next),
        _cmp=cmp,
        _del=pa.array(deleted),
        _kp=rows["_kp"],
        _chunk=rows["_chunk"],
        _inBatch=pa.array(np.ones(n, dtype=bool)),
        _acc=pa.array(accepted),
        _first=pa.array(first),
        _carry=pa.array(carry),
        _i_cmp=entry_cmp.take(gathered),
        **{"_i" + name: joined["_i" + name].take(gathered) for name in ENTRY_COLUMNS[1:-1]},
        _newSeg=segment_numbers(rows, segments),
    )
    columns[SOURCE_FILE] = rows[SOURCE_FILE]
    columns[SOURCE_POSITION] = rows[SOURCE_POSITION]
    return pa.table(columns)


def carried_columns(entries: Any, schema: Any, table: TableDefinition) -> Any:
    """Rows that keep index entries in a new level without a record of their key (what the
    Spark path's full join gives an untouched key, :func:`horizon_broker.ingest.driver_rows.resolution.carried_rows`):
    the key and the ``_i_`` columns, in ``schema`` (a resolved frame's), in the entries' order."""
    import pyarrow as pa

    n = entries.num_rows
    given = {name: entries[name] for name in table.primary_key}
    given.update(
        _del=pa.array(np.zeros(n, dtype=bool)),
        _kp=entries["_kp"],
        _inBatch=pa.array(np.zeros(n, dtype=bool)),
        _acc=pa.array(np.zeros(n, dtype=bool)),
        _first=pa.array(np.zeros(n, dtype=bool)),
        _carry=pa.array(np.ones(n, dtype=bool)),
        **{"_i" + name: entries[name] for name in ENTRY_COLUMNS[:-1]},
    )
    columns = [
        given[field.name].cast(field.type) if field.name in given else pa.nulls(n, field.type)
        for field in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def segment_numbers(rows: Any, segments: Mapping[tuple[int, int], int]) -> Any:
    """``_newSeg`` of each row: the new segment of its ``(_chunk, _kp)``, null where none."""
    import pyarrow as pa

    pairs, at = distinct_pairs(numbers(rows["_chunk"]), numbers(rows["_kp"]))
    found = [segments.get(pair) for pair in pairs]
    values = np.array([-1 if v is None else v for v in found], dtype=np.int64)[at]
    return pa.array(values.astype(np.int32), pa.int32(), mask=values < 0)


def distinct_pairs(
    first: np.ndarray, second: np.ndarray
) -> tuple[list[tuple[int, int]], np.ndarray]:
    """The distinct ``(first, second)`` integer pairs, and the number of each row's pair."""
    first, second = first.astype(np.int64), second.astype(np.int64)
    if len(first) == 0:
        return [], np.zeros(0, dtype=np.int64)
    base, low = int(first.min()), int(second.min())
    width = int(second.max()) - low + 1
    distinct, at = np.unique((first - base) * width + (second - low), return_inverse=True)
    pairs = [(int(d) // width + base, int(d) % width + low) for d in distinct]
    return pairs, at.reshape(-1)


def stored_versions(resolved: Any, table: TableDefinition) -> Any:
    """The versions to store (:func:`horizon_broker.ingest.resolve.stored_versions`): user columns, validFrom,
    validUntil, source position, ``_kp``, ``_chunk`` and ``_seg``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ts = numbers(resolved["_ts"]).astype(np.int64)
    has_next = valid(resolved["_next"])
    empty = has_next & (numbers(resolved["_next"]).astype(np.int64) == ts)
    accepted = numbers(resolved["_acc"]).astype(bool)
    deleted = numbers(resolved["_del"]).astype(bool)
    kept = accepted & ~deleted & ~empty
    keep = kept
    if table.out_of_order is OutOfOrder.STORE:
        keep = kept | ((~accepted | empty) & ~deleted)
    chosen = resolved.filter(pa.array(keep))
    if pc.any(pc.is_null(chosen["_newSeg"])).as_py():
        chunk = chosen.filter(pc.is_null(chosen["_newSeg"]))["_chunk"][0].as_py()
        raise Internal(f"no segment was reserved for time chunk {chunk}")
    kept_chosen = pa.array(kept[keep])
    columns = {name: chosen[name] for name in table.column_names}
    columns[VALID_FROM] = chosen["_ts"]
    columns[VALID_UNTIL] = pc.if_else(
        kept_chosen, chosen["_next"].combine_chunks(), chosen["_ts"].combine_chunks()
    )
    columns[SOURCE_FILE] = chosen[SOURCE_FILE]
    columns[SOURCE_POSITION] = chosen[SOURCE_POSITION]
    columns.update(_kp=chosen["_kp"], _chunk=chosen["_chunk"], _seg=chosen["_newSeg"])
    return pa.table(columns)


def level_entries(level: Any, table: TableDefinition) -> Any:
    """The key index entries one level's rows hold (:func:`horizon_broker.ingest.resolve.index_entries`): the
    key and :data:`ENTRY_COLUMNS`, one row per entry. ``level`` has the key, the comparison and
    delete columns and :data:`horizon_broker.ingest.segment_files.LEVEL_COLUMNS`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    carry = numbers(level["_carry"]).astype(bool)
    changed = numbers(level["_acc"]).astype(bool) & ~valid(level["_next"]) & ~carry
    rows = level.filter(pa.array(carry | changed))
    carry = carry[carry | changed]
    if table.delete_column is not None:
        gone = numbers(rows[table.delete_column]).astype(bool)
    else:
        gone = np.zeros(rows.num_rows, dtype=bool)
    cmp = _comparison(rows, table)
    chosen = pa.array(carry)
    i_cmp = rows["_i_cmp"].combine_chunks().cast(cmp.type)
    new_seg = rows["_newSeg"].combine_chunks()
    own_seg = pc.if_else(pa.array(gone), pa.nulls(rows.num_rows, new_seg.type), new_seg)
    return pa.table(
        {
            **{name: rows[name] for name in table.primary_key},
            "_cmp": pc.if_else(chosen, i_cmp, cmp),
            "_validFrom": pc.if_else(chosen, rows["_i_validFrom"].combine_chunks(),
                                     rows["_ts"].combine_chunks()),
            "_deleted": pc.if_else(chosen, rows["_i_deleted"].combine_chunks(), pa.array(gone)),
            "_chunk": pc.if_else(chosen, rows["_i_chunk"].combine_chunks(),
                                 rows["_chunk"].combine_chunks()),
            "_seg": pc.if_else(chosen, rows["_i_seg"].combine_chunks(), own_seg),
            "_kp": rows["_kp"],
        }
    )  # fmt: skip


def newest_entries(levels: Sequence[Any], table: TableDefinition) -> Any | None:
    """Of several levels' entries (oldest first), each key's newest; None when there are none."""
    import pyarrow as pa
    import pyarrow.compute as pc

    found = [entries for entries in levels if entries.num_rows]
    if not found:
        return None
    stacked = pa.concat_tables(
        [entries.append_column("_level", pa.array(np.full(entries.num_rows, depth, np.int64)))
         for depth, entries in enumerate(found)],
        promote_options="permissive",
    )  # fmt: skip
    pk = list(table.primary_key)
    order = pc.sort_indices(
        stacked, sort_keys=[*[(n, "ascending") for n in pk], ("_level", "ascending")]
    )
    ordered = stacked.take(order)
    starts = _key_starts(ordered, pk)
    last = np.empty(len(starts), dtype=bool)
    last[:-1] = starts[1:]
    last[-1:] = True
    return ordered.filter(pa.array(last)).drop_columns(["_level"])


def update_summary(resolved: Any) -> UpdateSummary:
    """:func:`horizon_broker.ingest.resolve.resolution_summary` of a resolved batch."""
    first = numbers(resolved["_first"]).astype(bool)
    has_seg = valid(resolved["_i_seg"])
    alive = valid(resolved["_i_deleted"]) & ~numbers(resolved["_i_deleted"]).astype(bool)
    update = first & has_seg & alive
    if not update.any():
        return UpdateSummary(resolved.num_rows, [], None)
    pairs, at = distinct_pairs(
        numbers(resolved["_i_chunk"])[update], numbers(resolved["_i_seg"])[update]
    )
    counts = np.bincount(at, minlength=len(pairs))
    oldest = int(numbers(resolved["_ts"]).astype(np.int64)[update].min())
    targets = [[c, s, int(k)] for (c, s), k in zip(pairs, counts, strict=True)]
    return UpdateSummary(resolved.num_rows, sorted(targets), oldest)
