"""The segment timeline: which segments of a table are visible, with Druid's semantics and
Horizon's fixes (see ``shared/spec/timeline.md``). Pure Python, no I/O, no clocks."""

from timeline.errors import HorizonError, InvalidArgument
from timeline.interval import Interval
from timeline.segment import Segment, SegmentId

__all__ = ["HorizonError", "Interval", "InvalidArgument", "Segment", "SegmentId"]
