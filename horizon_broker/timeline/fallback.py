"""Whether a query may read what the timeline fell back to after a segment turned out unreadable.

The timeline falls back from an unreadable segment to what it replaced: an overwrite to the
segments it overwrote, a new major version to the one below, or to nothing. That data is still
there, but it can be wrong for the query: where nothing is left, the chunk's rows are missing;
and an updater's rewrite closed versions that the segment it rewrote still shows open, so at a
snapshot after those updates the fallback shows two versions of a key. A query may use the
fallback only when neither can happen:

1. every time chunk of a lost segment is still read whole (the visible segments cover it);
2. every segment the fallback brought in answers as its rewrites would at every snapshot the
   query reads: those snapshots are at or below its :attr:`Segment.fallback_bound`.

Otherwise the broker fails the query with UNAVAILABLE, naming the segment and the chunk, rather
than answer without its rows or with a key twice.

>>> from horizon_broker.timeline.interval import Interval
>>> day = Interval(0, 86_400_000)
>>> original = Segment(table="t", interval=day, version="v", partition=0, core_partitions=1,
...                    max_valid_from=500)
>>> rewrite = Segment(table="t", interval=day, version="v", partition=32768, core_partitions=1,
...                   root_start=0, root_end=1, minor_version=1, applied_through=1000)
>>> fallback_problem([rewrite], [rewrite], [original], snapshot=400) is None
True
>>> print(fallback_problem([rewrite], [rewrite], [original], snapshot=1200))  # doctest: +ELLIPSIS
segment t_..._32768 of table t is unreadable, and its root partitions [0, 1) of time chunk ... \
would be read from ..._0, which holds the updates up to 500 only (the query reads up to 1200)
>>> print(fallback_problem([rewrite], [rewrite], [], snapshot=400))  # doctest: +ELLIPSIS
segment t_..._32768 of table t is unreadable, and no complete data is left for its time chunk ...
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from horizon_broker.timeline.segment import Segment


def merged_bound(segments: Iterable[Segment]) -> int | None:
    """The fallback bound of a segment merged from ``segments`` (a compaction): it holds exactly
    the updates they held, so the lowest of their bounds (None when one is unknown)."""
    bounds = [segment.fallback_bound for segment in segments]
    if not bounds or any(bound is None for bound in bounds):
        return None
    return min(bound for bound in bounds if bound is not None)


def fallback_problem(
    lost: Sequence[Segment],
    before: Iterable[Segment],
    after: Sequence[Segment],
    snapshot: int | None,
) -> str | None:
    """Why a query reading up to ``snapshot`` must not answer from the visible segments
    ``after`` once the ``lost`` ones (of the visible set ``before``) were removed; None when it
    may. ``snapshot`` None: the table has no versions (an append table), any complete fallback
    answers as the lost segment would have.

    A chunk that still shows the lost segment's major version must cover its root partitions
    (a chunk of appended segments has no core set, so the timeline calls it complete without
    them); one that fell back to another version must cover its interval."""
    known = {segment.id for segment in before}
    for segment in lost:
        chunk = segment.interval
        same = [s for s in after if s.interval == chunk and s.version == segment.version]
        if same:
            start, end = segment.root_range
            covering = [s for s in same if s.root_range[0] < end and start < s.root_range[1]]
            whole = _covers([s.root_range for s in covering], (start, end))
            where = f"its root partitions [{start}, {end}) of time chunk {chunk}"
        else:
            covering = [s for s in after if s.interval.overlaps(chunk)]
            whole = _covers(
                [(s.interval.start_ms, s.interval.end_ms) for s in covering],
                (chunk.start_ms, chunk.end_ms),
            )
            where = f"its time chunk {chunk}"
        if not whole:
            return (
                f"segment {segment.id} of table {segment.table} is unreadable, and no complete "
                f"data is left for {where}"
            )
        if snapshot is None:
            continue
        for replacement in covering:
            if replacement.id in known:
                continue
            bound = replacement.fallback_bound
            if bound is None or snapshot > bound:
                held = "unknown updates" if bound is None else f"the updates up to {bound} only"
                return (
                    f"segment {segment.id} of table {segment.table} is unreadable, and "
                    f"{where} would be read from {replacement.id}, which holds {held} (the "
                    f"query reads up to {snapshot})"
                )
    return None


def _covers(ranges: Sequence[tuple[int, int]], target: tuple[int, int]) -> bool:
    """Whether the union of the half-open ``ranges`` contains ``target``."""
    reached, end = target
    for start, stop in sorted(ranges):
        if start > reached:
            return False
        reached = max(reached, stop)
        if reached >= end:
            return True
    return reached >= end
