"""Whether the snapshots after ``start`` can differ at all, from the timeline alone. Pure.

The table's LWM moves with every heartbeat, not only with commits; most moves change no row.
The timeline knows, per file, the greatest ``validFrom`` of its rows and, for a file whose rows
are all closed, their greatest ``validUntil`` (:mod:`horizon_broker.broker.sql.feed_files`, the
change feed's pruning). When no file may hold a version that begins or ends after ``start``,
every snapshot above ``start`` reads the same rows as ``start``, so a query over these tables
alone gives the same answer there: a subscription sends a progress message without running
anything. A file that may hold such a version (even one above the LWM, still being committed)
means the query runs, as it did before.
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


def quiet_since(segments: Iterable[Any], start: int) -> bool:
    """:func:`quiet_files` of a table's visible segments (``Segment``-like)."""
    return quiet_files(file_validity(segments), start)
