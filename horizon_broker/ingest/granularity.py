"""Segment granularity: how a row's time maps to the time chunk (segment interval) holding it.

The same mapping runs in two places: as a Spark expression on every row (the chunk start) and in
Python on the driver (the chunk's interval from its start), so both live here together.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.timeline.interval import Interval

_MINUTE = 60_000
_HOUR = 60 * _MINUTE
_DAY = 24 * _HOUR
_WEEK_OFFSET = 4 * _DAY
"""1970-01-05, the first Monday after the epoch: weeks start on Mondays (ISO)."""
ALL_END_MS = 253_402_300_800_000
"""10000-01-01: the end of the single chunk of granularity ALL."""


class Granularity(StrEnum):
    MINUTE = "MINUTE"
    FIVE_MINUTE = "FIVE_MINUTE"
    FIFTEEN_MINUTE = "FIFTEEN_MINUTE"
    HOUR = "HOUR"
    SIX_HOUR = "SIX_HOUR"
    DAY = "DAY"
    WEEK = "WEEK"
    MONTH = "MONTH"
    YEAR = "YEAR"
    ALL = "ALL"

    @classmethod
    def parse(cls, text: str) -> Granularity:
        try:
            return cls(text.strip().upper())
        except ValueError:
            names = ", ".join(member.value for member in cls)
            raise InvalidArgument(
                f"unknown granularity {text!r}: expected one of {names}"
            ) from None


_FIXED_MS: dict[Granularity, int] = {
    Granularity.MINUTE: _MINUTE,
    Granularity.FIVE_MINUTE: 5 * _MINUTE,
    Granularity.FIFTEEN_MINUTE: 15 * _MINUTE,
    Granularity.HOUR: _HOUR,
    Granularity.SIX_HOUR: 6 * _HOUR,
    Granularity.DAY: _DAY,
    Granularity.WEEK: 7 * _DAY,
}


def fixed_width(granularity: Granularity) -> tuple[int, int] | None:
    """``(size, offset)`` in ms of a granularity whose chunks all have one width (a chunk starts
    at ``(t - offset) // size * size + offset``); None for ALL, MONTH and YEAR."""
    if granularity not in _FIXED_MS:
        return None
    return _FIXED_MS[granularity], _WEEK_OFFSET if granularity is Granularity.WEEK else 0


def chunk_start_ms(granularity: Granularity, epoch_ms: int) -> int:
    """The start of the chunk holding ``epoch_ms`` (pure; the Spark expression must agree)."""
    if granularity is Granularity.ALL:
        return 0
    if granularity in _FIXED_MS:
        offset = _WEEK_OFFSET if granularity is Granularity.WEEK else 0
        size = _FIXED_MS[granularity]
        return (epoch_ms - offset) // size * size + offset
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    month = moment.month if granularity is Granularity.MONTH else 1
    return _epoch_ms(datetime(moment.year, month, 1, tzinfo=UTC))


def chunk_interval(granularity: Granularity, start_ms: int) -> Interval:
    """The interval of the chunk starting at ``start_ms``."""
    if granularity is Granularity.ALL:
        return Interval(0, ALL_END_MS)
    if granularity in _FIXED_MS:
        return Interval(start_ms, start_ms + _FIXED_MS[granularity])
    moment = datetime.fromtimestamp(start_ms / 1000, tz=UTC)
    if granularity is Granularity.MONTH:
        year, month = (
            (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
        )
    else:
        year, month = moment.year + 1, 1
    return Interval(start_ms, _epoch_ms(datetime(year, month, 1, tzinfo=UTC)))


def chunks_between(granularity: Granularity, first_ms: int, last_ms: int) -> list[int]:
    """The starts of every chunk holding a time in ``[first_ms, last_ms]``, in order (pure).

    >>> chunks_between(Granularity.DAY, 86_399_999, 86_400_000)
    [0, 86400000]
    """
    starts = [chunk_start_ms(granularity, first_ms)]
    while (end := chunk_interval(granularity, starts[-1]).end_ms) <= last_ms:
        starts.append(end)
    return starts


def spark_chunk_start(granularity: Granularity, epoch_ms: Any) -> Any:
    """A Spark column: the chunk start (epoch ms, bigint) for an epoch-ms bigint column."""
    from pyspark.sql import functions as F

    if granularity is Granularity.ALL:
        return F.lit(0).cast("long")
    if granularity in _FIXED_MS:
        offset = _WEEK_OFFSET if granularity is Granularity.WEEK else 0
        size = _FIXED_MS[granularity]
        shifted = epoch_ms - F.lit(offset)
        return (shifted - F.pmod(shifted, F.lit(size)) + F.lit(offset)).cast("long")
    unit = "MONTH" if granularity is Granularity.MONTH else "YEAR"
    truncated = F.date_trunc(unit, F.timestamp_millis(epoch_ms))
    return F.unix_millis(truncated).cast("long")


def _epoch_ms(moment: datetime) -> int:
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
