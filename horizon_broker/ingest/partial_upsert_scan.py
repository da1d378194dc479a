"""Partial upserts folded as columns: a batch without late events, in Arrow and numpy.

The fold (:func:`horizon_broker.ingest.partial_upsert.fold`) applies a key's events one by one in
comparison order; the batch's shell (:mod:`.partial_upsert_batch`) does that in Python for each
event, which costs more than the rest of a batch's driver work. When every event of a batch is
newer (comparison value, then commit order) than every event of its key committed before it (the
usual stream: log positions only grow), each event's row is the fold of a *prefix* of its key's
events sorted by (key, rank). Each strategy is then a scan along that sorted order, restarted
after each delete:

- ``overwrite``: the last value an event carried (a null too); ``overwrite_if_not_null``: the
  last non-null one; ``ignore``: the first non-null one (an index carried forward);
- ``increment``: a running sum of the non-null values (integers; null until the first);
- ``max`` / ``min``: a running maximum of the values' dense ranks, kept within the key's run by
  adding the run's number times more than any rank.

A delete's row is its own values, the delete column true (the newest delete again), and the
transaction column is each event's own value, as the Python fold gives. Anything else (a late
event, ``append`` / ``union``, floats or decimals to add, floats to order, a sum that might not
fit 64 bits) returns None and the batch takes the Python fold, which stays the reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from horizon_broker.ingest.partial_upsert import ABSENT, Strategy
from horizon_broker.ingest.table import TableDefinition

_SUM_BOUND = 1 << 62
"""Sums of absolute values below this cannot overflow int64 anywhere along the running sum."""


def commit_order_arrow(batch: Any, source: str, transaction: str | None) -> Any:
    """:func:`horizon_broker.ingest.partial_upsert_batch.commit_order` on an Arrow batch (a
    numpy array of row indices): source order (``source``, ``_pid``, ``_row``), a
    transaction's changes at its first change's place."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    count = batch.num_rows
    places = pa.table({"s": batch[source], "p": batch["_pid"], "r": batch["_row"]})
    by_place = pc.sort_indices(places, [("s", "ascending"), ("p", "ascending"), ("r", "ascending")])
    own = np.empty(count, dtype=np.int64)
    own[by_place.to_numpy()] = np.arange(count)
    first = own
    if transaction is not None and count:
        encoded = pc.dictionary_encode(batch[transaction]).combine_chunks()
        codes = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)
        named = encoded.indices.is_valid().to_numpy(zero_copy_only=False)
        earliest = np.full(max(1, len(encoded.dictionary)), count, dtype=np.int64)
        np.minimum.at(earliest, codes[named].astype(np.int64), own[named])
        first = np.where(named, earliest[np.where(named, codes, 0).astype(np.int64)], own)
    return np.lexsort((own, first))


def scanned_columns(
    table: TableDefinition, batch: Any, order: Any, history: Any
) -> dict[str, Any] | None:
    """The merged user columns of ``batch`` (Arrow, enriched; ``order``: its commit order),
    each an Arrow array in the batch's row order, folded with the logged ``history`` (Arrow,
    any of the batch's keys' events); None when the scan does not apply (see the module)."""
    plan = _plan(table, batch, history)
    if plan is None:
        return None
    runs = _runs(table, plan, order)
    if runs is None:
        return None
    merged: dict[str, Any] = {}
    strategies = dict(table.partial_upsert or ())
    for name in table.column_names:
        if name == table.transaction_column:
            merged[name] = batch[name].combine_chunks()
            continue
        strategy = strategies.get(name, Strategy.OVERWRITE)
        values = plan.columns[name].take(runs.sort)
        column = _scanned(strategy, runs, values, runs.present[name])
        if column is None:
            return None
        if name == table.delete_column:
            column = _pc().if_else(_pa().array(runs.deleted), True, column)
        merged[name] = column.take(runs.batch_places)
    return merged


class _Plan:
    """The batch's and history's events as one set of columns (history first)."""

    def __init__(self, columns: dict[str, Any], absent: Any, ranks: dict[str, Any]) -> None:
        self.columns, self.absent, self.ranks = columns, absent, ranks


class _Runs:
    """The events sorted by (key, rank): where each key's run restarts, and more."""

    sort: Any
    """Event indices in sorted order."""
    start: Any
    """Per sorted place, the place its run (a key, or since a delete) starts."""
    run: Any
    """Per sorted place, its run's number (increasing)."""
    deleted: Any
    present: dict[str, Any]
    """Per column, per sorted place: whether the event carried it."""
    batch_places: Any
    """Per batch row, its sorted place."""


