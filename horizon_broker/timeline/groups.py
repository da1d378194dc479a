"""Atomic update groups inside one time chunk, and which of them are visible.

Druid's OvershadowableManager moves groups between states with a history-dependent state machine.
Horizon decides the states of one time chunk from its groups alone, with the rules Druid's machine
approximates (and Horizon's Q1 fix), so the answer never depends on the order segments arrived in:

* the ranges not nested in any other group's range are resolved independently;
* for such a range, the group with the highest minor version is visible when it is full;
* otherwise the newest *full tiling* of the range by older full groups is visible (the whole range
  by its newest full group if there is one, else the newest full tilings of its sub-ranges; Q1);
* otherwise the newest group is visible even though incomplete (nothing better exists);
* a group that is not visible is overshadowed when a visible group contains its root range with a
  higher minor version, and standby otherwise (it is newer than what is visible).

The cost is O(g log g) for the g groups of one time chunk, independent of any other time chunk.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from typing import Literal

from horizon_broker.timeline.segment import ROOT_PARTITION_LIMIT, Segment

GroupState = Literal["visible", "standby", "overshadowed"]
VISIBLE: GroupState = "visible"
STANDBY: GroupState = "standby"
OVERSHADOWED: GroupState = "overshadowed"

RootRange = tuple[int, int]
GroupKey = tuple[int, int, int]
"""(root_start, root_end, minor_version): what finds a segment's atomic update group."""


def group_key(segment: Segment) -> GroupKey:
    return (*segment.root_range, segment.minor_version)


class AtomicUpdateGroup:
    """The segments of one time chunk sharing root range, minor version and group size."""

    __slots__ = ("minor", "root_end", "root_start", "segments", "size", "state")

    def __init__(self, root_start: int, root_end: int, minor: int, size: int) -> None:
        self.root_start = root_start
        self.root_end = root_end
        self.minor = minor
        self.size = size
        self.segments: list[Segment] = []
        self.state: GroupState = STANDBY

    @property
    def key(self) -> GroupKey:
        return (self.root_start, self.root_end, self.minor)

    @property
    def root_range(self) -> RootRange:
        return (self.root_start, self.root_end)

    @property
    def full(self) -> bool:
        """A group of unknown size (-1) is never full."""
        return self.size > 0 and len(self.segments) == self.size

    def __repr__(self) -> str:
        return (
            f"AtomicUpdateGroup([{self.root_start},{self.root_end}) minor={self.minor} "
            f"{len(self.segments)}/{self.size} {self.state})"
        )


def assign_states(groups: Iterable[AtomicUpdateGroup]) -> list[AtomicUpdateGroup]:
    """Set every group's state; return the visible groups by root range (they never overlap)."""
    by_range: dict[RootRange, list[AtomicUpdateGroup]] = {}
    for group in groups:
        by_range.setdefault(group.root_range, []).append(group)
    for members in by_range.values():
        members.sort(key=lambda group: group.minor)
    visible = _choose_region(0, ROOT_PARTITION_LIMIT, sorted(by_range), by_range)
    visible.sort(key=lambda group: group.root_range)
    _mark_states(by_range, visible)
    return visible


def covers_core(visible: Sequence[AtomicUpdateGroup], core_partitions: int) -> bool:
    """Q5: complete when the visible groups cover ``[0, core)`` without a gap and all are full."""
    if not visible or not all(group.full for group in visible):
        return False
    reached = 0
    for group in visible:
        if reached >= core_partitions:
            break
        if group.root_start > reached:
            return False
        reached = max(reached, group.root_end)
    return reached >= core_partitions


def _choose_region(
    low: int,
    high: int,
    ranges: list[RootRange],
    by_range: dict[RootRange, list[AtomicUpdateGroup]],
) -> list[AtomicUpdateGroup]:
    """Visible groups for the root region ``[low, high)`` given the (sorted) ranges inside it."""
    if not ranges:
        return []
    outermost = _outermost(ranges)
    # Crossing ranges (not produced by real segment locking) are settled by priority: newest first,
    # then the wider one, then the earlier one; what a chosen range leaves uncovered is resolved
    # again from the ranges that fit in the gaps.
    outermost.sort(key=lambda rng: (-by_range[rng][-1].minor, rng[0] - rng[1], rng[0]))
    claimed: list[RootRange] = []
    claimed_starts: list[int] = []
    for rng in outermost:
        slot = bisect_right(claimed_starts, rng[0])
        before = claimed[slot - 1] if slot else None
        after = claimed[slot] if slot < len(claimed) else None
        if (before and before[1] > rng[0]) or (after and after[0] < rng[1]):
            continue
        claimed.insert(slot, rng)
        claimed_starts.insert(slot, rng[0])
    visible: list[AtomicUpdateGroup] = []
    for rng in claimed:
        visible.extend(_resolve_range(rng, ranges, by_range))
    if len(claimed) < len(outermost):
        gaps = _gaps(low, high, claimed)
        for gap_low, gap_high in gaps:
            inside = [rng for rng in ranges if gap_low <= rng[0] and rng[1] <= gap_high]
            visible.extend(_choose_region(gap_low, gap_high, inside, by_range))
    return visible


