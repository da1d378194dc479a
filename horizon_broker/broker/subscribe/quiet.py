"""Whether the snapshots after ``start`` can differ at all, from the timeline alone. Pure.

The table's LWM moves with every heartbeat, not only with commits; most moves change no row.
The timeline knows, per file, the greatest ``validFrom`` of its rows and, for a file whose rows
are all closed, their greatest ``validUntil`` (:mod:`horizon_broker.broker.sql.feed_files`, the
change feed's pruning). When no file may hold a version that begins or ends after ``start``,
every snapshot above ``start`` reads the same rows as ``start``, so a query over these tables
alone gives the same answer there: a subscription sends a progress message without running
anything. A file that may hold such a version means the query runs, as it did before.

A commit's files are in the timeline before the LWM reaches the commit (the LWM moves with the
heartbeats meanwhile): a window ending below them is not quiet by this rule, yet its query most
likely finds nothing, and the delta of the commit itself then waits behind it (measured by
``bench.subscribe``). :func:`pending_commit` names the instant such files reach, so a
subscription waits a little for the LWM to get there and runs one query for both.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from horizon_broker.broker.sql.feed_files import FileValidity, file_validity


def quiet_files(files: Sequence[FileValidity], start: int) -> bool:
    """True when none of ``files`` may hold a version beginning or ending after ``start``
    (no files known: False, the query runs)."""
    if not files:
        return False
    return not any(f.may_begin_after(start) or f.may_end_after(start) for f in files)


def pending_commit(files: Sequence[FileValidity], start: int, to: int) -> int | None:
    """When every one of ``files`` that may hold a version beginning or ending after ``start``
    reaches above ``to`` (the LWM: a commit still being made), the greatest instant they reach;
    None when one may change the answer at or below ``to`` (or nothing is known, or nothing
    changed at all): the query runs now. A file reaching above ``to`` may still hold a version
    at or below it, so this only tells a subscription what to wait for, never what to skip."""
    if not files:
        return None
    reached: list[int] = []
    for file in files:
        if file.may_begin_after(start):
            if file.max_valid_from is None or file.max_valid_from <= to:
                return None
            reached.append(file.max_valid_from)
        if file.may_end_after(start):
            if file.max_valid_until is None or file.max_valid_until <= to:
                return None
            reached.append(file.max_valid_until)
    return max(reached, default=None)


def quiet_since(segments: Iterable[Any], start: int) -> bool:
    """:func:`quiet_files` of a table's visible segments (``Segment``-like)."""
    return quiet_files(file_validity(segments), start)


def pending_since(segments: Iterable[Any], start: int, to: int) -> int | None:
    """:func:`pending_commit` of a table's visible segments (``Segment``-like)."""
    return pending_commit(file_validity(segments), start, to)