def _pc() -> Any:
    import pyarrow.compute as pc

    return pc


def _pa() -> Any:
    import pyarrow as pa

    return pa


def _supported(table: TableDefinition, types: Mapping[str, Any]) -> bool:
    import pyarrow as pa

    strategies = dict(table.partial_upsert or ())
    for name in (*table.primary_key, *table.comparison_columns):
        if pa.types.is_floating(types[name]):
            return False
    for name, strategy in strategies.items():
        type_ = types[name]
        if strategy in (Strategy.APPEND, Strategy.UNION):
            return False
        if strategy is Strategy.INCREMENT and not pa.types.is_integer(type_):
            return False
        if strategy in (Strategy.MAX, Strategy.MIN) and not (
            pa.types.is_integer(type_)
            or pa.types.is_string(type_)
            or pa.types.is_large_string(type_)
            or pa.types.is_date(type_)
            or pa.types.is_timestamp(type_)
        ):
            return False
    return table.delete_column is None or pa.types.is_boolean(types[table.delete_column])


def _plan(table: TableDefinition, batch: Any, history: Any) -> _Plan | None:
    import numpy as np
    import pyarrow as pa

    types = {name: batch.schema.field(name).type for name in table.column_names}
    if not _supported(table, types):
        return None
    logged = history.num_rows if history is not None and history.num_columns else 0
    columns: dict[str, Any] = {}
    try:
        for name in table.column_names:
            parts = [history[name].cast(types[name])] if logged else []
            parts.append(batch[name])
            columns[name] = pa.chunked_array(
                [c for part in parts for c in part.chunks], type=types[name]
            ).combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError):
        return None  # a log written under another schema: the Python fold reads it
    absent = [*([history[ABSENT]] if logged else []), _absent_column(batch)]
    base = history["_base"].to_numpy() if logged else np.zeros(0, np.int64)
    order = history["_order"].to_numpy() if logged else np.zeros(0, np.int64)
    ranks = {
        "in_batch": np.concatenate([np.zeros(logged, bool), np.ones(batch.num_rows, bool)]),
        "_base": np.concatenate([base.astype(np.int64), np.zeros(batch.num_rows, np.int64)]),
        "_order": order.astype(np.int64),
    }
    return _Plan(columns, pa.chunked_array(absent, type=pa.list_(pa.string())), ranks)


def _absent_column(batch: Any) -> Any:
    import pyarrow as pa

    if ABSENT in batch.column_names:
        return batch[ABSENT].cast(pa.list_(pa.string())).combine_chunks()
    return pa.array([[]] * batch.num_rows, pa.list_(pa.string()))


def _present(plan: _Plan, names: Sequence[str]) -> dict[str, Any]:
    """Per column, per event: whether the event carried it (not in its absent list)."""
    import numpy as np
    import pyarrow.compute as pc

    absent = plan.absent.combine_chunks()
    count = len(absent)
    flat = pc.list_flatten(absent)
    parents = pc.list_parent_indices(absent).to_numpy()
    present = {}
    for name in names:
        carried = np.ones(count, bool)
        if len(flat):
            hit = pc.equal(flat, name).to_numpy(zero_copy_only=False)
            carried[parents[hit]] = False
        present[name] = carried
    return present


