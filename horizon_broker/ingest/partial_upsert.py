"""Partial upserts: per-column strategies that merge a key's events into its row.

A table with a ``[partial_upsert]`` section treats each record as an *event* that carries some
of the columns. A key's row at a snapshot is the fold of its events committed by then, in
comparison order (ties: commit order), each column merged by its strategy (:class:`Strategy`;
unnamed columns: ``overwrite``). A delete resets the key: the events before it (in comparison
order) no longer count. Folding the whole history again (:func:`fold`) rather than updating a
running row is what makes a late event correct: it lands in its place among the others, and
strategies that depend on order (``overwrite``, ``append``, ``ignore``) see the right order.

An event can leave a column *absent*, which differs from a null: an absent column leaves the row's
value as it is, under every strategy. Only a source that can omit a field says so (a Debezium
``after`` image without the field); in Parquet, CSV and JSON read with the table's schema every
column is present, so a null there is a value: ``overwrite`` writes it, ``overwrite_if_not_null``
keeps the old value, and the other strategies treat it as nothing to add.

This module is the pure core (strategies, their rules, the fold); :mod:`.partial_upsert_batch` is
the shell that applies it to a batch before the batch takes its road.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from horizon_broker._config import Rule

ABSENT = "_absent"
"""A batch row's column naming the columns its source left out (a Debezium ``after`` image
without them); only a partial table's batches have it."""
EVENT_LOG_COLUMNS = ("_base", "_order", ABSENT)
"""The columns the event log keeps beside the user's (reserved column names)."""


class Strategy(StrEnum):
    """How a column's value in an event merges with the key's row."""

    OVERWRITE = "overwrite"
    """The event's value, null included (the default)."""
    OVERWRITE_IF_NOT_NULL = "overwrite_if_not_null"
    """The event's value unless it is null."""
    INCREMENT = "increment"
    """The row's value plus the event's (numbers; a null adds nothing)."""
    APPEND = "append"
    """The row's list followed by the event's (arrays)."""
    UNION = "union"
    """The row's list and the event's elements it lacks, in order of first appearance (arrays)."""
    MAX = "max"
    """The greater of the two (nulls lose)."""
    MIN = "min"
    """The smaller of the two (nulls lose)."""
    IGNORE = "ignore"
    """The first non-null value the key's events gave, kept."""


_NUMERIC = re.compile(r"^(tinyint|byte|smallint|short|int|integer|bigint|long|float|real|double)$")
_DECIMAL = re.compile(r"^decimal\s*\(")
_ARRAY = re.compile(r"^array\s*<")
_UNORDERED = re.compile(r"^(array|map|struct)\s*<|^binary$")


@dataclass(frozen=True, slots=True)
class Event:
    """One record of a key as the fold sees it.

    ``values``: the columns the event carries (an absent one is missing from the mapping);
    ``deleted``: a delete; ``rank``: its place in the fold (comparison value, then commit order).
    """

    values: Mapping[str, Any]
    deleted: bool
    rank: tuple[Any, ...]
    position: int = field(default=0, compare=False)
    """Where the event sits in its batch (for the shell), unused by the fold."""


class PartialTableFile(Protocol):
    """What the rules read of a table file (:class:`horizon_broker.ingest.table.TableFile`)."""

    @property
    def mode(self) -> str: ...
    @property
    def primary_key(self) -> list[str]: ...
    @property
    def comparison(self) -> list[str]: ...
    @property
    def delete_column(self) -> str | None: ...
    @property
    def transaction_column(self) -> str | None: ...
    @property
    def partial_upsert(self) -> Mapping[str, Strategy] | None: ...


def check_partial_upsert(table: PartialTableFile, types: Mapping[str, str]) -> None:
    """A table file's strategies, checked (``types``: its column types by lowered name)."""
    if table.partial_upsert is None:
        return
    fixed = {name.lower(): "primary key" for name in table.primary_key}
    fixed |= {name.lower(): "comparison column" for name in table.comparison}
    for name, role in (
        (table.delete_column, "delete column"),
        (table.transaction_column, "transaction column"),
    ):
        if name is not None:
            fixed[name.lower()] = role
    check_strategies(table.partial_upsert, types=types, upsert=table.mode == "upsert", fixed=fixed)


def strategy_items(
    strategies: Mapping[str, Strategy] | None,
) -> tuple[tuple[str, Strategy], ...] | None:
    """The strategies as the table definition keeps them (None: not a partial table; an empty
    section is one, every column ``overwrite``)."""
    return None if strategies is None else tuple(strategies.items())


