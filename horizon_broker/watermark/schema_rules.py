"""Which schema changes a table allows, as pure functions of its current schema.

Three changes keep every stored segment readable without rewriting it and every earlier snapshot's
answer unchanged: adding a nullable column (with an optional default that rows written before read
as), widening a type (``int`` to ``bigint``, ``float`` to ``double``, a decimal's precision up at
the same scale: Spark's Parquet reader widens old files itself) and dropping a column from reads
(files keep it, so snapshots before the drop still read it). Anything else is refused with an
:class:`~horizon_broker._core.errors.InvalidArgument` naming the rule; a change that does not fit
the table's current state (a column that exists, or does not) with a
:class:`~horizon_broker._core.errors.FailedPrecondition`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from horizon_broker._core.errors import FailedPrecondition, InvalidArgument
from horizon_broker.watermark.schema_versions import (
    SchemaColumn,
    SchemaHistory,
    SchemaVersion,
    decimal_parts,
    is_type_word,
    literal_value,
    normalized_type,
)

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_ADD = re.compile(r"^\s*(\S+)\s+(.+?)(?:\s+default\s+(.+?))?\s*$", re.IGNORECASE | re.DOTALL)
_WIDENINGS = {("int", "bigint"), ("float", "double")}
WIDENING_RULE = (
    "a type may only widen: int to bigint, float to double, or decimal(p,s) to decimal(q,s) "
    "with q > p"
)


@dataclass(frozen=True, slots=True)
class AddColumn:
    name: str
    type: str
    default: str | None = None


@dataclass(frozen=True, slots=True)
class WidenColumn:
    name: str
    type: str


@dataclass(frozen=True, slots=True)
class DropColumn:
    name: str


SchemaChange = AddColumn | WidenColumn | DropColumn


@dataclass(frozen=True, slots=True)
class KeyRoles:
    """The columns a table's definition gives a role: none of them may be dropped, and the key
    columns' types are fixed (their hash places keys in partitions)."""

    primary_key: tuple[str, ...] = ()
    others: tuple[str, ...] = ()
    """Comparison, time, delete and transaction columns."""


def parse_add(text: str) -> AddColumn:
    """``"name type [default X]"`` (the CLI's ``--add-column``)."""
    match = _ADD.match(text)
    if not match:
        raise InvalidArgument(f'--add-column {text!r}: write "name type [default X]"')
    name, type_, default = match.group(1), normalized_type(match.group(2)), match.group(3)
    return AddColumn(name, type_, None if default is None else default.strip())


def parse_widen(text: str) -> WidenColumn:
    """``"name newtype"`` (the CLI's ``--widen``)."""
    parts = text.strip().split(None, 1)
    if len(parts) != 2:
        raise InvalidArgument(f'--widen {text!r}: write "name newtype"')
    return WidenColumn(parts[0], normalized_type(parts[1]))


def widens(old: str, new: str) -> bool:
    """Whether ``new`` reads every value of ``old`` exactly (the allowed widenings)."""
    old, new = normalized_type(old), normalized_type(new)
    if (old, new) in _WIDENINGS:
        return True
    before, after = decimal_parts(old), decimal_parts(new)
    if before is None or after is None:
        return False
    return after[1] == before[1] and after[0] > before[0]


def apply_change(
    history: SchemaHistory, change: SchemaChange, roles: KeyRoles, effective: int
) -> SchemaHistory:
    """The history with ``change`` in effect from ``effective``; the history itself when the
    change is already in effect (so applying one twice is harmless)."""
    current = history.current
    if _already_applied(current, change):
        return history
    if isinstance(change, AddColumn):
        columns = _added(history, change)
    elif isinstance(change, WidenColumn):
        columns = _widened(current, change, roles)
    else:
        columns = _dropped(current, change, roles)
    return SchemaHistory((*history.versions, SchemaVersion(effective, columns)))


