"""How a subscription's changes are cut into messages and merged when the subscriber is slow.

Pure. The stream computes the next delta only once its last message was handed on (the hand-over
holds a few messages; behind it, gRPC's flow-control window), and then from the last snapshot it
sent to the newest one: every snapshot the tables went through meanwhile is one coalesced range,
so a subscriber that does not read costs a bounded buffer, never one message per snapshot.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from .diff import CHANGE_COLUMN, UPDATE_BEFORE

DEFAULT_MAX_ROWS_PER_MESSAGE = 10_000
MAX_ROWS_PER_MESSAGE = 1_000_000


def next_range(sent_to: int, newest: int) -> tuple[int, int] | None:
    """The range the next delta covers: from the last snapshot sent to the newest (None: the
    tables did not move)."""
    return (sent_to, newest) if newest > sent_to else None


def _cut_after(kinds: list[str], start: int, limit: int) -> int:
    """Where a part starting at ``start`` ends: ``limit`` rows on, or one more so that a key's
    update_before and update_after stay in one message."""
    end = min(start + limit, len(kinds))
    if end < len(kinds) and kinds[end - 1] == UPDATE_BEFORE:
        end += 1
    return end


def parts(rows: pa.Table, max_rows: int) -> Iterator[pa.Table]:
    """``rows`` in slices of at most ``max_rows`` (one more to keep an update's pair whole); an
    empty table is one empty part."""
    if rows.num_rows == 0:
        yield rows
        return
    kinds = (
        rows.column(CHANGE_COLUMN).to_pylist()
        if CHANGE_COLUMN in rows.column_names
        else [""] * rows.num_rows
    )
    start = 0
    while start < rows.num_rows:
        end = _cut_after(kinds, start, max_rows)
        yield rows.slice(start, end - start)
        start = end
