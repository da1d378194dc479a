"""A Debezium image's values as the Python values of the table's columns (pure).

Debezium encodes temporal and decimal columns by their Kafka Connect *semantic type*, named in
the envelope's ``schema`` block (the JSON converter with ``schemas.enable``) or, for Avro, in the
writer schema's ``connect.name``:

========================================  =========================================  =============
semantic type (``name``)                  encoding                                   fills
========================================  =========================================  =============
``io.debezium.time.Date``                 int32 days since the epoch                 ``date``
``io.debezium.time.Time``                 int32 milliseconds past midnight           ``string``,
``io.debezium.time.MicroTime``            int64 microseconds past midnight           ``bigint`` (1)
``io.debezium.time.NanoTime``             int64 nanoseconds past midnight
``io.debezium.time.Timestamp``            int64 epoch milliseconds (no zone: UTC)    ``timestamp``
``io.debezium.time.MicroTimestamp``       int64 epoch microseconds
``io.debezium.time.NanoTimestamp``        int64 epoch nanoseconds
``io.debezium.time.ZonedTimestamp``       ISO-8601 string with its offset
``org.apache.kafka.connect.data.Decimal`` base64 big-endian two's-complement unscaled  ``decimal``,
                                          bytes, ``parameters.scale``                ``string``
``io.debezium.data.VariableScaleDecimal`` ``{"scale": s, "value": <base64 bytes>}``
========================================  =========================================  =============

(1) a time of day fills a ``string`` column as ``HH:MM:SS.ffffff`` and an integral column as
microseconds past midnight, whichever unit it came in.

Without a schema, the column's type decides: a ``timestamp`` takes epoch milliseconds or an ISO
string, a ``date`` days or an ISO date, a ``decimal`` a number, a numeric string or a
``{scale, value}`` object. Bare base64 bytes without their scale are refused (``"MTA="`` is also
a plausible decimal string only by luck), and so is an integer too large to be epoch
milliseconds (a microsecond or nanosecond timestamp read without its schema). A value that does
not fit the column exactly (a nanosecond a timestamp cannot hold, a scale above the decimal's) is
:class:`Malformed`: dead-lettered with the reason, never stored rounded.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import decimal
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

INTEGRAL_RANGE = {
    "tinyint": 7, "byte": 7, "smallint": 15, "short": 15,
    "int": 31, "integer": 31, "bigint": 63, "long": 63,
}  # fmt: skip
DECIMAL_TYPE = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
_SIMPLE_TYPES = frozenset({"string", "boolean", "double", "float", "real", "timestamp", "date"})
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MAX_EPOCH_MS = 253_402_300_800_000
"""Epoch milliseconds of 10000-01-01: an integer past it is not a millisecond timestamp."""

DATE = "io.debezium.time.Date"
TIME = "io.debezium.time.Time"
MICRO_TIME = "io.debezium.time.MicroTime"
NANO_TIME = "io.debezium.time.NanoTime"
TIMESTAMP = "io.debezium.time.Timestamp"
MICRO_TIMESTAMP = "io.debezium.time.MicroTimestamp"
NANO_TIMESTAMP = "io.debezium.time.NanoTimestamp"
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
_TIME_NANOS = {TIME: 1_000_000, MICRO_TIME: 1_000, NANO_TIME: 1}
_TIMESTAMP_NANOS = {TIMESTAMP: 1_000_000, MICRO_TIMESTAMP: 1_000, NANO_TIMESTAMP: 1}
SEMANTIC_TYPES = frozenset(
    {*_TIME_NANOS, *_TIMESTAMP_NANOS, DATE, ZONED_TIMESTAMP, DECIMAL, VARIABLE_SCALE_DECIMAL}
)


class Malformed(ValueError):
    """Why an event is dead-lettered (caught by :func:`horizon_broker.ingest.debezium.verdict`)."""


@dataclass(frozen=True, slots=True)
class FieldSchema:
    """A column's Connect schema in an envelope: its semantic type and parameters."""

    name: str | None
    """The semantic type (``io.debezium.time.Date``, ...); None: a plain value."""
    parameters: Mapping[str, str] = field(default_factory=dict)


