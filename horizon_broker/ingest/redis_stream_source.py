"""A table's Redis stream: where it is, what its entries hold, how much a batch takes (pure).

A ``[[tables]]`` entry names a stream instead of a directory::

    stream = "redis://127.0.0.1:6379/0#shop.public.customers"   # <Redis URL>#<stream key>
    format = "debezium"          # each entry holds one Debezium envelope (or "json": one row)
    max_events = 10000           # at most this many entries a batch (backpressure)
    stream_field = "value"       # optional: the entry field holding the event (default below)
    on_stream_trimmed = "stop"   # or "skip": entries trimmed before they were read (see below)

Debezium Server's Redis sink writes one entry per change event to a stream named after the
event's topic (``<topic prefix>.<schema>.<table>``): with ``message.format = compact`` (its
default) one field, the event's key as the field name and its value (the envelope) as the
field's value; with ``extended``, the fields ``key`` and ``value`` (and ``headers``). A tombstone
has no value, so the sink writes its ``null.value`` instead (``"default"`` unless configured).
Without ``stream_field``, an entry's event is its ``value`` field, else its only field (unless
that is ``key``: an extended entry without a value).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.ingest.redis_stream_trim import OnTrimmed

STREAM_FORMATS = ("debezium", "json")
"""What a stream's entries may hold: a Debezium envelope, or one JSON row of the table."""
DEFAULT_MAX_EVENTS = 10_000
SINK_NULL_VALUE = "default"
"""What Debezium Server's Redis sink writes for a null value (a tombstone), by default."""


@dataclass(frozen=True, slots=True)
class StreamSource:
    """A table's Redis stream and how it is read."""

    url: str
    """The Redis server holding the stream, ``redis://host:port/db`` (any redis-py URL)."""
    key: str
    """The stream's key."""
    format: str
    max_events: int = DEFAULT_MAX_EVENTS
    field: str | None = None
    """The entry field holding the event (None: ``value``, else the entry's only field)."""
    null_value: str = SINK_NULL_VALUE
    on_trimmed: OnTrimmed = OnTrimmed.STOP
    """What the table does when entries were trimmed before it read them
    (:mod:`horizon_broker.ingest.redis_stream_trim`)."""

    @property
    def address(self) -> str:
        return f"{self.url}#{self.key}"


def stream_source(
    address: str,
    fmt: str,
    *,
    max_events: int = DEFAULT_MAX_EVENTS,
    field: str | None = None,
    null_value: str = SINK_NULL_VALUE,
    on_trimmed: OnTrimmed | str = OnTrimmed.STOP,
) -> StreamSource:
    """A checked :class:`StreamSource` from ``redis://host:port/db#stream-key``."""
    url, hash_sign, key = address.partition("#")
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix") or not hash_sign or not key:
        raise InvalidArgument(
            f"stream {address!r} is not a Redis stream address: give "
            "redis://host:port/db#stream-key (rediss:// for TLS)"
        )
    if parts.scheme != "unix" and not parts.hostname:
        raise InvalidArgument(f"stream {address!r} names no Redis host")
    if fmt not in STREAM_FORMATS:
        raise InvalidArgument(
            f"a stream's entries are read as format {' or '.join(STREAM_FORMATS)}, not {fmt!r}"
        )
    if max_events < 1:
        raise InvalidArgument(f"max_events must be at least 1, got {max_events}")
    return StreamSource(url, key, fmt, max_events, field, null_value, OnTrimmed(on_trimmed))


def event_text(fields: dict[str, str], source: StreamSource) -> str | None:
    """The event an entry holds (its field's text; ``"null"`` for a sink's tombstone), or None
    when the entry has no such field.

    >>> s = stream_source("redis://h:6379/0#s", "debezium")
    >>> event_text({"key": "{}", "value": "{}"}, s), event_text({'{"id":1}': "default"}, s)
    ('{}', 'null')
    """
    if source.field is not None:
        text = fields.get(source.field)
    elif "value" in fields:
        text = fields["value"]
    elif len(fields) == 1 and "key" not in fields:  # compact: the key names the field
        text = next(iter(fields.values()))
    else:  # an extended entry without its value
        text = None
    if text is None:
        return None
    return "null" if text == source.null_value else text