def check_strategies(
    strategies: Mapping[str, Strategy],
    *,
    types: Mapping[str, str],
    upsert: bool,
    fixed: Mapping[str, str],
) -> None:
    """Refuse strategies the fold cannot apply, naming the rule (``types``: the column types by
    lowered name; ``fixed``: the lowered names of columns that take no strategy, each with what
    it is, e.g. the primary key)."""
    if not upsert:
        raise Rule(
            "partial_upsert", 'partial upserts merge versions: the table needs mode = "upsert"'
        )
    for name, strategy in strategies.items():
        type_ = types.get(name.lower())
        if type_ is None:
            raise Rule("partial_upsert", f"{name!r} is not a column")
        role = fixed.get(name.lower())
        if role is not None:
            raise Rule(
                "partial_upsert",
                f"{name!r} is the table's {role}, which partial upserts never merge: remove its strategy",
            )
        problem = type_problem(strategy, type_.strip().lower())
        if problem:
            raise Rule("partial_upsert", f"{name!r} ({type_}): {strategy} {problem}")


def type_problem(strategy: Strategy, type_: str) -> str | None:
    """Why ``strategy`` cannot merge values of the Spark type ``type_`` (lowered), if it cannot."""
    if strategy is Strategy.INCREMENT and not (_NUMERIC.match(type_) or _DECIMAL.match(type_)):
        return "adds numbers: the column must be a number type"
    if strategy in (Strategy.APPEND, Strategy.UNION) and not _ARRAY.match(type_):
        return "joins lists: the column must be an array type"
    if strategy in (Strategy.MAX, Strategy.MIN) and _UNORDERED.match(type_):
        return "compares values: the column must be a number, string, date or timestamp"
    return None


def merged_value(strategy: Strategy, current: Any, value: Any) -> Any:
    """A column's value after an event that carries ``value`` for it.

    >>> merged_value(Strategy.INCREMENT, 2, 3), merged_value(Strategy.UNION, [1, 2], [2, 3])
    (5, [1, 2, 3])
    >>> merged_value(Strategy.OVERWRITE, 1, None), merged_value(Strategy.OVERWRITE_IF_NOT_NULL, 1, None)
    (None, 1)
    """
    if strategy is Strategy.OVERWRITE:
        return value
    if value is None:
        return current
    if strategy is Strategy.UNION and current is None:
        current = []  # a first list keeps only the first of its repeated elements too
    if strategy is Strategy.IGNORE or current is None:
        return value if current is None else current
    return _combined(strategy, current, value)


def _combined(strategy: Strategy, current: Any, value: Any) -> Any:
    """Two non-null values merged by a strategy that combines them."""
    if strategy is Strategy.OVERWRITE_IF_NOT_NULL:
        return value
    if strategy is Strategy.INCREMENT:
        return current + value
    if strategy is Strategy.APPEND:
        return [*current, *value]
    if strategy is Strategy.UNION:
        joined = list(current)
        for element in value:
            if element not in joined:
                joined.append(element)
        return joined
    if strategy is Strategy.MAX:
        return max(current, value)
    return min(current, value)


def applied(
    row: dict[str, Any] | None,
    event: Event,
    strategies: Mapping[str, Strategy],
    columns: Sequence[str],
) -> dict[str, Any] | None:
    """The row after one event (None: no row, before the first event or after a delete)."""
    if event.deleted:
        return None
    before = row if row is not None else dict.fromkeys(columns)
    after = dict(before)
    for name, value in event.values.items():
        if name in after:
            strategy = strategies.get(name, Strategy.OVERWRITE)
            after[name] = merged_value(strategy, before[name], value)
    return after


def fold(
    events: Iterable[Event], strategies: Mapping[str, Strategy], columns: Sequence[str]
) -> dict[str, Any] | None:
    """A key's row after ``events``, applied in rank order (None: no row: the last is a delete)."""
    row: dict[str, Any] | None = None
    for event in sorted(events, key=lambda item: item.rank):
        row = applied(row, event, strategies, columns)
    return row


def comparison_rank(values: Mapping[str, Any], comparison: Sequence[str]) -> tuple[Any, ...]:
    """An event's comparison value as a sortable tuple, nulls lowest (as the roads compare)."""
    return tuple((values.get(name) is not None, values.get(name)) for name in comparison)
