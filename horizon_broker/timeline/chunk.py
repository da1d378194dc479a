"""One time chunk (true interval, major version) and its partition holder.

While every segment is first-generation the holder is a plain partition map: every segment is
visible and completeness is a counter of present core partitions, so adds and removes cost O(1).
From the first overwrite segment on it keeps atomic update groups and settles their states with
:func:`horizon_broker.timeline.groups.assign_states` after each change of this chunk (never of another one).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator

from horizon_broker._core.errors import SegmentConflict
from horizon_broker.timeline.groups import (
    OVERSHADOWED,
    VISIBLE,
    AtomicUpdateGroup,
    GroupKey,
    GroupState,
    assign_states,
    covers_core,
    group_key,
)
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment


class TimeChunk:
    """The segments of one (true interval, version), their group states and completeness."""

    __slots__ = (
        "_complete",
        "_core",
        "_core_counts",
        "_core_present",
        "_groups",
        "_overwrites",
        "_segments",
        "_visible",
        "_visible_groups",
        "interval",
        "version",
    )

    def __init__(self, interval: Interval, version: str) -> None:
        self.interval = interval
        self.version = version
        self._segments: dict[int, Segment] = {}
        self._core_counts: dict[int, int] | None = None
        self._core = 0
        self._core_present = 0
        self._overwrites = 0
        self._groups: dict[GroupKey, AtomicUpdateGroup] | None = None
        self._visible_groups: list[AtomicUpdateGroup] | None = None
        self._visible: tuple[Segment, ...] | None = None
        self._complete = False

    # -- reading -----------------------------------------------------------------------------

    @property
    def start_ms(self) -> int:
        return self.interval.start_ms

    @property
    def end_ms(self) -> int:
        return self.interval.end_ms

    @property
    def complete(self) -> bool:
        """As of the last :meth:`refresh`."""
        return self._complete

    @property
    def core_partitions(self) -> int:
        return self._core

    @property
    def has_minor_versions(self) -> bool:
        return self._groups is not None

    def __len__(self) -> int:
        return len(self._segments)

    def get(self, partition: int) -> Segment | None:
        return self._segments.get(partition)

    def segments(self) -> Iterator[Segment]:
        """Every stored segment, whatever its state, in insertion order."""
        return iter(self._segments.values())

    def visible_segments(self) -> tuple[Segment, ...]:
        """Visible segments by root range, then insertion order within a group.

        Built by :meth:`refresh` at change time, so lookups only hand the tuple out and create no
        long-lived objects (which would make the garbage collector scan the whole heap)."""
        if self._visible is None:
            self._visible = tuple(segment for _, segment in sorted(self._segments.items()))
        return self._visible

    def state(self, segment: Segment) -> GroupState:
        if self._groups is None:
            return VISIBLE
        return self._groups[group_key(segment)].state

    def groups(self) -> list[AtomicUpdateGroup]:
        """All groups by (root range, minor); first-generation chunks yield one group each."""
        if self._groups is not None:
            return [self._groups[key] for key in sorted(self._groups)]
        result = []
        for partition, segment in sorted(self._segments.items()):
            group = AtomicUpdateGroup(partition, partition + 1, 0, 1)
            group.segments.append(segment)
            group.state = VISIBLE
            result.append(group)
        return result

    def overshadowed_segments(self) -> list[Segment]:
        if self._groups is None:
            return []
        return [
            segment
            for key in sorted(self._groups)
            if self._groups[key].state == OVERSHADOWED
            for segment in self._groups[key].segments
        ]

    def visible_group_overshadows(self, segment: Segment) -> bool:
        """True when a visible group of this chunk has a root range containing the segment's and
        a higher minor version (Druid's same-major overshadow rule)."""
        if self._visible_groups is None:
            return False
        starts = [group.root_start for group in self._visible_groups]
        slot = bisect_right(starts, segment.root_range[0]) - 1
        if slot < 0:
            return False
        group = self._visible_groups[slot]
        return (
            group.root_end >= segment.root_end  # type: ignore[operator]
            and group.minor > segment.minor_version
        )

    # -- changing ----------------------------------------------------------------------------

    def store(self, segment: Segment) -> bool:
        """Store without settling states (call :meth:`refresh` after a batch).

        Returns False for an identical duplicate (the first copy stays); raises
        :class:`SegmentConflict` for a contradicting one, leaving the chunk unchanged.
        """
        partition = segment.partition
        existing = self._segments.get(partition)
        if existing is not None:
            if existing.same_shard(segment):
                return False
            raise SegmentConflict(
                f"segment {segment.id} is already stored with different shard fields "
                f"(stored {_shard_text(existing)}, given {_shard_text(segment)})"
            )
        if self._groups is not None:
            self._check_group(segment)
        self._segments[partition] = segment
        self._count_core(segment, +1)
        if segment.minor_version > 0:
            self._overwrites += 1
            if self._groups is None:
                self._groups = {}
                for stored in self._segments.values():
                    self._join_group(stored)
            else:
                self._join_group(segment)
        elif self._groups is not None:
            self._join_group(segment)
        self._visible = None
        return True

    def unstore(self, segment: Segment) -> None:
        """Remove the stored segment with this partition (the caller checked it is stored)."""
        stored = self._segments.pop(segment.partition)
        self._count_core(stored, -1)
        if self._groups is not None:
            key = group_key(stored)
            group = self._groups[key]
            group.segments = [member for member in group.segments if member is not stored]
            if not group.segments:
                del self._groups[key]
            if stored.minor_version > 0:
                self._overwrites -= 1
                if self._overwrites == 0:
                    self._groups = None
                    self._visible_groups = None
        self._visible = None

    def refresh(self) -> None:
        """Settle group states and completeness after stores and unstores."""
        if self._groups is None:
            self._visible_groups = None
            self._visible = tuple(segment for _, segment in sorted(self._segments.items()))
            self._complete = bool(self._segments) and (
                self._core == 0 or self._core_present == self._core
            )
            return
        visible = assign_states(self._groups.values())
        self._visible_groups = visible
        self._visible = tuple(segment for group in visible for segment in group.segments)
        self._complete = covers_core(visible, self._core)

    # -- helpers -----------------------------------------------------------------------------

    def _check_group(self, segment: Segment) -> None:
        assert self._groups is not None
        group = self._groups.get(group_key(segment))
        if group is None:
            return
        if group.size != segment.atomic_update_group_size:
            raise SegmentConflict(
                f"segment {segment.id} says its atomic update group (root range "
                f"[{segment.root_start}, {segment.root_end}), minor {segment.minor_version}) has "
                f"{segment.atomic_update_group_size} segments, but the stored group has {group.size}"
            )
        if group.full:
            raise SegmentConflict(
                f"segment {segment.id} cannot join the atomic update group (root range "
                f"[{segment.root_start}, {segment.root_end}), minor {segment.minor_version}): it is "
                f"already full with {group.size} segments"
            )

    def _join_group(self, segment: Segment) -> None:
        assert self._groups is not None
        key = group_key(segment)
        group = self._groups.get(key)
        if group is None:
            group = AtomicUpdateGroup(*key, segment.atomic_update_group_size)
            self._groups[key] = group
        group.segments.append(segment)

    def _count_core(self, segment: Segment, delta: int) -> None:
        first_generation = segment.minor_version == 0
        core = segment.core_partitions
        if core:
            counts = self._core_counts
            if counts is None:
                counts = self._core_counts = {}
            remaining = counts.get(core, 0) + delta
            if remaining:
                counts[core] = remaining
            else:
                del counts[core]
            new_core = max(counts) if counts else 0
            if new_core != self._core:
                self._core = new_core
                self._core_present = sum(
                    1
                    for partition, stored in self._segments.items()
                    if stored.minor_version == 0 and partition < new_core
                )
                return
        if first_generation and segment.partition < self._core:
            self._core_present += delta


def _shard_text(segment: Segment) -> str:
    return (
        f"core {segment.core_partitions}, root [{segment.root_start}, {segment.root_end}), "
        f"minor {segment.minor_version}, group size {segment.atomic_update_group_size}"
    )
