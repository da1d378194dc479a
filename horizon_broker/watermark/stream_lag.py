"""How far each Redis-stream table is behind its stream's head, as its servers last counted it.

An ingestion server counts a stream table's lag after every pass (the entries after the table's
offset and the age of the oldest: :mod:`horizon_broker.ingest.redis_stream_read`) and exports it
as Prometheus gauges in its own process. A broker's console shows every table on one page, so
the server also writes the count here, in the state store, where any broker reads it:
``{p}:t:{table}:streamlag`` is a hash server -> JSON ``{"stream", "events", "seconds", "at"}``
(``at``: when it was counted, Unix ms). The key expires :data:`KEEP_S` after its last write, so
a table no server reads any more drops off the page; the console shows each report's age, so a
server that stopped reporting is seen as such before that.

Only the stream's key is kept, never its Redis URL (which may carry a password).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

KEEP_S = 3600
"""A table's reports expire this long after the last one."""


@dataclass(frozen=True, slots=True)
class StreamLag:
    """One server's last count of one table's lag behind its stream."""

    table: str
    server: str
    stream: str
    """The stream's key."""
    events: int
    """Entries after the table's offset (counted up to the reading module's cap)."""
    seconds: float
    """Age of the oldest of them (0: none)."""
    at_ms: int
    """When it was counted (Unix ms)."""

    def encode(self) -> str:
        return json.dumps(
            {
                "stream": self.stream,
                "events": self.events,
                "seconds": self.seconds,
                "at": self.at_ms,
            }
        )


def lag_key(prefix: str, table: str) -> str:
    return f"{prefix}:t:{table}:streamlag"


def decode(table: str, server: str, text: str) -> StreamLag | None:
    """A stored report (None: not one this version writes, skipped)."""
    try:
        data = json.loads(text)
        return StreamLag(
            table, server, str(data["stream"]), int(data["events"]), float(data["seconds"]),
            int(data["at"]),
        )  # fmt: skip
    except (ValueError, KeyError, TypeError):
        return None


def record(redis: Any, prefix: str, lag: StreamLag) -> None:
    """Store ``lag`` as its server's report for its table."""
    key = lag_key(prefix, lag.table)
    pipeline = redis.pipeline(transaction=True)
    pipeline.hset(key, lag.server, lag.encode())
    pipeline.expire(key, KEEP_S)
    pipeline.execute()


def reports(redis: Any, prefix: str, tables: Iterable[str]) -> list[StreamLag]:
    """Every server's last report for each of ``tables``, by table then server."""
    names = sorted(tables)
    pipeline = redis.pipeline(transaction=False)
    for table in names:
        pipeline.hgetall(lag_key(prefix, table))
    found = []
    for table, fields in zip(names, pipeline.execute(), strict=True):
        for server, text in sorted(fields.items()):
            lag = decode(table, _text(server), _text(text))
            if lag is not None:
                found.append(lag)
    return found


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
