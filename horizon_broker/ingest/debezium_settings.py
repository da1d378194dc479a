"""The table file's settings for Debezium envelopes (format ``debezium``), and their rules.

Kept apart from :mod:`horizon_broker.ingest.table` (which declares them on the table file) and
from :mod:`horizon_broker.ingest.debezium` (which applies them), so each stays one idea.
"""

from __future__ import annotations

from enum import StrEnum

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
