"""Debezium change events in the documented shape, for the format ``debezium`` tests.

Postgres and MySQL connectors' envelopes (``before``, ``after``, ``source`` with the log
position, ``op``, ``ts_ms``, ``transaction``), with or without the ``schema``/``payload``
wrapper a JSON converter with schemas enabled writes.
"""

from __future__ import annotations

import json
from typing import Any

from horizon_broker.ingest.table import TableDefinition

TS_MS = 1_700_000_000_000


def postgres_event(
    op: str,
    *,
    lsn: int,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    tx: int | None = None,
    transaction: str | None = None,
) -> dict[str, Any]:
    """A Postgres connector's envelope (``source.lsn``, ``source.txId``)."""
    return {
        "before": before,
        "after": after,
        "source": {
            "version": "2.5.0.Final", "connector": "postgresql", "name": "shop",
            "ts_ms": TS_MS + lsn, "snapshot": "true" if op == "r" else "false",
            "db": "shop", "sequence": json.dumps([None, str(lsn)]), "schema": "public",
            "table": "customers", "txId": tx, "lsn": lsn, "xmin": None,
        },
        "op": op,
        "ts_ms": TS_MS + lsn + 5,
        "transaction": None
        if transaction is None
        else {"id": transaction, "total_order": 1, "data_collection_order": 1},
    }  # fmt: skip


def mysql_event(
    op: str,
    *,
    file: int,
    pos: int,
    row: int = 0,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    gtid: str | None = None,
) -> dict[str, Any]:
    """A MySQL connector's envelope (``source.file``, ``pos``, ``row``; transaction metadata
    carries the GTID as ``transaction.id``)."""
    return {
        "before": before,
        "after": after,
        "source": {
            "version": "2.5.0.Final", "connector": "mysql", "name": "shop",
            "ts_ms": TS_MS + pos, "snapshot": "false", "db": "shop", "table": "customers",
            "server_id": 223344, "gtid": gtid, "file": f"mysql-bin.{file:06d}", "pos": pos,
            "row": row, "thread": 7, "query": None,
        },
        "op": op,
        "ts_ms": TS_MS + pos + 5,
        "transaction": None
        if gtid is None
        else {"id": gtid, "total_order": 1, "data_collection_order": 1},
    }  # fmt: skip


def wrapped(payload: dict[str, Any] | None) -> dict[str, Any]:
    """The envelope as a JSON converter with ``schemas.enable=true`` writes it."""
    return {
        "schema": {"type": "struct", "name": "shop.public.customers.Envelope"},
        "payload": payload,
    }


def lines(events: list[Any]) -> str:
    """A changelog file: one event a line (``None``: a tombstone, written ``null``)."""
    return "".join(json.dumps(event) + "\n" for event in events)


def customers_table(root: Any, *, name: str = "customers", **overrides: Any) -> TableDefinition:
    """A mirrored customers table ordered by the Postgres LSN."""
    data: dict[str, Any] = {
        "name": name,
        "columns": {
            "id": "bigint", "name": "string", "balance": "decimal(10,2)",
            "lsn": "bigint", "deleted": "boolean", "txn": "string",
        },
        "primary_key": ["id"],
        "comparison": ["lsn"],
        "delete_column": "deleted",
        "transaction_column": "txn",
        "debezium_order": "lsn",
        "key_partitions": 2,
        "storage_root": str(root),
    }  # fmt: skip
    data.update(overrides)
    return TableDefinition.from_dict(data)