def image_schemas(wrapper: Any) -> dict[str, FieldSchema]:
    """The column schemas of an envelope's row image, from its ``schema`` block (the ``after``
    struct's, else the ``before``'s); empty without a block.

    >>> block = {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": [
    ...     {"field": "d", "type": "int32", "name": "io.debezium.time.Date"}]}]}
    >>> image_schemas({"schema": block, "payload": {}})
    {'d': FieldSchema(name='io.debezium.time.Date', parameters={})}
    """
    if not isinstance(wrapper, dict) or not isinstance(wrapper.get("schema"), dict):
        return {}
    sides = {
        part.get("field"): part
        for part in wrapper["schema"].get("fields") or ()
        if isinstance(part, dict)
    }
    image = sides.get("after") or sides.get("before") or {}
    return {
        column["field"]: FieldSchema(column.get("name"), column.get("parameters") or {})
        for column in image.get("fields") or ()
        if isinstance(column, dict) and isinstance(column.get("field"), str)
    }


def column_value(value: Any, type_: str, name: str, encoding: FieldSchema | None = None) -> Any:
    """An image's value as the Python value of a column of Spark type ``type_``, read by its
    semantic type when ``encoding`` names one (raises :class:`Malformed` naming the column)."""
    semantic = encoding.name if encoding is not None else None
    try:
        if semantic in SEMANTIC_TYPES:
            assert encoding is not None
            return _semantic(value, type_, encoding)
        return _converted(value, type_)
    except (ValueError, TypeError, ArithmeticError, binascii.Error) as error:
        where = f"column {name!r} ({type_}{f', {semantic}' if semantic else ''})"
        raise Malformed(f"{where}: {error}") from None


def supported(type_: str) -> bool:
    """Whether flattening can fill a column of Spark type ``type_``."""
    return (
        type_ in _SIMPLE_TYPES
        or type_ in INTEGRAL_RANGE
        or type_ == "binary"
        or DECIMAL_TYPE.match(type_) is not None
    )


def _semantic(value: Any, type_: str, encoding: FieldSchema) -> Any:
    semantic = encoding.name
    if semantic == DATE and type_ == "date":
        return _EPOCH.date() + datetime.timedelta(days=_expect(value, int))
    if semantic in _TIMESTAMP_NANOS and type_ == "timestamp":
        return _epoch_timestamp(_expect(value, int), _TIMESTAMP_NANOS[semantic])
    if semantic == ZONED_TIMESTAMP and type_ == "timestamp":
        return _iso_timestamp(_expect(value, str))
    if semantic in _TIME_NANOS and (type_ == "string" or type_ in INTEGRAL_RANGE):
        return _time_of_day(_expect(value, int), _TIME_NANOS[semantic], type_)
    if semantic == DECIMAL and (type_ == "string" or DECIMAL_TYPE.match(type_)):
        scale = int(encoding.parameters.get("scale", "0"))
        return _decimal_column(_unscaled(value, scale), type_)
    if semantic == VARIABLE_SCALE_DECIMAL and (type_ == "string" or DECIMAL_TYPE.match(type_)):
        return _decimal_column(_variable_scale(value), type_)
    raise TypeError(f"{semantic} cannot fill a {type_} column")


def _converted(value: Any, type_: str) -> Any:
    if type_ == "string":
        return _expect(value, str)
    if type_ == "boolean":
        return _expect(value, bool)
    if type_ in INTEGRAL_RANGE:
        number = _expect(value, int)
        bits = INTEGRAL_RANGE[type_]
        if not -(2**bits) <= number < 2**bits:
            raise ValueError(f"{number} is out of range")
        return number
    if type_ in ("double", "float", "real"):
        return float(_expect(value, (int, float)))
    if type_ == "timestamp":
        return _timestamp(value)
    if type_ == "date":
        return _date(value)
    if type_ == "binary":
        return _binary(value)
    match = DECIMAL_TYPE.match(type_)
    if match is not None:
        return _fitted(_plain_decimal(value), int(match.group(1)), int(match.group(2)), value)
    raise ValueError(f"type {type_} is not supported")


def _binary(value: Any) -> bytes:
    """Base64 text (JSON), or the bytes themselves (an Avro reader's)."""
    if isinstance(value, bytes):
        return value
    return base64.b64decode(_expect(value, str), validate=True)


def _timestamp(value: Any) -> datetime.datetime:
    """Epoch milliseconds (``io.debezium.time.Timestamp``) or an ISO-8601 string (no zone is
    UTC); an integer too large for milliseconds is refused (a finer unit without its schema)."""
    if isinstance(value, str):
        return _iso_timestamp(value)
    if isinstance(value, datetime.datetime):  # an Avro reader's timestamp-millis / -micros
        return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
    millis = _expect(value, int)
    if abs(millis) >= _MAX_EPOCH_MS:
        raise ValueError(
            f"{millis} is too large for epoch milliseconds (a MicroTimestamp or NanoTimestamp? "
            "without the envelope's schema its unit is unknown: enable schemas in the converter)"
        )
    return _epoch_timestamp(millis, 1_000_000)


