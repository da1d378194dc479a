"""What a minor compaction merges (pure: segments in, targets out).

Minor compaction (Druid's proposal for segment locking and minor compaction; see
``docs/design/contract/index.md``) replaces a run of visible
segments of one time chunk and major version whose root partition ranges are adjacent
(``[a, b)``, ``[b, c)``, ...) by one overwrite segment that covers ``[a, last end)`` with the next
minor version. The run must be gap-free: a root partition number that no visible segment covers
may belong to a batch that is still writing, and an overwrite covering it would hide that batch's
segment when it is announced. Runs are packed up to a target size (rows and bytes); a segment
already at the target size is left alone.

Example: visible roots ``[0,1) [1,2) [2,3) [4,5) [5,6)`` (3 is missing) give two targets,
``[0,3)`` and ``[4,6)``, when the sizes allow.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from horizon_broker.timeline.timeline import Timeline


@dataclass(frozen=True, slots=True)
class CompactionSettings:
    """How big a compacted segment may grow, and when a chunk is worth compacting (the policy)."""

    target_rows: int = 5_000_000
    target_bytes: int = 512 * 1024 * 1024
    min_segments: int = 2
    """A chunk is compacted once it holds at least this many visible segments ..."""
    min_small_files: int = 0
    """... or at least this many files smaller than ``small_file_bytes`` (0: no such rule)."""
    small_file_bytes: int = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class CompactionTarget:
    """One output segment: the inputs it replaces and the root range and minor version it takes."""

    inputs: tuple[Segment, ...]

    @property
    def interval(self) -> Interval:
        return self.inputs[0].interval

    @property
    def version(self) -> str:
        return self.inputs[0].version

    @property
    def root_range(self) -> tuple[int, int]:
        return (int(self.inputs[0].root_start), int(self.inputs[-1].root_end))  # type: ignore[arg-type]

    @property
    def minor_version(self) -> int:
        return max(segment.minor_version for segment in self.inputs) + 1

    @property
    def rows(self) -> int:
        return sum(segment.row_count for segment in self.inputs)

    @property
    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self.inputs)


def visible_by_chunk(table: str, announced: Iterable[Segment]) -> dict[Interval, list[Segment]]:
    """The segments a query reads now, per time chunk, in root partition order."""
    timeline = Timeline(table)
    timeline.add_all(announced)
    chunks: dict[Interval, list[Segment]] = {}
    for segment in timeline.visible_segments():
        chunks.setdefault(segment.interval, []).append(segment)
    for segments in chunks.values():
        segments.sort(key=lambda s: (s.root_start, s.root_end))
    return chunks


def plan_minor(
    table: str,
    announced: Iterable[Segment],
    settings: CompactionSettings,
    *,
    interval: Interval | None = None,
    version: str | None = None,
    skip_newest: int = 0,
) -> list[CompactionTarget]:
    """The targets of a minor compaction of ``table`` (of chunks overlapping ``interval``, of
    major ``version`` only when given), leaving the ``skip_newest`` newest chunks alone.

    >>> from horizon_broker.timeline.segment import Segment
    >>> day = Interval(0, 86_400_000)
    >>> segs = [Segment(table="t", interval=day, version="v", partition=p, row_count=10)
    ...         for p in (0, 1, 2, 4, 5)]
    >>> [t.root_range for t in plan_minor("t", segs, CompactionSettings())]
    [(0, 3), (4, 6)]
    """
    chunks = visible_by_chunk(table, announced)
    ordered = sorted(chunks)
    if skip_newest:
        ordered = ordered[: max(0, len(ordered) - skip_newest)]
    targets: list[CompactionTarget] = []
    for chunk in ordered:
        if interval is not None and not chunk.overlaps(interval):
            continue
        segments = [s for s in chunks[chunk] if version is None or s.version == version]
        if len({s.version for s in segments}) > 1:
            continue  # several major versions share the chunk's instants: leave it to a major one
        if not due(segments, settings):
            continue
        targets.extend(_pack(segments, settings))
    return targets


def due(segments: Sequence[Segment], settings: CompactionSettings) -> bool:
    """The policy: a chunk is compacted once it holds ``min_segments`` visible segments or
    ``min_small_files`` small files."""
    if len(segments) >= settings.min_segments:
        return True
    if not settings.min_small_files or not segments:
        return False
    small = sum(
        len(s.location)
        for s in segments
        if s.size_bytes / max(1, len(s.location)) < settings.small_file_bytes
    )
    return small >= settings.min_small_files


def _pack(segments: Sequence[Segment], settings: CompactionSettings) -> list[CompactionTarget]:
    """Greedy runs of adjacent, small enough segments, each of at least two."""
    targets: list[CompactionTarget] = []
    run: list[Segment] = []

    def close() -> None:
        if len(run) >= 2:
            targets.append(CompactionTarget(tuple(run)))
        run.clear()

    for segment in segments:
        fits = (
            run
            and run[-1].root_end == segment.root_start
            and sum(s.row_count for s in run) + segment.row_count <= settings.target_rows
            and sum(s.size_bytes for s in run) + segment.size_bytes <= settings.target_bytes
        )
        if not fits:
            close()
        if segment.row_count >= settings.target_rows or segment.size_bytes >= settings.target_bytes:
            continue  # big enough already
        run.append(segment)
    close()
    return targets


@dataclass(frozen=True, slots=True)
class MajorTarget:
    """A major compaction of one time chunk: every visible segment, rewritten into a new major
    version whose segments keep the root numbering (each covers a range of the old roots, so the
    updater still finds a key's segment) and tile ``[0, core)``: until every one is there the
    new version is incomplete and queries keep reading the old one."""

    interval: Interval
    version: str
    """The new major version: the old one extended, so it sorts above it."""
    groups: tuple[CompactionTarget, ...]
    core: int
    """The old root partitions end here; appends to the new version are numbered from here."""

    @property
    def inputs(self) -> tuple[Segment, ...]:
        return tuple(segment for group in self.groups for segment in group.inputs)


def plan_major(
    table: str,
    announced: Iterable[Segment],
    settings: CompactionSettings,
    suffix: str,
    *,
    interval: Interval | None = None,
    skip_newest: int = 0,
) -> list[MajorTarget]:
    """The chunks a major compaction rewrites (those overlapping ``interval`` with at least two
    visible segments), each split into groups of adjacent segments up to the target size.

    >>> day = Interval(0, 86_400_000)
    >>> segs = [Segment(table="t", interval=day, version="v", partition=p, row_count=10)
    ...         for p in (0, 1, 3)]
    >>> [(t.version, t.core, [g.root_range for g in t.groups])
    ...  for t in plan_major("t", segs, CompactionSettings(target_rows=20), "m1")]
    [('v.m1', 4, [(0, 2), (3, 4)])]
    """
    chunks = visible_by_chunk(table, announced)
    ordered = sorted(chunks)
    if skip_newest:
        ordered = ordered[: max(0, len(ordered) - skip_newest)]
    targets: list[MajorTarget] = []
    for chunk in ordered:
        segments = chunks[chunk]
        if (interval is not None and not chunk.overlaps(interval)) or len(segments) < 2:
            continue
        if len({s.version for s in segments}) > 1:
            continue
        groups: list[list[Segment]] = [[]]
        for segment in segments:
            run = groups[-1]
            if run and (
                sum(s.row_count for s in run) + segment.row_count > settings.target_rows
                or sum(s.size_bytes for s in run) + segment.size_bytes > settings.target_bytes
            ):
                groups.append([])
            groups[-1].append(segment)
        targets.append(
            MajorTarget(
                interval=chunk,
                version=f"{segments[0].version}.{suffix}",
                groups=tuple(CompactionTarget(tuple(group)) for group in groups),
                core=max(int(s.root_end) for s in segments),  # type: ignore[arg-type]
            )
        )
    return targets


def tiling(starts: Sequence[int], core: int) -> list[tuple[int, int]]:
    """Root ranges that tile ``[0, core)``, one per start (sorted): each runs to the next start.

    >>> tiling([0, 3, 5], 9)
    [(0, 3), (3, 5), (5, 9)]
    >>> tiling([2, 5], 9)
    [(0, 5), (5, 9)]
    """
    bounds = [0, *starts[1:], core]
    return list(pairwise(bounds))
