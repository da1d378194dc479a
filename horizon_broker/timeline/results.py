"""What the timeline hands out: lookup entries, fully overshadowed chunks and snapshots.

All frozen: callers can keep them after the timeline has moved on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from horizon_broker.timeline.groups import GroupState
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """One piece of a lookup: ``interval`` (clipped to the query for the first and last piece)
    shows the time chunk ``(true_interval, version)`` through its visible ``segments``."""

    interval: Interval
    true_interval: Interval
    version: str
    segments: tuple[Segment, ...]


@dataclass(frozen=True, slots=True)
class OvershadowedChunk:
    """Segments of the time chunk ``(interval, version)`` that no query can see."""

    interval: Interval
    version: str
    segments: tuple[Segment, ...]


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """An atomic update group: its root range, minor version, size, state and segments."""

    root_start: int
    root_end: int
    minor_version: int
    atomic_update_group_size: int
    full: bool
    state: GroupState
    segments: tuple[Segment, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "root_start": self.root_start,
            "root_end": self.root_end,
            "minor_version": self.minor_version,
            "atomic_update_group_size": self.atomic_update_group_size,
            "full": self.full,
            "state": self.state,
            "segments": [str(segment.id) for segment in self.segments],
        }


@dataclass(frozen=True, slots=True)
class ChunkSnapshot:
    """A time chunk: completeness, where each view shows it (empty = nowhere) and its groups."""

    true_interval: Interval
    version: str
    complete: bool
    core_partitions: int
    lookup_pieces: tuple[Interval, ...]
    lookup_with_incomplete_pieces: tuple[Interval, ...]
    groups: tuple[GroupSnapshot, ...]

    @property
    def visible_in_lookup(self) -> bool:
        return bool(self.lookup_pieces)

    @property
    def visible_in_lookup_with_incomplete(self) -> bool:
        return bool(self.lookup_with_incomplete_pieces)

    @property
    def segment_count(self) -> int:
        return sum(len(group.segments) for group in self.groups)

    def to_dict(self) -> dict[str, Any]:
        return {
            "interval": str(self.true_interval),
            "version": self.version,
            "complete": self.complete,
            "core_partitions": self.core_partitions,
            "lookup_pieces": [str(piece) for piece in self.lookup_pieces],
            "lookup_with_incomplete_pieces": [
                str(piece) for piece in self.lookup_with_incomplete_pieces
            ],
            "groups": [group.to_dict() for group in self.groups],
        }


@dataclass(frozen=True, slots=True)
class TimelineSnapshot:
    """A read-only picture of one table's timeline, for the inspection endpoint."""

    table: str
    generation: int
    segment_count: int
    chunks: tuple[ChunkSnapshot, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "generation": self.generation,
            "segment_count": self.segment_count,
            "chunks": [chunk.to_dict() for chunk in self.chunks],
        }
