"""Hybrid logical clock values: ``(physical_ms << 16) | logical``.

Commit timestamps must be totally ordered across servers and still read as wall-clock time, so the
low 16 bits count events inside one millisecond and the rest is the physical time in ms.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

LOGICAL_BITS = 16
LOGICAL_MASK = (1 << LOGICAL_BITS) - 1
MAX_HLC = (1 << 63) - 1


def hlc_from_ms(physical_ms: int, logical: int = 0) -> int:
    """The HLC for a wall-clock millisecond and a logical counter inside it."""
    if physical_ms < 0:
        raise ValueError(f"physical time {physical_ms} ms is negative")
    if not 0 <= logical <= LOGICAL_MASK:
        raise ValueError(f"logical counter {logical} is outside [0, {LOGICAL_MASK}]")
    return (physical_ms << LOGICAL_BITS) | logical


def hlc_physical_ms(hlc: int) -> int:
    return hlc >> LOGICAL_BITS


def hlc_logical(hlc: int) -> int:
    return hlc & LOGICAL_MASK


def last_hlc_of_ms(physical_ms: int) -> int:
    """The largest HLC inside a millisecond: a snapshot there sees every commit of that ms."""
    return hlc_from_ms(physical_ms, LOGICAL_MASK)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class HybridLogicalClock:
    """A strictly increasing HLC source that follows the wall clock and never goes backwards.

    ``observe`` folds in timestamps seen from elsewhere (another server's commits, a checkpoint) so
    the next ``now`` is above them. If more than 65,536 events land in one millisecond the logical
    counter carries into the physical part: values stay unique and increasing.
    """

    def __init__(self, wall_ms: Callable[[], int] = _wall_ms, *, start: int = 0) -> None:
        self._wall_ms = wall_ms
        self._last = start
        self._lock = threading.Lock()

    def now(self) -> int:
        with self._lock:
            self._last = max(self._last + 1, hlc_from_ms(self._wall_ms()))
            return self._last

    def observe(self, hlc: int) -> None:
        with self._lock:
            self._last = max(self._last, hlc)

    @property
    def last(self) -> int:
        """The last value handed out or observed (0 before any)."""
        with self._lock:
            return self._last


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SNAPSHOT_TEXT = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z\+(\d+)$")


def format_snapshot(hlc: int) -> str:
    """A snapshot as people read it: its millisecond in UTC, then ``+`` its logical counter.

    Integers stay in the API and in ``--json``; tables, explain, the demo and pictures show this.

    >>> format_snapshot(hlc_from_ms(1_795_545_850_123, 5))
    '2026-11-24T18:44:10.123Z+5'
    """
    seconds, millis = divmod(hlc_physical_ms(hlc), 1000)
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{millis:03d}Z+{hlc_logical(hlc)}"


def parse_snapshot(text: str) -> int:
    """The HLC :func:`format_snapshot` wrote as ``text``.

    >>> parse_snapshot('2026-11-24T18:44:10.123Z+5') == hlc_from_ms(1_795_545_850_123, 5)
    True
    """
    match = _SNAPSHOT_TEXT.match(text.strip())
    if match is None:
        raise ValueError(f"not a snapshot: {text!r} (expected 2026-11-24T18:44:10.123Z+5)")
    moment = datetime.fromisoformat(match[1]).replace(tzinfo=UTC)
    return hlc_from_ms((moment - _EPOCH) // timedelta(milliseconds=1), int(match[2]))
