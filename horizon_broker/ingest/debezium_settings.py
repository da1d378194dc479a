"""The table file's settings for Debezium envelopes (format ``debezium``), and their rules.

Kept apart from :mod:`horizon_broker.ingest.table` (which declares them on the table file) and
from :mod:`horizon_broker.ingest.debezium` (which applies them), so each stays one idea.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field

from horizon_broker._config import Rule


class DebeziumOrder(StrEnum):
    """Which log position of a Debezium event orders a key's versions (format ``debezium``)."""

    LSN = "lsn"
    """Postgres: ``source.lsn``."""
    BINLOG = "binlog"
    """MySQL: ``source.file``, ``source.pos`` and ``source.row``."""
    SCN = "scn"
    """Oracle: ``source.scn``."""
    TS_MS = "ts_ms"
    """When the change was made: ``source.ts_ms`` (else the envelope's ``ts_ms``)."""


def check_debezium_order(
    order: DebeziumOrder | None, comparison: list[str], known: dict[str, str]
) -> None:
    """The log position fills one comparison column of an integral or decimal type (``known``:
    the table's column types by lowered name)."""
    if order is None:
        return
    if len(comparison) != 1:
        raise Rule(
            "debezium_order",
            "the log position fills the table's comparison column: give exactly one "
            f"(comparison = {comparison!r})",
        )
    type_ = known.get(comparison[0].lower(), "").strip().lower()
    integral = () if order is DebeziumOrder.BINLOG else ("bigint", "long")
    if type_ not in integral and not type_.startswith("decimal"):
        raise Rule(
            "debezium_order",
            f"comparison column {comparison[0]!r} holds the {order} position: it must be "
            f"{'bigint or ' if integral else ''}decimal(38,0), not {type_ or 'missing'}",
        )


DEBEZIUM_ORDER = Field(
    None,
    description="Debezium envelopes (format ``debezium``): the event's log position that "
    "fills the table's one comparison column: ``lsn`` (Postgres), ``binlog`` (MySQL's file, "
    "pos and row; a ``decimal(38,0)`` column), ``scn`` (Oracle), ``ts_ms``; unset: the "
    "comparison columns come from the row image.",
)
"""The table file's ``debezium_order`` key (declared here, with the other Debezium keys)."""
MAX_DEAD_LETTERS = Field(
    1000,
    ge=0,
    description="Debezium envelopes: a batch with more malformed events than this fails "
    "(they are dead-lettered to ``<table>/_dead_letters/<server>/`` either way).",
)
ALLOW_TRUNCATE = Field(
    False,
    description="Debezium envelopes: a truncate (``op = t``) ends every current version of the "
    "table at its commit, one transaction (needs ``debezium_order`` and ``transaction_column``); "
    "false: a truncate fails the batch.",
)


def check_debezium_keys(table: Any, known: dict[str, str]) -> None:
    """The Debezium keys of a table file agree with its columns (``known``: their types by
    lowered name): the log position's column, and what a truncate needs."""
    check_debezium_order(table.debezium_order, table.comparison, known)
    if not table.allow_truncate:
        return
    if table.debezium_order is None or table.transaction_column is None:
        raise Rule(
            "allow_truncate",
            "a truncate carries no row image: it needs debezium_order (its log position orders "
            "its deletes after every change before it) and a transaction_column (its deletes "
            "commit together, at one timestamp)",
        )