def _date(value: Any) -> datetime.date:
    """Days since the epoch (``io.debezium.time.Date``) or an ISO date."""
    if isinstance(value, str):
        return datetime.date.fromisoformat(value)
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value
    return _EPOCH.date() + datetime.timedelta(days=_expect(value, int))


def _epoch_timestamp(count: int, nanos_per_unit: int) -> datetime.datetime:
    """``count`` units since the epoch as a UTC timestamp (microseconds, exactly)."""
    micros, rest = divmod(count * nanos_per_unit, 1_000)
    if rest:
        raise ValueError(f"{count} has nanoseconds a timestamp column (microseconds) cannot hold")
    return _EPOCH + datetime.timedelta(microseconds=micros)


def _iso_timestamp(text: str) -> datetime.datetime:
    parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def _time_of_day(count: int, nanos_per_unit: int, type_: str) -> str | int:
    """A time of day as ``HH:MM:SS.ffffff`` (a string column) or microseconds past midnight."""
    nanos = count * nanos_per_unit
    if not 0 <= nanos <= 86_400 * 10**9:  # 24:00:00 is a valid Postgres time
        raise ValueError(f"{count} is not a time of day")
    micros, rest = divmod(nanos, 1_000)
    if rest:
        raise ValueError(f"{count} has nanoseconds a time of day in microseconds cannot hold")
    if type_ != "string":
        return int(_converted(micros, type_))
    seconds, fraction = divmod(micros, 1_000_000)
    hours, left = divmod(seconds, 3_600)
    return f"{hours:02d}:{left // 60:02d}:{left % 60:02d}.{fraction:06d}"


def _unscaled(value: Any, scale: int) -> decimal.Decimal:
    """Connect's Decimal: base64 big-endian two's-complement bytes of the unscaled value (an
    Avro reader gives the decimal itself, or the raw bytes)."""
    if isinstance(value, decimal.Decimal):
        return value
    raw = (
        value if isinstance(value, bytes) else base64.b64decode(_expect(value, str), validate=True)
    )
    if not raw:
        raise ValueError("an empty byte string is no decimal")
    return decimal.Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale)


def _variable_scale(value: Any) -> decimal.Decimal:
    """Debezium's VariableScaleDecimal: ``{"scale": s, "value": <unscaled bytes>}``."""
    if not isinstance(value, dict) or set(value) != {"scale", "value"}:
        raise TypeError(f"expected a {{scale, value}} object, got {kind_of(value)}")
    return _unscaled(value["value"], _expect(value["scale"], int))


def _plain_decimal(value: Any) -> decimal.Decimal:
    """A decimal column's value without a schema: a number, a numeric string (``decimal
    .handling.mode`` ``string`` or ``double``) or a VariableScaleDecimal object."""
    if isinstance(value, dict):
        return _variable_scale(value)
    if isinstance(value, decimal.Decimal):
        return value
    if isinstance(value, str):
        try:
            return decimal.Decimal(value)
        except decimal.InvalidOperation:
            raise ValueError(
                f"{value!r} is not a number (base64 decimal bytes need the envelope's schema "
                "for their scale: enable schemas in the converter)"
            ) from None
    return decimal.Decimal(str(_expect(value, (int, float))))


def _decimal_column(number: decimal.Decimal, type_: str) -> decimal.Decimal | str:
    if type_ == "string":
        return str(number)
    match = DECIMAL_TYPE.match(type_)
    assert match is not None
    return _fitted(number, int(match.group(1)), int(match.group(2)), number)


def _fitted(number: decimal.Decimal, precision: int, scale: int, value: Any) -> decimal.Decimal:
    """``number`` at the column's scale, exactly (never rounded) and within its precision."""
    if not number.is_finite():
        raise ValueError(f"{value!r} is not a finite number")
    quantized = number.quantize(decimal.Decimal(1).scaleb(-scale))
    if quantized != number or len(quantized.as_tuple().digits) > precision:
        raise ValueError(f"{value!r} does not fit decimal({precision},{scale})")
    return quantized


def _expect(value: Any, kinds: type | tuple[type, ...]) -> Any:
    """``value`` if it is one of ``kinds`` (a bool is not a number)."""
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise TypeError(f"expected {_names(kinds)}, got a boolean")
    if not isinstance(value, kinds):
        raise TypeError(f"expected {_names(kinds)}, got {kind_of(value)}")
    return value


def kind_of(value: Any) -> str:
    """A value and its type, short, for an error message."""
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"[:60]


def _names(kinds: type | tuple[type, ...]) -> str:
    return " or ".join(kind.__name__ for kind in (kinds if isinstance(kinds, tuple) else (kinds,)))
