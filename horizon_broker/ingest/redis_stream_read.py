"""Reading a Redis stream: entries by id, their events as the table's rows, and the lag.

The one reading path of a stream table, whichever way its batches come: a pass of the server
(``--watch``, ``--once``) reads its entries here on the driver, and a Structured Streaming query
(``--stream``, :mod:`horizon_broker.ingest.redis_stream_spark`) reads them here in its Spark
task; either way the entries are then flattened on the driver by :func:`stream_rows`, once,
before the batch takes its road (driver rows, driver columns or Spark), as Debezium files are.

Entries are read by id (``XRANGE``), never through a consumer group: the table's commit log
holds the offsets (:mod:`horizon_broker.ingest.stream_offsets`). A batch is read from its offset's
own entry (:func:`judged_read`), so entries trimmed after the offset unread are found on the read
itself.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from horizon_broker._core.lua import lua_file
from horizon_broker.ingest import debezium
from horizon_broker.ingest.debezium import (
    DeadLetter,
    EnvelopeSpec,
    Flattened,
    Malformed,
    Place,
    Row,
    Verdict,
)
from horizon_broker.ingest.redis_stream_source import StreamSource, event_text
from horizon_broker.ingest.redis_stream_trim import StreamPosition, read_position
from horizon_broker.ingest.stream_offsets import entry_ms
from horizon_broker.ingest.table import TableDefinition

LAG_COUNT_CAP = 1_000_000
"""Entries counted behind a table at most (the count runs in Redis, see :func:`lag`)."""
_COUNT_AFTER = lua_file(__package__, "count_after")


@dataclass(frozen=True, slots=True)
class Entry:
    """One stream entry: its id and its fields."""

    id: str
    fields: dict[str, str]


@dataclass(frozen=True, slots=True)
class Lag:
    """How far a table is behind its stream's head."""

    events: int
    """Entries after the table's offset (at most :data:`LAG_COUNT_CAP`)."""
    seconds: float
    """How long the oldest of them has waited (from its id's time to now; 0: none)."""


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def read_entries(
    client: Any, key: str, after: str | None, through: str | None, count: int | None
) -> list[Entry]:
    """At most ``count`` (None: every) entries of stream ``key`` after ``after`` (None: from
    its first) and through ``through`` (None: up to its head), in stream order."""
    low = "-" if after is None else f"({after}"
    high = "+" if through is None else through
    reply = client.xrange(key, min=low, max=high, count=count)
    return [
        Entry(_text(entry_id), {_text(k): _text(v) for k, v in fields.items()})
        for entry_id, fields in reply
    ]


def judged_read(
    client: Any, key: str, after: str | None, through: str | None, count: int | None
) -> tuple[list[Entry], StreamPosition]:
    """The entries :func:`read_entries` reads, and where ``after`` stood in the stream as they
    were read (one script: the read starts at ``after``'s own entry), for a trim check that no
    producer's trim can slip past (:mod:`horizon_broker.ingest.redis_stream_trim`)."""
    position, entries = read_position(client, key, after, through, count, LAG_COUNT_CAP)
    return [Entry(entry_id, fields) for entry_id, fields in entries], position


def head(client: Any, key: str) -> str | None:
    """The id of the stream's newest entry (None: empty or no such stream)."""
    reply = client.xrevrange(key, max="+", min="-", count=1)
    return _text(reply[0][0]) if reply else None


def lag(client: Any, key: str, offset: str | None, now_ms: int) -> Lag:
    """The entries after ``offset`` (counted in Redis, nothing sent back but the count) and
    the age of the oldest."""
    low = "-" if offset is None else f"({offset}"
    count, first = client.eval(_COUNT_AFTER, 1, key, low, LAG_COUNT_CAP)
    if not count:
        return Lag(0, 0.0)
    return Lag(int(count), max(0.0, (now_ms - entry_ms(_text(first))) / 1000))


def stream_rows(
    entries: Sequence[Entry], source: StreamSource, table: TableDefinition, batch_name: str
) -> Flattened:
    """The entries' events as the table's rows, in stream order, each row's source the batch's
    name (one source, so the rows take their commit timestamps in stream order); malformed
    events and entries without an event are dead letters placed at their entry id."""
    spec = EnvelopeSpec.of(table)
    return debezium.gathered(
        (batch_name, entry_verdict(Place(entry.id, index), entry, source, spec))
        for index, entry in enumerate(entries)
    )


def entry_verdict(place: Place, entry: Entry, source: StreamSource, spec: EnvelopeSpec) -> Verdict:
    """What one entry is: a row, a tombstone or a truncate (Debezium), or a dead letter (a
    truncate the table does not allow raises
    :class:`horizon_broker.ingest.debezium.TruncateRefused`)."""
    text = event_text(entry.fields, source)
    if text is None:
        wanted = source.field or "value"
        fields = ", ".join(sorted(entry.fields)) or "none"
        return DeadLetter(place, f"the entry has no {wanted!r} field (it has: {fields})", "")
    if source.format == debezium.FORMAT:
        return debezium.verdict(place, text, spec)
    return json_row(place, text, spec)


def json_row(place: Place, text: str, spec: EnvelopeSpec) -> Row | DeadLetter:
    """One JSON object of the table's columns as a row (a column missing is null, and absent
    for a partial-upsert table's merge; a key column missing or a value of the wrong type makes
    a dead letter)."""
    try:
        value = json.loads(text)
    except ValueError as error:
        return DeadLetter(place, f"not JSON: {error}", text)
    if not isinstance(value, dict):
        return DeadLetter(place, f"a row is a JSON object, not {type(value).__name__}", text)
    missing = [name for name in spec.primary_key if value.get(name) is None]
    if missing:
        return DeadLetter(place, f"key column {missing[0]!r} is missing", text)
    try:
        row = {
            name: None
            if value.get(name) is None
            else debezium.column_value(value[name], kind, name)
            for name, kind in spec.columns
        }
    except Malformed as error:
        return DeadLetter(place, str(error), text)
    return Row(row, frozenset(name for name, _ in spec.columns if name not in value))


def dead_letter_line(letter: DeadLetter, source: StreamSource) -> str:
    """One line of a stream's dead-letter file: the stream, the entry id, why, the event."""
    return json.dumps(
        {
            "stream": source.address,
            "entry": letter.place.source,
            "reason": letter.reason,
            "event": letter.text,
        }
    )