def _runs(table: TableDefinition, plan: _Plan, order: Any) -> _Runs | None:
    """The events sorted by (key, rank); None when some batch event is late for its key."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    names = table.column_names
    present = _present(plan, names)
    batch_rows = int(plan.ranks["in_batch"].sum())
    commit = np.empty(batch_rows, np.int64)
    commit[np.asarray(order, np.int64)] = np.arange(batch_rows)
    sort_columns = {f"k{i}": plan.columns[n] for i, n in enumerate(table.primary_key)}
    for i, name in enumerate(table.comparison_columns):
        # an absent comparison value ranks as a null does (lowest)
        sort_columns[f"c{i}"] = pc.if_else(present[name], plan.columns[name], None)
    sort_columns["b"] = pa.array(plan.ranks["in_batch"])
    sort_columns["t"] = pa.array(plan.ranks["_base"])
    sort_columns["o"] = pa.array(np.concatenate([plan.ranks["_order"], commit]))
    keys = [(name, "ascending") for name in sort_columns]
    sort = pc.sort_indices(pa.table(sort_columns), keys, null_placement="at_start").to_numpy()
    count = len(sort)
    new_key = np.zeros(count, bool)
    if count:
        new_key[0] = True
    for i in range(len(table.primary_key)):
        column = sort_columns[f"k{i}"].take(sort)
        if column.null_count:
            return None
        new_key[1:] |= pc.not_equal(column[1:], column[:-1]).to_numpy(zero_copy_only=False)
    from_batch = plan.ranks["in_batch"][sort]
    ranked = sort_columns["o"].to_numpy()[sort]
    same = ~new_key[1:]
    late = same & (
        (from_batch[:-1] & ~from_batch[1:]) | (from_batch[:-1] & (ranked[1:] < ranked[:-1]))
    )
    if late.any():
        return None
    deleted = np.zeros(count, bool)
    if table.delete_column is not None:
        flags = pc.fill_null(plan.columns[table.delete_column], False)
        deleted = flags.to_numpy(zero_copy_only=False)[sort]
    restart = new_key.copy()
    restart[1:] |= deleted[:-1]
    places = np.arange(count)
    runs = _Runs()
    runs.sort, runs.deleted = sort, deleted
    runs.start = np.maximum.accumulate(np.where(restart, places, 0))
    runs.run = np.cumsum(restart) - 1
    runs.present = {name: carried[sort] for name, carried in present.items()}
    where = np.empty(count, np.int64)
    where[sort] = places
    runs.batch_places = pa.array(where[count - batch_rows :])
    return runs


def _scanned(strategy: Strategy, runs: _Runs, values: Any, present: Any) -> Any:
    """One column's merged value at each sorted place (Arrow), or None (not scannable)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    places = np.arange(len(values))
    valid = present & values.is_valid().to_numpy(zero_copy_only=False)
    if strategy is Strategy.OVERWRITE or strategy is Strategy.OVERWRITE_IF_NOT_NULL:
        carried = present if strategy is Strategy.OVERWRITE else valid
        last = np.maximum.accumulate(np.where(carried, places, -1))
        merged = _taken(values, np.where(last >= runs.start, last, -1))
    elif strategy is Strategy.IGNORE:
        merged = _taken(values, _first(runs, valid, places))
    elif strategy is Strategy.INCREMENT:
        merged = _summed(runs, values, valid)
        if merged is None:
            return None
    else:
        merged = _extreme(runs, values, valid, highest=strategy is Strategy.MAX)
    own = pc.if_else(pa.array(present), values, None)
    return pc.if_else(pa.array(runs.deleted), own, merged)


def _taken(values: Any, indices: Any) -> Any:
    import pyarrow as pa

    return values.take(pa.array(indices, mask=indices < 0))


def _first(runs: _Runs, valid: Any, places: Any) -> Any:
    """Per place, its run's first valid place up to it (-1: none yet)."""
    import numpy as np

    first = np.full(int(runs.run[-1]) + 1 if len(places) else 0, -1, np.int64)
    valid_places = places[valid]
    found, at = np.unique(runs.run[valid_places], return_index=True)
    first[found] = valid_places[at]
    chosen = first[runs.run]
    return np.where((chosen >= 0) & (chosen <= places), chosen, -1)


def _summed(runs: _Runs, values: Any, valid: Any) -> Any:
    """Running sums of the valid values within each run, null before the first (None: they
    might not fit 64 bits; the Python fold then says which column overflows)."""
    import numpy as np
    import pyarrow as pa

    numbers = np.where(valid, values.fill_null(0).to_numpy(zero_copy_only=False), 0)
    numbers = numbers.astype(np.int64)
    if len(numbers) and int(np.abs(numbers).astype(np.float64).sum()) >= _SUM_BOUND:
        return None
    total = np.cumsum(numbers)
    counted = np.cumsum(valid)
    before = np.where(runs.start > 0, total[runs.start - 1], 0)
    seen_before = np.where(runs.start > 0, counted[runs.start - 1], 0)
    sums = pa.array(total - before, mask=(counted - seen_before) == 0)
    try:
        return sums.cast(values.type)
    except pa.ArrowInvalid:
        return None


def _extreme(runs: _Runs, values: Any, valid: Any, *, highest: bool) -> Any:
    """Running maximum (minimum) of the valid values within each run, null before the first."""
    import numpy as np
    import pyarrow.compute as pc

    count = len(values)
    rank = pc.rank(values, sort_keys="ascending", null_placement="at_end", tiebreaker="dense")
    rank = rank.to_numpy().astype(np.int64)
    top = int(rank.max()) + 1 if count else 1
    if not highest:
        rank = top - rank
    width = top + 1
    keyed = np.maximum.accumulate(runs.run * width + np.where(valid, rank, 0))
    best = keyed - runs.run * width
    holder = np.full(width, -1, np.int64)
    holder[rank[valid]] = np.arange(count)[valid]
    return _taken(values, np.where(best > 0, holder[best], -1))