def _outermost(ranges: list[RootRange]) -> list[RootRange]:
    """Ranges not strictly inside another; ``ranges`` sorted by (start, end)."""
    ordered = sorted(ranges, key=lambda rng: (rng[0], -rng[1]))
    result: list[RootRange] = []
    reach = -1
    for rng in ordered:
        if rng[1] > reach:
            result.append(rng)
            reach = rng[1]
    return result


def _gaps(low: int, high: int, claimed: list[RootRange]) -> list[RootRange]:
    gaps: list[RootRange] = []
    position = low
    for start, end in claimed:
        if start > position:
            gaps.append((position, start))
        position = max(position, end)
    if position < high:
        gaps.append((position, high))
    return gaps


def _resolve_range(
    rng: RootRange,
    ranges: list[RootRange],
    by_range: dict[RootRange, list[AtomicUpdateGroup]],
) -> list[AtomicUpdateGroup]:
    newest = by_range[rng][-1]
    if newest.full:
        return [newest]
    tiling = _FullTiler(ranges, by_range, newest.minor).tile(rng)
    return tiling if tiling is not None else [newest]


class _FullTiler:
    """Finds the newest exact tiling of a root range by full groups older than a minor bound."""

    def __init__(
        self,
        ranges: list[RootRange],
        by_range: dict[RootRange, list[AtomicUpdateGroup]],
        below_minor: int,
    ) -> None:
        self._by_range = by_range
        self._below = below_minor
        self._ranges = [
            rng for rng in ranges if any(group.full for group in by_range[rng])
        ]  # sorted by (start, end)
        self._starts = [rng[0] for rng in self._ranges]
        self._memo: dict[RootRange, list[AtomicUpdateGroup] | None] = {}

    def tile(self, rng: RootRange) -> list[AtomicUpdateGroup] | None:
        if rng in self._memo:
            return self._memo[rng]
        result = self._exact(rng)
        if result is None:
            result = self._split(rng)
        self._memo[rng] = result
        return result

    def _exact(self, rng: RootRange) -> list[AtomicUpdateGroup] | None:
        for group in reversed(self._by_range.get(rng, ())):
            if group.minor < self._below and group.full:
                return [group]
        return None

    def _split(self, rng: RootRange) -> list[AtomicUpdateGroup] | None:
        low, high = rng
        first = bisect_right(self._starts, low - 1)
        last = bisect_right(self._starts, high - 1)
        by_start: dict[int, list[RootRange]] = {}
        for sub in self._ranges[first:last]:
            if sub[1] <= high and sub != rng:
                by_start.setdefault(sub[0], []).append(sub)
        if low not in by_start:
            return None
        # From the right: at each start, the widest sub-range that tiles and ends where a tiling
        # to the end already starts wins.
        next_step: dict[int, tuple[int, list[AtomicUpdateGroup]]] = {}
        for start in sorted(by_start, reverse=True):
            for sub in reversed(by_start[start]):
                if sub[1] != high and sub[1] not in next_step:
                    continue
                tiles = self.tile(sub)
                if tiles is not None:
                    next_step[start] = (sub[1], tiles)
                    break
        if low not in next_step:
            return None
        result: list[AtomicUpdateGroup] = []
        position = low
        while position < high:
            position, tiles = next_step[position]
            result.extend(tiles)
        return result


def _mark_states(
    by_range: dict[RootRange, list[AtomicUpdateGroup]], visible: list[AtomicUpdateGroup]
) -> None:
    visible_ids = {id(group) for group in visible}
    starts = [group.root_start for group in visible]
    for members in by_range.values():
        for group in members:
            if id(group) in visible_ids:
                group.state = VISIBLE
                continue
            slot = bisect_right(starts, group.root_start) - 1
            holder = visible[slot] if slot >= 0 else None
            if (
                holder is not None
                and holder.root_end >= group.root_end
                and holder.minor > group.minor
            ):
                group.state = OVERSHADOWED
            else:
                group.state = STANDBY
