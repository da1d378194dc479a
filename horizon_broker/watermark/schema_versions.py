"""A table's schema over time: every version of its columns and the commit timestamp (HLC) from
which it holds.

A table starts with one version (its registered columns, in effect from the beginning); each
``horizon table alter`` adds one (:mod:`horizon_broker.watermark.schema_rules` says which changes
are allowed). A query at snapshot ``S`` sees the version in effect at ``S``
(:meth:`SchemaHistory.at`), so an answer at a snapshot never changes once given. Segment files
keep whatever columns they were written with; readers read them through
:meth:`SchemaHistory.storage_columns` (every column ever added, under its newest type, with its
default for files written before it existed) and then project the snapshot's version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from horizon_broker._core.errors import InvalidArgument

_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
_ALIASES = {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint"}
_ALIASES |= {"bool": "boolean", "real": "float", "str": "string"}
INTEGRAL_TYPES = frozenset({"tinyint", "smallint", "int", "bigint"})
FRACTIONAL_TYPES = frozenset({"float", "double"})
_TYPE_WORD = re.compile(r"^(?:[a-z]+|decimal\(\d+,\d+\))$")


def normalized_type(text: str) -> str:
    """A Spark type as one spelling: lower case, aliases resolved, no blanks inside decimals."""
    type_ = re.sub(r"\s+", "", text.strip().lower())
    type_ = _ALIASES.get(type_, type_)
    if type_ == "decimal":
        type_ = "decimal(10,0)"
    return type_


def decimal_parts(type_: str) -> tuple[int, int] | None:
    """``(precision, scale)`` of a decimal type, None for any other type."""
    match = _DECIMAL.match(normalized_type(type_))
    return (int(match.group(1)), int(match.group(2))) if match else None


@dataclass(frozen=True, slots=True)
class SchemaColumn:
    """One column of one schema version; ``default`` is a SQL literal (``0``, ``'new'``,
    ``true``) that rows written without the column read as, None for NULL."""

    name: str
    type: str
    default: str | None = None

    def to_list(self) -> list[Any]:
        return (
            [self.name, self.type] if self.default is None else [self.name, self.type, self.default]
        )

    @classmethod
    def from_list(cls, item: list[Any]) -> SchemaColumn:
        return cls(str(item[0]), str(item[1]), None if len(item) < 3 else str(item[2]))


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """The columns a table has from commit timestamp ``effective`` on (0: since it was created)."""

    effective: int
    columns: tuple[SchemaColumn, ...]

    def column(self, name: str) -> SchemaColumn | None:
        lowered = name.lower()
        return next((column for column in self.columns if column.name.lower() == lowered), None)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)

    def to_dict(self) -> dict[str, Any]:
        # An HLC exceeds a double's mantissa: kept as a string so no JSON reader rounds it.
        return {"effective": str(self.effective), "columns": [c.to_list() for c in self.columns]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SchemaVersion:
        columns = tuple(SchemaColumn.from_list(item) for item in data["columns"])
        return cls(int(data["effective"]), columns)


@dataclass(frozen=True, slots=True)
class SchemaHistory:
    """Every schema version of a table, oldest first (the first in effect from 0)."""

    versions: tuple[SchemaVersion, ...]

    def __post_init__(self) -> None:
        if not self.versions or self.versions[0].effective != 0:
            raise InvalidArgument("a schema history starts with a version in effect from 0")
        for earlier, later in zip(self.versions, self.versions[1:], strict=False):
            if later.effective <= earlier.effective:
                raise InvalidArgument("schema versions must take effect in increasing order")

    @classmethod
    def initial(cls, columns: tuple[tuple[str, str], ...]) -> SchemaHistory:
        """The history of a table that never changed: its columns since 0."""
        return cls((SchemaVersion(0, tuple(SchemaColumn(n, t) for n, t in columns)),))

    @property
    def current(self) -> SchemaVersion:
        return self.versions[-1]

    def at(self, snapshot: int) -> SchemaVersion:
        """The version in effect at ``snapshot``: the last that took effect at or before it."""
        found = self.versions[0]
        for version in self.versions[1:]:
            if version.effective > snapshot:
                break
            found = version
        return found

    def storage_columns(self) -> tuple[SchemaColumn, ...]:
        """Every column any version had, in the order they were added, each under its newest
        type and with the default it was added with: how segment files of every version read."""
        order: dict[str, SchemaColumn] = {}
        for version in self.versions:
            for column in version.columns:
                key = column.name.lower()
                known = order.get(key)
                default = column.default if known is None else known.default
                order[key] = SchemaColumn(
                    known.name if known else column.name, column.type, default
                )
        return tuple(order.values())

    def ever_named(self, name: str) -> bool:
        return any(version.column(name) is not None for version in self.versions)

    def when(self, name: str, snapshot: int) -> str:
        """Why ``name`` is not a column at ``snapshot``, for an error message."""
        later = next((v for v in self.versions if v.effective > snapshot and v.column(name)), None)
        if later is not None:
            return f"it is added at {later.effective}"
        dropped = next(
            (
                later.effective
                for earlier, later in zip(self.versions, self.versions[1:], strict=False)
                if later.effective <= snapshot and earlier.column(name) and not later.column(name)
            ),
            None,
        )
        return f"it was dropped at {dropped}" if dropped is not None else "it is not a column"

    def to_list(self) -> list[dict[str, Any]]:
        return [version.to_dict() for version in self.versions]

    @classmethod
    def from_list(cls, items: list[dict[str, Any]]) -> SchemaHistory:
        try:
            return cls(tuple(SchemaVersion.from_dict(item) for item in items))
        except (KeyError, TypeError, ValueError, IndexError) as error:
            raise InvalidArgument(f"malformed schema versions: {error!r}") from None


def default_value(column: SchemaColumn) -> Any:
    """The Python value of a column's default (None without one), for readers outside Spark."""
    return literal_value(column.default, column.type) if column.default is not None else None


def literal_value(text: str, type_: str) -> Any:
    """A SQL literal's value for a column of ``type_``; refuses one that does not fit."""
    type_ = normalized_type(type_)
    raw = text.strip()
    try:
        if type_ in INTEGRAL_TYPES:
            return int(raw)
        if type_ in FRACTIONAL_TYPES:
            return float(raw)
        if decimal_parts(type_) is not None:
            return Decimal(raw)
    except (ValueError, InvalidOperation):
        raise InvalidArgument(f"default {text!r} is not a {type_} literal") from None
    if type_ == "boolean" and raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    if type_ == "string" and len(raw) >= 2 and raw[0] == raw[-1] == "'":
        return raw[1:-1].replace("''", "'")
    raise InvalidArgument(
        f"default {text!r} is not a {type_} literal (defaults are for numeric, decimal, boolean "
        "and string columns; strings in single quotes)"
    )


def is_type_word(type_: str) -> bool:
    """Whether ``type_`` (normalized) is a plain Spark type name or a decimal."""
    return bool(_TYPE_WORD.match(type_))