def _already_applied(current: SchemaVersion, change: SchemaChange) -> bool:
    column = current.column(change.name)
    if isinstance(change, AddColumn):
        return (
            column is not None
            and normalized_type(column.type) == change.type
            and column.default == change.default
        )
    if isinstance(change, WidenColumn):
        return column is not None and normalized_type(column.type) == change.type
    return False


def _added(history: SchemaHistory, change: AddColumn) -> tuple[SchemaColumn, ...]:
    current = history.current
    if not _NAME.match(change.name) or change.name.startswith("_"):
        raise InvalidArgument(
            f"cannot add column {change.name!r}: a column name is letters, digits and "
            "underscores, starting with a letter"
        )
    if current.column(change.name) is not None:
        raise FailedPrecondition(
            f"cannot add column {change.name!r}: the table already has it with another type or "
            "default (a column's type may only widen, see --widen)"
        )
    if history.ever_named(change.name):
        raise FailedPrecondition(
            f"cannot add column {change.name!r}: a dropped column's name is not used again "
            "(snapshots before the drop still read the old column)"
        )
    if not is_type_word(change.type):
        raise InvalidArgument(f"cannot add column {change.name!r}: unknown type {change.type!r}")
    if change.default is not None:
        literal_value(change.default, change.type)
    return (*current.columns, SchemaColumn(change.name, change.type, change.default))


def _widened(
    current: SchemaVersion, change: WidenColumn, roles: KeyRoles
) -> tuple[SchemaColumn, ...]:
    column = _existing(current, change.name, "widen")
    if column.name.lower() in {name.lower() for name in roles.primary_key}:
        raise InvalidArgument(
            f"cannot widen {column.name!r}: a primary-key column's type is fixed (its hash "
            "places keys in partitions)"
        )
    if not widens(column.type, change.type):
        raise InvalidArgument(
            f"cannot change {column.name!r} from {column.type} to {change.type}: {WIDENING_RULE}"
        )
    return tuple(
        SchemaColumn(c.name, change.type, c.default) if c is column else c for c in current.columns
    )


def _dropped(
    current: SchemaVersion, change: DropColumn, roles: KeyRoles
) -> tuple[SchemaColumn, ...]:
    column = _existing(current, change.name, "drop")
    protected = {name.lower() for name in (*roles.primary_key, *roles.others)}
    if column.name.lower() in protected:
        raise InvalidArgument(
            f"cannot drop {column.name!r}: the table's definition uses it (primary key, "
            "comparison, time, delete or transaction column)"
        )
    return tuple(c for c in current.columns if c is not column)


def _existing(current: SchemaVersion, name: str, verb: str) -> SchemaColumn:
    column = current.column(name)
    if column is None:
        raise FailedPrecondition(
            f"cannot {verb} column {name!r}: the table has no such column "
            f"(columns: {', '.join(current.names)})"
        )
    return column


def changes_between(
    current: SchemaVersion, wanted: tuple[tuple[str, str], ...]
) -> tuple[SchemaChange, ...]:
    """The changes that turn ``current`` into a table file's ``[columns]`` (in its order: new
    columns are added, changed types widened, missing columns dropped); applying them checks
    each against the rules."""
    wanted_names = {name.lower() for name, _ in wanted}
    changes: list[SchemaChange] = [
        DropColumn(column.name)
        for column in current.columns
        if column.name.lower() not in wanted_names
    ]
    for name, type_ in wanted:
        column = current.column(name)
        if column is None:
            changes.append(AddColumn(name, normalized_type(type_)))
        elif normalized_type(column.type) != normalized_type(type_):
            changes.append(WidenColumn(column.name, normalized_type(type_)))
    return tuple(changes)


def apply_changes(
    history: SchemaHistory,
    changes: Sequence[SchemaChange],
    roles: KeyRoles,
    effective: int,
) -> SchemaHistory:
    """``changes`` applied in order as ONE new version in effect from ``effective`` (the history
    itself when all are already in effect)."""
    result = history
    for step, change in enumerate(changes):
        result = apply_change(result, change, roles, effective + step)
    if result == history:
        return history
    return SchemaHistory((*history.versions, SchemaVersion(effective, result.current.columns)))
