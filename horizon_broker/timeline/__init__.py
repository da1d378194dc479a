"""The segment timeline: which segments of a table are visible, with Druid's semantics and
Horizon's fixes (see ``docs/design/contract/timeline.md``). Pure Python, no I/O, no clocks."""

from horizon_broker._core.errors import HorizonError, InvalidArgument, SegmentConflict, WrongTable
from horizon_broker.timeline.groups import GroupState
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.results import (
    ChunkSnapshot,
    GroupSnapshot,
    OvershadowedChunk,
    TimelineEntry,
    TimelineSnapshot,
)
from horizon_broker.timeline.segment import Segment, SegmentId
from horizon_broker.timeline.timeline import Timeline

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
