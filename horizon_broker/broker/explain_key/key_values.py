"""A key as a person writes it, read against a table's primary key (pure).

One key column: the value itself (``42``, ``alice``, or JSON such as ``"42"``). Any key: a JSON
object naming every key column (``{"region": "eu", "id": 7}``) or a JSON list of the values in
primary-key order (``["eu", 7]``). Each value must fit its column's Spark SQL type; a value
that does not is refused naming the column and the type it needs.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from horizon_broker._core.errors import InvalidArgument

KeyValue = str | int | float | bool | decimal.Decimal | dt.date | dt.datetime
_INTEGERS = {"tinyint", "byte", "smallint", "short", "int", "integer", "bigint", "long"}
_FLOATS = {"float", "real", "double"}
_STRINGS = ("string", "varchar", "char")
_DECIMAL = re.compile(r"^decimal(\(\s*\d+\s*(,\s*\d+\s*)?\))?$")


def parse_key(
    text: str, primary_key: Sequence[str], types: Sequence[str]
) -> tuple[tuple[str, KeyValue], ...]:
    """``((column, value), ...)`` in primary-key order for the key ``text``."""
    if not text.strip():
        raise InvalidArgument(f"the key is empty: give a value for {', '.join(primary_key)}")
    decoded = _json_or_none(text)
    if isinstance(decoded, dict):
        return _from_object(decoded, primary_key, types)
    if isinstance(decoded, list):
        if len(decoded) != len(primary_key):
            raise InvalidArgument(
                f"the key lists {len(decoded)} value(s); the primary key has "
                f"{len(primary_key)}: {', '.join(primary_key)}"
            )
        return tuple(
            (column, _value(column, kind, item))
            for column, kind, item in zip(primary_key, types, decoded, strict=True)
        )
    if len(primary_key) != 1:
        raise InvalidArgument(
            f"the primary key has {len(primary_key)} columns ({', '.join(primary_key)}): give "
            'the key as a JSON object ({"column": value, ...}) or a JSON list in that order'
        )
    column, kind = primary_key[0], types[0]
    if decoded is None or (_is_string(kind) and not isinstance(decoded, str)):
        return ((column, _from_text(column, kind, text.strip())),)
    return ((column, _value(column, kind, decoded)),)


def _json_or_none(text: str) -> object:
    try:
        decoded: object = json.loads(text)
    except ValueError:
        return None
    return decoded


def _from_object(
    decoded: dict[str, object], primary_key: Sequence[str], types: Sequence[str]
) -> tuple[tuple[str, KeyValue], ...]:
    given = {name.lower(): value for name, value in decoded.items()}
    wanted = {column.lower() for column in primary_key}
    unknown = sorted(set(given) - wanted)
    missing = [column for column in primary_key if column.lower() not in given]
    if unknown or missing:
        problems = []
        if missing:
            problems.append(f"missing {', '.join(missing)}")
        if unknown:
            problems.append(f"not key columns: {', '.join(unknown)}")
        raise InvalidArgument(
            f"the key must name exactly the primary key columns ({', '.join(primary_key)}): "
            + "; ".join(problems)
        )
    return tuple(
        (column, _value(column, kind, given[column.lower()]))
        for column, kind in zip(primary_key, types, strict=True)
    )


def _is_string(kind: str) -> bool:
    return kind.lower().startswith(_STRINGS)


def _refuse(column: str, kind: str, value: object, needs: str) -> InvalidArgument:
    return InvalidArgument(f"key column {column} is {kind}: {value!r} is not {needs}")


def _family(kind: str) -> str:
    """The kind of JSON value a column of Spark SQL type ``kind`` takes."""
    lowered = kind.lower()
    if lowered in _INTEGERS:
        return "integer"
    if lowered in _FLOATS:
        return "number"
    if _DECIMAL.match(lowered):
        return "decimal number"
    if lowered == "boolean":
        return "boolean"
    if _is_string(lowered):
        return "string"
    return ""


_FROM_JSON: dict[str, tuple[str, Callable[[object], bool], Callable[[Any], KeyValue]]] = {
    "integer": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool), int),
    "number": ("a number", lambda v: isinstance(v, int | float) and not isinstance(v, bool), float),
    "decimal number": (
        "a decimal number",
        lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        lambda v: decimal.Decimal(str(v)),
    ),
    "boolean": ("true or false", lambda v: isinstance(v, bool), bool),
}


def _value(column: str, kind: str, value: object) -> KeyValue:
    """A decoded JSON value as the Python value of ``kind``."""
    if value is None:
        raise InvalidArgument(f"key column {column} ({kind}) cannot be null: keys never are")
    if isinstance(value, str):
        return _from_text(column, kind, value)
    family = _family(kind)
    if family == "string":
        raise _refuse(column, kind, value, "a string (quote it)")
    if family not in _FROM_JSON:
        raise _refuse(column, kind, value, f"a {kind} written as a string")
    needs, accepts, convert = _FROM_JSON[family]
    if not accepts(value):
        raise _refuse(column, kind, value, needs)
    return convert(value)


def _from_text(column: str, kind: str, text: str) -> KeyValue:
    """A value written as text, read as ``kind``."""
    lowered = kind.lower()
    try:
        if _is_string(lowered):
            return text
        if lowered in _INTEGERS:
            return int(text)
        if lowered in _FLOATS:
            return float(text)
        if _DECIMAL.match(lowered):
            return decimal.Decimal(text)
        if lowered == "boolean":
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        if lowered == "date":
            return dt.date.fromisoformat(text)
        if lowered.startswith("timestamp"):
            return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (ValueError, decimal.InvalidOperation):
        raise _refuse(column, kind, text, f"a {kind} value") from None
    raise InvalidArgument(f"key column {column} is {kind}: keys of that type cannot be explained")
