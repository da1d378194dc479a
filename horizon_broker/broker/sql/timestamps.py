"""Wall-clock timestamps in SQL (``TIMESTAMP AS OF``, ``table_changes`` bounds) to HLC snapshots.

A timestamp names a millisecond; the snapshot "as of" that millisecond must include every commit
of it, so it is the *last* HLC of that millisecond (:func:`horizon_broker._core.hlc.last_hlc_of_ms`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from horizon_broker._core.hlc import last_hlc_of_ms
from horizon_broker.broker.sql.errors import InvalidSnapshot

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)


def timestamp_to_milliseconds(text: str) -> int:
    """Milliseconds since the epoch of an ISO-8601 timestamp; no zone means UTC (the session's
    zone). Sub-millisecond digits are truncated: they fall inside the named millisecond."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidSnapshot(
            f"invalid timestamp {text!r}: expected ISO-8601 such as '2026-11-21T10:00:00Z'"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    milliseconds = (moment - _EPOCH) // _MILLISECOND
    if milliseconds < 0:
        raise InvalidSnapshot(f"timestamp {text!r} is before 1970-01-01")
    return milliseconds


def timestamp_to_hlc(text: str) -> int:
    """The last HLC of the millisecond ``text`` names."""
    return last_hlc_of_ms(timestamp_to_milliseconds(text))
