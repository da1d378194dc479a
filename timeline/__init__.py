"""The segment timeline: which segments of a table are visible, with Druid's semantics and
Horizon's fixes (see ``shared/spec/timeline.md``). Pure Python, no I/O, no clocks."""

from core.errors import HorizonError, InvalidArgument, SegmentConflict, WrongTable
from timeline.groups import GroupState
from timeline.interval import Interval
from timeline.results import (
    ChunkSnapshot,
    GroupSnapshot,
    OvershadowedChunk,
    TimelineEntry,
    TimelineSnapshot,
)
from timeline.segment import Segment, SegmentId
from timeline.timeline import Timeline

__all__ = [
    "ChunkSnapshot",
    "GroupSnapshot",
    "GroupState",
    "HorizonError",
    "Interval",
    "InvalidArgument",
    "OvershadowedChunk",
    "Segment",
    "SegmentConflict",
    "SegmentId",
    "Timeline",
    "TimelineEntry",
    "TimelineSnapshot",
    "WrongTable",
]
