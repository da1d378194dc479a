"""Segments and timing shared by the timeline benchmarks (``bench.timeline`` and its parts)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from horizon_broker.timeline import Interval, Segment

TABLE = "bench"
YEAR_START_MS = 1_293_840_000_000  # 2011-01-01
GRANULARITIES = {"DAY": 86_400_000, "HOUR": 3_600_000, "MINUTE": 60_000}


def first_generation(chunk: Interval, version: str, count: int) -> list[Segment]:
    return [
        Segment(
            table=TABLE,
            interval=chunk,
            version=version,
            partition=partition,
            core_partitions=count,
            size_bytes=1 << 20,
            row_count=1000,
            location=(f"s3://bucket/{TABLE}/{chunk.start_ms}/{version}/{partition}.parquet",),
        )
        for partition in range(count)
    ]


def chunk_at(step_ms: int, index: int) -> Interval:
    start = YEAR_START_MS + index * step_ms
    return Interval(start, start + step_ms)


def timed(action: Callable[[], Any]) -> float:
    """CPU seconds the action took."""
    start = time.process_time()
    action()
    return time.process_time() - start
