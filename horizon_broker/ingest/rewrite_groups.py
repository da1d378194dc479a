"""Which segments one updater rewrite merges (pure: segments in, groups out).

The updater rewrites every segment a pending update is for, whole. A batch leaves one small
segment per time chunk and key partition, so between compactions a table gathers a file per key
partition per batch, and a query opens them all. A rewrite that happens anyway may take its
neighbours along at the cost of their rows alone (copy-on-write stores fill their small files
with new rows the same way): each group is a gap-free run of visible segments of one time chunk
and major version, written as one overwrite segment over the run's root range with the next
minor version, as a minor compaction writes it.

A group holds at least one segment that must be rewritten. It may also hold segments nothing
updates when they are small (a quarter of the target or less) and this server announced them:
another server's segments are its own updater's to lock. A run stops at a root partition no
visible segment covers (a batch may still be writing it, and an overwrite over it would hide that
batch's segment) and at a large segment nothing updates. Runs are packed greedily up to the
target; a segment that alone exceeds it is rewritten alone, as is one of unknown size.

>>> from horizon_broker.timeline.interval import Interval
>>> day = Interval(0, 86_400_000)
>>> def seg(p, rows, server="s"):
...     return Segment(table="t", interval=day, version="v", partition=p, row_count=rows,
...                    size_bytes=rows, server=server)
>>> big = [seg(p, 1_500) for p in range(4)]
>>> small = [seg(p, 300) for p in range(4, 12)]
>>> groups = rewrite_groups([*big, *small], big + small[:4], server="s",
...                         target_rows=2_000, target_bytes=2_000)
>>> [(g[0].root_start, g[-1].root_end) for g in groups]
[(0, 1), (1, 2), (2, 3), (3, 5), (5, 11)]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from horizon_broker.timeline.segment import Segment, SegmentId

SMALL_SHARE = 4
"""A segment nothing updates joins a group when it is at most 1/SMALL_SHARE of the target."""


def rewrite_groups(
    visible: Iterable[Segment],
    rewritten: Sequence[Segment],
    *,
    server: str,
    target_rows: int,
    target_bytes: int,
) -> list[tuple[Segment, ...]]:
    """Every segment of ``rewritten`` in exactly one group, each group in root order.

    ``visible`` are the segments queries read now (all chunks); ``target_rows`` 0 rewrites each
    segment alone.
    """
    must = {segment.id: segment for segment in rewritten}
    if target_rows <= 0 or target_bytes <= 0:
        return [(segment,) for _, segment in sorted(must.items())]
    runs: dict[tuple[int, int, str], list[Segment]] = {}
    for segment in visible:
        key = (segment.interval.start_ms, segment.interval.end_ms, segment.version)
        runs.setdefault(key, []).append(segment)
    groups: list[tuple[Segment, ...]] = []
    placed: set[SegmentId] = set()
    for _, segments in sorted(runs.items()):
        segments.sort(key=lambda s: s.root_range)
        for group in _packed(segments, must, server, target_rows, target_bytes):
            groups.append(group)
            placed.update(segment.id for segment in group)
    # A segment to rewrite that is not visible (a newer one is being announced) goes alone.
    groups.extend((segment,) for sid, segment in sorted(must.items()) if sid not in placed)
    return sorted(groups, key=lambda g: (g[0].interval.start_ms, g[0].version, g[0].root_range))


def _packed(
    segments: Sequence[Segment],
    must: dict[SegmentId, Segment],
    server: str,
    target_rows: int,
    target_bytes: int,
) -> list[tuple[Segment, ...]]:
    """The groups of one chunk's visible segments of one version, in root order."""
    groups: list[tuple[Segment, ...]] = []
    group: list[Segment] = []

    def close() -> None:
        if any(segment.id in must for segment in group):
            groups.append(tuple(group))
        group.clear()

    for segment in segments:
        sized = segment.row_count > 0 and segment.size_bytes > 0
        small = (
            sized
            and segment.server == server
            and segment.row_count * SMALL_SHARE <= target_rows
            and segment.size_bytes * SMALL_SHARE <= target_bytes
        )
        if segment.id not in must and not small:
            close()
            continue
        if not sized:  # a segment to rewrite of unknown size goes alone
            close()
            group.append(segment)
            close()
            continue
        joins = (
            group
            and group[-1].root_end == segment.root_start
            and sum(member.row_count for member in group) + segment.row_count <= target_rows
            and sum(member.size_bytes for member in group) + segment.size_bytes <= target_bytes
        )
        if not joins:
            close()
        group.append(segment)
    close()
    return groups
