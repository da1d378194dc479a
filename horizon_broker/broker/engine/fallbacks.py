"""Reading a table whose timeline fell back: when that is exact, and what to mark unreadable.

When Spark's reader fails on a segment file the broker itself cannot read either, the segment
leaves this broker's timeline, which falls back to what the segment replaced. A fallback is read
only at the snapshots where it answers exactly (:mod:`horizon_broker.timeline.fallback`); anywhere else the query
fails with UNAVAILABLE rather than answer without rows or with a key twice.
"""

from __future__ import annotations

from typing import Any

from horizon_broker._core.errors import Unavailable
from horizon_broker.broker.direct_lookup.reading import file_readable
from horizon_broker.broker.engine.prepared import Prepared, TableReadInfo
from horizon_broker.broker.spark.failures import UnreadableFiles
from horizon_broker.timeline.fallback import fallback_problem
from horizon_broker.timeline.interval import format_instant

_EVERY_SNAPSHOT = 2**63 - 1
"""What a read of an upsert table that names no snapshot must be assumed to see."""


def check_fallbacks(read: TableReadInfo, view: Any) -> None:
    """Fail when the table's timeline fell back, for an unreadable segment, to data that
    cannot answer at this read's snapshots (see :mod:`horizon_broker.timeline.fallback`)."""
    if not view.fallbacks:
        return
    snapshot = None
    if view.descriptor.upsert:  # an append table's rows are never closed by a rewrite
        reads = [end for _, end in read.change_windows]
        reads += [read.snapshot] if read.snapshot is not None else []
        snapshot = max(reads, default=_EVERY_SNAPSHOT)
    for fallback in view.fallbacks:
        problem = fallback_problem([fallback.lost], fallback.before, fallback.after, snapshot)
        if problem is not None:
            mark = fallback.mark
            raise Unavailable(
                f"{problem}: the query fails rather than answer without its rows or with a "
                f"key twice (unreadable since {format_instant(mark.since_ms)}: {mark.reason})"
            )


def drop_unreadable(follower: Any, prepared: Prepared, error: UnreadableFiles) -> list[str]:
    """Remove every visible segment with a file Spark's reader failed on *and* that the
    broker cannot read either (a file off this machine is taken on the reader's word)."""
    broken = {path for path in error.paths if not file_readable(path)}
    removed = []
    for table in prepared.tables:
        for segment in table.segments:
            if broken & set(segment.location):
                follower.mark_unreadable(segment.id, str(error))
                removed.append(str(segment.id))
    return removed


def retry_refused(error: UnreadableFiles, removed: list[str]) -> Unavailable:
    """The answer when a query may not retry after Spark's reader failed: nothing was marked
    (the broker reads the files), or the files stayed unreadable after the retry."""
    if not removed:
        return Unavailable(
            f"Spark's reader failed on {', '.join(error.paths)} ({error.detail}), but the broker "
            "reads them: nothing was marked unreadable; retry the query"
        )
    return Unavailable(f"segment files stayed unreadable after a retry: {error}")
