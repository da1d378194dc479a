"""The segment: one immutable Parquet file set of one table, and its identity.

A segment's shard fields follow Druid's NumberedShardSpec (first generation: minor version 0, root
range ``[p, p+1)``) and NumberedOverwriteShardSpec (overwrite segments: partition 32768..65535, a root
range covering the first-generation partitions they replace, minor version >= 1).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, NamedTuple, NoReturn

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.timeline.interval import Interval

ROOT_PARTITION_LIMIT = 32_768
"""First-generation partition numbers and root ranges live in ``[0, 32768)``."""
OVERWRITE_PARTITION_LIMIT = 65_536
"""Overwrite segments use partition numbers in ``[32768, 65536)``."""
UNKNOWN_GROUP_SIZE = -1
"""An atomic update group of unknown size is never full."""


class SegmentId(NamedTuple):
    """What identifies a segment: (table, interval, version, partition)."""

    table: str
    interval: Interval
    version: str
    partition: int

    def __str__(self) -> str:
        return f"{self.table}_{self.interval}_{self.version}_{self.partition}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Segment:
    """An immutable segment description, as announced by a server and kept by the timeline.

    ``root_start``/``root_end`` default to ``[partition, partition + 1)``, ``minor_version`` to 0,
    which describes a first-generation segment; overwrite segments must give all of them.
    """

    table: str
    interval: Interval
    version: str
    partition: int
    core_partitions: int = 0
    root_start: int | None = None
    root_end: int | None = None
    minor_version: int = 0
    atomic_update_group_size: int = 1
    location: tuple[str, ...] = ()
    row_count: int = 0
    size_bytes: int = 0
    server: str = ""
    max_valid_from: int | None = None
    """The greatest ``validFrom`` of any row in the segment (None: unknown). A reader may skip
    the ``validFrom <= S`` test on this segment's rows for any snapshot ``S`` at or above it."""
    open_files: tuple[str, ...] = ()
    """The files of ``location`` in which every row's ``validUntil`` is NULL (ingestion writes
    them apart): at a snapshot at or above ``max_valid_from`` all their rows are visible."""
    max_valid_until: int | None = None
    """The greatest ``validUntil`` of the rows in the other files, when every one of those rows
    has one (None: unknown, or some row there is still open). At a snapshot at or above it no row
    of those files is visible."""
    applied_through: int | None = None
    """Every ``validUntil`` update of this segment's rows committed at or below this is in its
    files (None: unknown). Below it, the segment answers exactly as any later rewrite of it; above
    it, a rewrite may have closed versions it still shows open. So a query whose snapshot is at or
    below it may fall back to this segment when the rewrite is unreadable, and no other may."""

    def __post_init__(self) -> None:
        if self.root_start is None:
            object.__setattr__(self, "root_start", self.partition)
        if self.root_end is None:
            object.__setattr__(self, "root_end", self.partition + 1)
        for name in ("location", "open_files"):
            object.__setattr__(self, name, _paths(getattr(self, name)))
        for name in ("max_valid_from", "max_valid_until", "applied_through"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _optional_int(value, name))
        _validate(self)

    @property
    def id(self) -> SegmentId:
        return SegmentId(self.table, self.interval, self.version, self.partition)

    @property
    def root_range(self) -> tuple[int, int]:
        """``[root_start, root_end)``, both set by ``__post_init__`` (None only as arguments)."""
        start, end = self.root_start, self.root_end
        assert start is not None and end is not None
        return (start, end)

    @property
    def fallback_bound(self) -> int | None:
        """The greatest snapshot at which this segment answers as its rewrites would (see
        ``applied_through``); a first-generation segment's rows can only be closed by later
        commits, so its greatest ``validFrom`` will do when nothing better is known."""
        if self.applied_through is not None:
            return self.applied_through
        if self.minor_version == 0 and self.partition < ROOT_PARTITION_LIMIT:
            return self.max_valid_from
        return None

    @property
    def is_overwrite(self) -> bool:
        """True for segments written by an update or minor compaction (minor version >= 1)."""
        return self.minor_version > 0

    def same_shard(self, other: Segment) -> bool:
        """True when ``other`` describes the same chunk: identical id and shard fields.

        Payload fields (location, sizes, server, validity bounds) are ignored, like Druid's chunk
        equality.
        """
        return self is other or (
            self.partition == other.partition
            and self.version == other.version
            and self.interval == other.interval
            and self.table == other.table
            and self.core_partitions == other.core_partitions
            and self.root_start == other.root_start
            and self.root_end == other.root_end
            and self.minor_version == other.minor_version
            and self.atomic_update_group_size == other.atomic_update_group_size
        )

    def shard_key(self) -> tuple[Any, ...]:
        return (
            self.id,
            self.core_partitions,
            self.root_start,
            self.root_end,
            self.minor_version,
            self.atomic_update_group_size,
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict that :meth:`from_dict` turns back into an equal segment.

        The validity bounds and ``open_files`` are written only when known, so descriptions
        without them are unchanged.
        """
        data: dict[str, Any] = {
            "table": self.table,
            "interval": [self.interval.start_ms, self.interval.end_ms],
            "version": self.version,
            "partition": self.partition,
            "core_partitions": self.core_partitions,
            "root_start": self.root_start,
            "root_end": self.root_end,
            "minor_version": self.minor_version,
            "atomic_update_group_size": self.atomic_update_group_size,
            "location": list(self.location),
            "row_count": self.row_count,
            "size_bytes": self.size_bytes,
            "server": self.server,
        }
        if self.max_valid_from is not None:
            data["max_valid_from"] = self.max_valid_from
        if self.open_files:
            data["open_files"] = list(self.open_files)
        if self.max_valid_until is not None:
            data["max_valid_until"] = self.max_valid_until
        if self.applied_through is not None:
            data["applied_through"] = self.applied_through
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Segment:
        try:
            start, end = data["interval"]
            return cls(
                table=data["table"],
                interval=Interval(int(start), int(end)),
                version=data["version"],
                partition=int(data["partition"]),
                core_partitions=int(data.get("core_partitions", 0)),
                root_start=int(data["root_start"]),
                root_end=int(data["root_end"]),
                minor_version=int(data.get("minor_version", 0)),
                atomic_update_group_size=int(data.get("atomic_update_group_size", 1)),
                location=tuple(data.get("location", ())),
                row_count=int(data.get("row_count", 0)),
                size_bytes=int(data.get("size_bytes", 0)),
                server=str(data.get("server", "")),
                max_valid_from=_optional_int(data.get("max_valid_from"), "max_valid_from"),
                open_files=tuple(data.get("open_files", ())),
                max_valid_until=_optional_int(data.get("max_valid_until"), "max_valid_until"),
                applied_through=_optional_int(data.get("applied_through"), "applied_through"),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise InvalidArgument(f"malformed segment description: {error!r}") from None

    def __str__(self) -> str:
        return str(self.id)


def _paths(value: Any) -> tuple[str, ...]:
    """One path or an iterable of paths, as a tuple."""
    return (value,) if isinstance(value, str) else tuple(value)


def _optional_int(value: Any, name: str) -> int | None:
    """``value`` as a plain int (any integer type, numpy's included), or None; a float, string or
    bool is refused, not coerced (a rounded maximum would let a reader skip a test it must make)."""
    if value is None:
        return None
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise InvalidArgument(f"{name} must be an integer, got {value!r}")


def _validate(segment: Segment) -> None:
    """Refuse a segment whose fields cannot describe a stored file (the first rule broken)."""
    _validate_identity(segment)
    _validate_root_range(segment)
    if segment.minor_version == 0:
        _validate_first_generation(segment)
    else:
        _validate_overwrite(segment)
    _validate_sizes_and_files(segment)


def _fail(segment: Segment, reason: str) -> NoReturn:
    raise InvalidArgument(f"invalid segment {segment.id}: {reason}")


def _validate_identity(segment: Segment) -> None:
    if not segment.table:
        _fail(segment, "table name is empty")
    if not isinstance(segment.interval, Interval):
        _fail(
            segment,
            f"interval must be a timeline.Interval, got {type(segment.interval).__name__}",
        )
    if segment.interval.is_empty:
        _fail(segment, "interval is empty")
    if not isinstance(segment.version, str) or not segment.version:
        _fail(segment, "version must be a non-empty string")
    if segment.core_partitions < 0:
        _fail(segment, f"core_partitions {segment.core_partitions} is negative")


def _validate_root_range(segment: Segment) -> None:
    root_start, root_end = segment.root_range
    if not 0 <= root_start < root_end <= ROOT_PARTITION_LIMIT:
        _fail(
            segment,
            f"root range [{root_start}, {root_end}) is not a non-empty range "
            f"inside [0, {ROOT_PARTITION_LIMIT})",
        )
    if segment.minor_version < 0:
        _fail(segment, f"minor_version {segment.minor_version} is negative")


def _validate_first_generation(segment: Segment) -> None:
    """A segment written by ingestion: one root partition, its own group of one."""
    if not 0 <= segment.partition < ROOT_PARTITION_LIMIT:
        _fail(
            segment,
            f"first-generation partition {segment.partition} is outside "
            f"[0, {ROOT_PARTITION_LIMIT})",
        )
    if segment.root_range != (segment.partition, segment.partition + 1):
        _fail(
            segment,
            f"a first-generation segment's root range must be [{segment.partition}, "
            f"{segment.partition + 1}), got [{segment.root_start}, {segment.root_end})",
        )
    if segment.atomic_update_group_size != 1:
        _fail(segment, "a first-generation segment's atomic_update_group_size must be 1")


def _validate_overwrite(segment: Segment) -> None:
    """A segment written by compaction: an overwrite partition, a group of known or unknown size."""
    if not ROOT_PARTITION_LIMIT <= segment.partition < OVERWRITE_PARTITION_LIMIT:
        _fail(
            segment,
            f"overwrite partition {segment.partition} is outside "
            f"[{ROOT_PARTITION_LIMIT}, {OVERWRITE_PARTITION_LIMIT})",
        )
    size = segment.atomic_update_group_size
    if not (size > 0 or size == UNKNOWN_GROUP_SIZE):
        _fail(segment, f"atomic_update_group_size {size} must be > 0 or -1 (unknown)")


def _validate_sizes_and_files(segment: Segment) -> None:
    if segment.row_count < 0 or segment.size_bytes < 0:
        _fail(segment, "row_count and size_bytes must not be negative")
    for name in ("max_valid_from", "max_valid_until"):
        value = getattr(segment, name)
        if value is not None and value < 0:
            _fail(segment, f"{name} {value} is negative (commit timestamps are not)")
    strays = [path for path in segment.open_files if path not in segment.location]
    if strays:
        _fail(segment, f"open file(s) {', '.join(strays)} are not in the segment's location")
