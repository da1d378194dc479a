"""Debezium envelopes whose columns carry Kafka Connect semantic types, in the shape Debezium's
JSON converter writes with ``schemas.enable=true``: the ``schema`` block names each column's
type (``io.debezium.time.*``, ``org.apache.kafka.connect.data.Decimal``,
``io.debezium.data.VariableScaleDecimal``) and the ``payload`` holds the encoded values."""

from __future__ import annotations

import base64
import copy
import datetime
from decimal import Decimal
from typing import Any

from horizon_broker.ingest.table import TableDefinition
from tests.ingest.debezium_events import postgres_event

EVENT_COLUMNS = {
    "id": "bigint", "day": "date", "at_ms": "timestamp", "at_us": "timestamp",
    "at_ns": "timestamp", "zoned": "timestamp", "t_ms": "string", "t_us": "bigint",
    "t_ns": "string", "price": "decimal(10,2)", "amount": "decimal(20,4)", "lsn": "bigint",
    "deleted": "boolean", "txn": "string",
}  # fmt: skip
COLUMN_SCHEMAS: list[dict[str, Any]] = [
    {"type": "int64", "optional": False, "field": "id"},
    {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1,
     "field": "day"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.Timestamp", "version": 1,
     "field": "at_ms"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp",
     "version": 1, "field": "at_us"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.NanoTimestamp",
     "version": 1, "field": "at_ns"},
    {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp",
     "version": 1, "field": "zoned"},
    {"type": "int32", "optional": True, "name": "io.debezium.time.Time", "version": 1,
     "field": "t_ms"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTime", "version": 1,
     "field": "t_us"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.NanoTime", "version": 1,
     "field": "t_ns"},
    {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
     "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "10"},
     "field": "price"},
    {"type": "struct", "optional": True, "name": "io.debezium.data.VariableScaleDecimal",
     "version": 1, "doc": "Variable scaled decimal", "field": "amount",
     "fields": [{"type": "int32", "optional": False, "field": "scale"},
                {"type": "bytes", "optional": False, "field": "value"}]},
]  # fmt: skip


def unscaled(number: int) -> str:
    """Connect's Decimal bytes: the unscaled value, big-endian two's complement, base64."""
    size = (number.bit_length() + 8) // 8
    return base64.b64encode(number.to_bytes(size, "big", signed=True)).decode()


def envelope_schema(columns: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``schema`` block of a Postgres connector's envelope whose row images have
    ``columns``."""
    value = {"type": "struct", "fields": copy.deepcopy(columns), "optional": True,
             "name": "shop.public.events.Value"}  # fmt: skip
    return {
        "type": "struct",
        "fields": [
            {**value, "field": "before"},
            {**copy.deepcopy(value), "field": "after"},
            {"type": "struct", "optional": False, "field": "source",
             "name": "io.debezium.connector.postgresql.Source",
             "fields": [{"type": "int64", "optional": True, "field": "lsn"},
                        {"type": "int64", "optional": True, "field": "txId"}]},
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
        "optional": False,
        "name": "shop.public.events.Envelope",
        "version": 1,
    }  # fmt: skip


def encoded_event(
    op: str, *, lsn: int, after: dict[str, Any] | None = None, **kwargs: Any
) -> dict[str, Any]:
    """A Postgres envelope of the ``events`` table, wrapped with its schema block."""
    return {
        "schema": envelope_schema(COLUMN_SCHEMAS),
        "payload": postgres_event(op, lsn=lsn, after=after, **kwargs),
    }


SAMPLE_AFTER = {
    "id": 7,
    "day": 19_723,  # 2024-01-01
    "at_ms": 1_704_067_200_123,
    "at_us": 1_704_067_200_123_456,
    "at_ns": 1_704_067_200_123_456_000,
    "zoned": "2024-01-01T02:00:00.5+02:00",
    "t_ms": 45_296_789,  # 12:34:56.789
    "t_us": 45_296_789_012,
    "t_ns": 45_296_789_012_000,
    "price": unscaled(-150),  # -1.50
    "amount": {"scale": 3, "value": unscaled(1_234_567)},  # 1234.567
}


UTC = datetime.UTC
SAMPLE_ROW = {
    "id": 7,
    "day": datetime.date(2024, 1, 1),
    "at_ms": datetime.datetime(2024, 1, 1, 0, 0, 0, 123_000, tzinfo=UTC),
    "at_us": datetime.datetime(2024, 1, 1, 0, 0, 0, 123_456, tzinfo=UTC),
    "at_ns": datetime.datetime(2024, 1, 1, 0, 0, 0, 123_456, tzinfo=UTC),
    "zoned": datetime.datetime(2024, 1, 1, 0, 0, 0, 500_000, tzinfo=UTC),
    "t_ms": "12:34:56.789000",
    "t_us": 45_296_789_012,
    "t_ns": "12:34:56.789012",
    "price": Decimal("-1.50"),
    "amount": Decimal("1234.5670"),
    "lsn": 40,
    "deleted": False,
    "txn": "5",
}
"""The row :data:`SAMPLE_AFTER` makes (created at lsn 40 in transaction 5)."""


def events_table(root: Any, **overrides: Any) -> TableDefinition:
    data: dict[str, Any] = {
        "name": "events",
        "columns": EVENT_COLUMNS,
        "primary_key": ["id"],
        "comparison": ["lsn"],
        "delete_column": "deleted",
        "transaction_column": "txn",
        "debezium_order": "lsn",
        "storage_root": str(root),
    }
    data.update(overrides)
    return TableDefinition.from_dict(data)
