"""The change-feed strategy: a filter and projection of one upsert table, from its change feed.

Only the keys that changed between two snapshots can change the answer, and the table's change
feed (``table_changes``) names them with their rows: each such key's row at the last snapshot
and at the new one, the query's projection and filter applied to both
(:func:`.incremental_sql.feed_images_sql`), is the changed part of both answers. Their
difference by the primary key is the delta: a row leaving the filter is a ``delete``, one
entering it an ``insert``, a changed one an update pair, and a key whose rows project to the
same result row (a rewrite, a compaction, a change of a column the query does not show) no
change. Nothing of the answer is held: a resumed stream costs no query.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from .choose import CHANGE_FEED, Choice
from .diff import Delta, diff
from .incremental_sql import (
    AFTER,
    AT,
    BEFORE,
    ENDS,
    KEY_PREFIX,
    PASSES,
    SIDE,
    feed_events_sql,
    feed_images_sql,
)

if TYPE_CHECKING:
    from .strategy import Reads


def split_images(images: pa.Table) -> tuple[pa.Table, pa.Table]:
    """The rows at the first snapshot and at the last one, without :data:`SIDE`."""
    side = images.column(SIDE)
    rows = images.drop_columns([SIDE])
    return rows.filter(pc.equal(side, BEFORE)), rows.filter(pc.equal(side, AFTER))


def _same_as_previous(column: pa.ChunkedArray) -> pa.Array:
    """Row i (i >= 1) holds the value row i - 1 holds (two NULLs are the same)."""
    values = column.combine_chunks()
    current, previous = values.slice(1), values.slice(0, len(values) - 1)
    both_null = pc.and_(pc.is_null(current), pc.is_null(previous))
    return pc.or_(pc.fill_null(pc.equal(current, previous), False), both_null)


def pick_images(events: pa.Table, key_columns: int) -> tuple[pa.Table, pa.Table]:
    """From the feed's events (:func:`.incremental_sql.feed_events_sql`), each changed key's
    row at the first snapshot (its first change, when that ends a version) and at the last one
    (its last change, when that begins one), each kept when the query's filter holds; the
    query's columns only. At one instant the ending change comes first."""
    keys = [f"{KEY_PREFIX}{n}" for n in range(key_columns)]
    hidden = [*keys, AT, ENDS, PASSES]
    order = [(k, "ascending") for k in keys] + [(AT, "ascending"), (ENDS, "descending")]
    events = events.take(pc.sort_indices(events, sort_keys=order, null_placement="at_start"))
    rows = events.num_rows
    if rows == 0:
        empty = events.drop_columns(hidden)
        return empty, empty
    same = pa.array([True] * (rows - 1), pa.bool_())
    for key in keys:
        same = pc.and_(same, _same_as_previous(events.column(key)))
    new_key = pc.invert(same)
    first = pa.concat_arrays([pa.array([True]), new_key])
    last = pa.concat_arrays([new_key, pa.array([True])])
    ends = events.column(ENDS).combine_chunks()
    passes = events.column(PASSES).combine_chunks()
    before = pc.and_(pc.and_(first, ends), passes)
    after = pc.and_(pc.and_(last, pc.invert(ends)), passes)
    rows_only = events.drop_columns(hidden)
    return rows_only.filter(before), rows_only.filter(after)


class ChangeFeed:
    """Deltas from the table's change feed between the two snapshots."""

    name = CHANGE_FEED

    def __init__(self, choice: Choice, reads: Reads) -> None:
        self._choice = choice
        self._reads = reads
        self._at: int | None = None

    def start(self, snapshot: int) -> pa.Table:
        self._at = snapshot
        return self._reads.run(snapshot)

    def resume(self, snapshot: int) -> None:
        self._at = snapshot

    def advance(self, to: int) -> Delta:
        assert self._at is not None, "start() or resume() first"
        sql, choice = self._reads.sql, self._choice
        events_sql = feed_events_sql(sql, choice, self._at, to)
        if events_sql is not None:
            events = self._reads.query(events_sql)
            before, after = pick_images(events, len(choice.primary_key))
        else:
            images = self._reads.query(feed_images_sql(sql, choice, self._at, to))
            before, after = split_images(images)
        self._at = to
        return diff(before, after, self._reads.key)
