"""The arguments of the server scripts that carry many values: SEGMENTS and REPORT.

An announcement (SEGMENTS) tells Redis, besides each segment itself, each added segment names the allocation counter its partition number
advances (first generation or overwrite, per time chunk and version), its chunk's major version
and its root range, so the script keeps the allocations ahead of every announced number and
refuses a publish below a major compaction (:data:`horizon_broker.watermark.scripts.SEGMENTS`).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from horizon_broker._core.errors import InvalidArgument
from horizon_broker._core.keys import chunk_key, interval_key, padded_hlc
from horizon_broker.locks.rules import PublishGuard
from horizon_broker.timeline.segment import OVERWRITE_PARTITION_LIMIT, ROOT_PARTITION_LIMIT, Segment
from horizon_broker.watermark.records import segment_key


def dumps(data: Any) -> str:
    """Compact, sorted JSON: the form events and stored values take."""
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


def allocation_counter(segment: Segment) -> tuple[str, int]:
    """The allocation counter a segment's partition number belongs to, and its first number."""
    kind, base = ("overwrite", ROOT_PARTITION_LIMIT) if segment.is_overwrite else ("first", 0)
    start, end = segment.interval.start_ms, segment.interval.end_ms
    return chunk_key(start, end, segment.version, kind), base


def counter_floors(segments: Iterable[Segment]) -> dict[tuple[str, str], int]:
    """(table, counter) -> the lowest number each allocation counter must stay at for none of
    ``segments``' partition numbers to be handed out again: what announcing them would raise the
    counters to (the SEGMENTS script's rule), without announcing them."""
    floors: dict[tuple[str, str], int] = {}

    def raise_to(table: str, key: str, number: int) -> None:
        floors[(table, key)] = max(floors.get((table, key), 0), number)

    for segment in segments:
        key, _base = allocation_counter(segment)
        raise_to(segment.table, key, segment.partition + 1)
        start, end = segment.interval.start_ms, segment.interval.end_ms
        first = chunk_key(start, end, segment.version, "first")
        raise_to(segment.table, first, int(segment.root_end))  # type: ignore[arg-type]
    return floors


def segment_args(
    added: Sequence[Segment], removed: Sequence[Segment], guard: PublishGuard | None = None
) -> list[str]:
    """ARGV[4:] of the SEGMENTS script for announcing ``added`` and withdrawing ``removed``."""
    event = dumps({"add": [s.to_dict() for s in added], "remove": [s.to_dict() for s in removed]})
    args = [event, str(len(added)), "" if guard is None else guard.to_json()]
    for segment in added:
        key, base = allocation_counter(segment)
        start, end = segment.interval.start_ms, segment.interval.end_ms
        args += [
            segment.table,
            segment_key(segment),
            dumps(segment.to_dict()),
            key,
            str(segment.partition),
            str(base),
            interval_key(start, end),
            segment.version,
            chunk_key(start, end, segment.version, "first"),
            str(segment.root_end),
        ]
    for segment in removed:
        args += [segment.table, segment_key(segment)]
    return args


def report_args(
    table: str, progress: Mapping[int, tuple[int, int]], idle: Collection[int] = ()
) -> list[str]:
    """ARGV[4:] of the REPORT script: per partition its (ingested, applied) and whether it is
    idle. Refuses a partition number or a timestamp out of range."""
    args = [table]
    for partition, (ingested, applied) in sorted(progress.items()):
        check_partition(partition)
        padded_hlc(min(ingested, applied))
        padded_hlc(max(ingested, applied))
        args += [str(partition), str(ingested), str(applied), "1" if partition in idle else ""]
    return args


def check_partition(partition: int) -> None:
    if not isinstance(partition, int) or not 0 <= partition < OVERWRITE_PARTITION_LIMIT:
        raise InvalidArgument(f"partition {partition!r} is not in [0, {OVERWRITE_PARTITION_LIMIT})")
