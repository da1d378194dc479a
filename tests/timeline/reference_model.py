"""A deliberately simple, from-scratch model of the timeline's declarative rules.

It keeps nothing but the stored segments and recomputes every answer from them on each call, in
the most direct way (elementary intervals, brute-force scans). It is slow on purpose and shares
no code with ``timeline`` beyond the value types. Root ranges are expected to nest (as segment
locking produces them); the property test only generates such families.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise

from horizon_broker.timeline import Interval, Segment, SegmentConflict, SegmentId


@dataclass
class RefGroup:
    root_start: int
    root_end: int
    minor: int
    size: int
    segments: list[Segment] = field(default_factory=list)

    @property
    def rng(self) -> tuple[int, int]:
        return (self.root_start, self.root_end)

    @property
    def full(self) -> bool:
        return self.size > 0 and len(self.segments) == self.size


def _inside(inner: tuple[int, int], outer: tuple[int, int]) -> bool:
    return outer[0] <= inner[0] and inner[1] <= outer[1]


class ReferenceTimeline:
    def __init__(self, table: str) -> None:
        self.table = table
        self.stored: dict[SegmentId, Segment] = {}  # insertion order matters

    # -- changes -----------------------------------------------------------------------------

    def check(self, segment: Segment, pending: dict[SegmentId, Segment]) -> bool:
        """Raise on a conflict with ``pending``; False for an identical duplicate."""
        existing = pending.get(segment.id)
        if existing is not None:
            if existing.same_shard(segment):
                return False
            raise SegmentConflict("same id, other shard fields")
        for other in pending.values():
            if (
                other.version == segment.version
                and other.interval != segment.interval
                and other.interval.overlaps(segment.interval)
            ):
                raise SegmentConflict("same version overlap")
        same_group = [
            other
            for other in pending.values()
            if other.interval == segment.interval
            and other.version == segment.version
            and (other.root_start, other.root_end, other.minor_version)
            == (segment.root_start, segment.root_end, segment.minor_version)
        ]
        if same_group:
            size = same_group[0].atomic_update_group_size
            if size != segment.atomic_update_group_size:
                raise SegmentConflict("group size mismatch")
            if size > 0 and len(same_group) >= size:
                raise SegmentConflict("full group")
        return True

    def add_all(self, segments: list[Segment]) -> int:
        pending = dict(self.stored)
        added = 0
        for segment in segments:
            if self.check(segment, pending):
                pending[segment.id] = segment
                added += 1
        self.stored = pending
        return added

    def remove_id(self, segment_id: SegmentId) -> bool:
        return self.stored.pop(segment_id, None) is not None

    # -- per time chunk ----------------------------------------------------------------------

    def chunks(self) -> dict[tuple[Interval, str], list[Segment]]:
        result: dict[tuple[Interval, str], list[Segment]] = {}
        for segment in self.stored.values():
            result.setdefault((segment.interval, segment.version), []).append(segment)
        return result

    @staticmethod
    def groups(segments: list[Segment]) -> list[RefGroup]:
        groups: dict[tuple[int, int, int], RefGroup] = {}
        for segment in segments:
            key = (segment.root_start, segment.root_end, segment.minor_version)
            if key not in groups:
                groups[key] = RefGroup(*key, segment.atomic_update_group_size)  # type: ignore[arg-type]
            groups[key].segments.append(segment)
        return list(groups.values())

    @classmethod
    def visible_groups(cls, groups: list[RefGroup]) -> list[RefGroup]:
        ranges = {group.rng for group in groups}
        outermost = [rng for rng in ranges if not any(o != rng and _inside(rng, o) for o in ranges)]
        visible: list[RefGroup] = []
        for rng in outermost:
            newest = max((g for g in groups if g.rng == rng), key=lambda g: g.minor)
            if newest.full:
                visible.append(newest)
                continue
            tiling = cls.full_tiling(rng, newest.minor, groups)
            visible.extend(tiling if tiling is not None else [newest])
        return sorted(visible, key=lambda g: g.rng)

    @classmethod
    def full_tiling(
        cls, rng: tuple[int, int], below: int, groups: list[RefGroup]
    ) -> list[RefGroup] | None:
        exact = [g for g in groups if g.rng == rng and g.minor < below and g.full]
        if exact:
            return [max(exact, key=lambda g: g.minor)]
        inner = {g.rng for g in groups if g.rng != rng and _inside(g.rng, rng)}
        children = sorted(r for r in inner if not any(o != r and _inside(r, o) for o in inner))
        position = rng[0]
        tiling: list[RefGroup] = []
        for child in children:
            if child[0] != position:
                return None
            part = cls.full_tiling(child, below, groups)
            if part is None:
                return None
            tiling.extend(part)
            position = child[1]
        return tiling if position == rng[1] and children else None

    @classmethod
    def states(cls, segments: list[Segment]) -> dict[tuple[int, int, int], str]:
        groups = cls.groups(segments)
        visible = cls.visible_groups(groups)
        states = {}
        for group in groups:
            key = (group.root_start, group.root_end, group.minor)
            if any(group is v for v in visible):
                states[key] = "visible"
            elif any(_inside(group.rng, v.rng) and v.minor > group.minor for v in visible):
                states[key] = "overshadowed"
            else:
                states[key] = "standby"
        return states

    @classmethod
    def visible_segments(cls, segments: list[Segment]) -> list[Segment]:
        return [s for g in cls.visible_groups(cls.groups(segments)) for s in g.segments]

    @classmethod
    def complete(cls, segments: list[Segment]) -> bool:
        visible = cls.visible_groups(cls.groups(segments))
        if not visible or not all(g.full for g in visible):
            return False
        core = max(s.core_partitions for s in segments)
        return all(any(g.root_start <= p < g.root_end for g in visible) for p in range(core))

    # -- views -------------------------------------------------------------------------------

    def view(self, complete_only: bool) -> list[tuple[int, int, Interval, str]]:
        """Maximal runs of (start, end, true interval, version) over the whole time line."""
        chunks = self.chunks()
        eligible = [key for key, segs in chunks.items() if not complete_only or self.complete(segs)]
        bounds = sorted({b for interval, _ in chunks for b in (interval.start_ms, interval.end_ms)})
        runs: list[tuple[int, int, Interval, str]] = []
        for low, high in pairwise(bounds):
            covering = [key for key in eligible if key[0].start_ms <= low and high <= key[0].end_ms]
            if not covering:
                continue
            interval, version = max(covering, key=lambda key: key[1])
            if runs and runs[-1][1] == low and runs[-1][2:] == (interval, version):
                runs[-1] = (runs[-1][0], high, interval, version)
            else:
                runs.append((low, high, interval, version))
        return runs

    def lookup(self, interval: Interval, complete_only: bool) -> list[tuple]:
        if interval.is_empty:
            return []
        chunks = self.chunks()
        result = []
        for start, end, true_interval, version in self.view(complete_only):
            if start < interval.end_ms and interval.start_ms < end:
                result.append([start, end, true_interval, version])
        if result:
            result[0][0] = max(result[0][0], interval.start_ms)
            result[-1][1] = min(result[-1][1], interval.end_ms)
        return [
            (
                Interval(start, end),
                true_interval,
                version,
                tuple(s.id for s in self.visible_segments(chunks[(true_interval, version)])),
            )
            for start, end, true_interval, version in result
        ]

    def is_overshadowed(self, segment: Segment) -> bool:
        chunks = self.chunks()
        runs = self.view(complete_only=True)
        interval = segment.interval
        position = interval.start_ms
        for start, end, true_interval, version in runs:
            if end <= interval.start_ms or start >= interval.end_ms:
                continue
            if start > position:
                return False
            if version < segment.version:
                return False
            if version == segment.version:
                visible = self.visible_groups(self.groups(chunks[(true_interval, version)]))
                if not any(
                    _inside((segment.root_start, segment.root_end), v.rng)  # type: ignore[arg-type]
                    and v.minor > segment.minor_version
                    for v in visible
                ):
                    return False
            position = end
        return position >= interval.end_ms

    def state(self, segment: Segment) -> str | None:
        if segment.id not in self.stored:
            return None
        members = self.chunks()[(segment.interval, segment.version)]
        return self.states(members)[
            (segment.root_start, segment.root_end, segment.minor_version)  # type: ignore[index]
        ]

    def fully_overshadowed(self) -> set[tuple[Interval, str, frozenset[SegmentId]]]:
        shown_complete = {(r[2], r[3]) for r in self.view(complete_only=True)}
        shown_incomplete = {(r[2], r[3]) for r in self.view(complete_only=False)}
        result = set()
        for key, segs in self.chunks().items():
            if key not in shown_complete and key not in shown_incomplete:
                result.add((key[0], key[1], frozenset(s.id for s in segs)))
            elif key in shown_incomplete:
                states = self.states(segs)
                hidden = frozenset(
                    s.id
                    for s in segs
                    if states[(s.root_start, s.root_end, s.minor_version)] == "overshadowed"  # type: ignore[index]
                )
                if hidden:
                    result.add((key[0], key[1], hidden))
        return result
