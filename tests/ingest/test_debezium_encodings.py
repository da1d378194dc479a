"""Debezium's temporal and decimal encodings read into the table's column types (pure: no
Spark): driven by the envelope's schema block when there, else by the column's type, and every
encoding that does not fit exactly dead-lettered with its reason."""

from __future__ import annotations

import copy
import datetime
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from horizon_broker.ingest.debezium import DeadLetter, EnvelopeSpec, Place, Row, verdict
from tests.ingest.debezium_encoded import (
    SAMPLE_AFTER,
    SAMPLE_ROW,
    encoded_event,
    events_table,
    unscaled,
)
from tests.ingest.debezium_events import postgres_event

HERE = Place("changes/encoded.json", 3)
UTC = datetime.UTC


def spec() -> EnvelopeSpec:
    return EnvelopeSpec.of(events_table(Path("/tmp/unused")))


def judge(event: Any) -> Any:
    return verdict(HERE, json.dumps(event), spec())


def test_every_temporal_and_decimal_encoding_the_schema_names_becomes_the_column_value() -> None:
    got = judge(encoded_event("c", lsn=40, after=SAMPLE_AFTER, tx=5))
    assert isinstance(got, Row)
    assert got.values == SAMPLE_ROW


def test_without_a_schema_the_column_type_reads_the_value() -> None:
    after = {"id": 7, "day": 19_723, "at_ms": 1_704_067_200_123, "at_us": "2024-01-01T00:00:00Z",
             "amount": {"scale": 1, "value": unscaled(-5)}, "price": "3.10"}  # fmt: skip
    got = judge(postgres_event("c", lsn=40, after=after))
    assert isinstance(got, Row)
    assert got.values["day"] == datetime.date(2024, 1, 1)
    assert got.values["at_ms"] == datetime.datetime(2024, 1, 1, 0, 0, 0, 123_000, tzinfo=UTC)
    assert got.values["at_us"] == datetime.datetime(2024, 1, 1, tzinfo=UTC)
    assert (got.values["amount"], got.values["price"]) == (Decimal("-0.5000"), Decimal("3.10"))


def _with(column: str, value: Any, schema_change: dict[str, Any] | None = None) -> Any:
    event = encoded_event("c", lsn=40, after={**SAMPLE_AFTER, column: value})
    if schema_change is not None:
        for side in event["schema"]["fields"][:2]:
            for field in side["fields"]:
                if field["field"] == column:
                    field.update(schema_change)
    return event


WRONG_ENCODINGS = {
    "a nanosecond a timestamp cannot hold": (
        _with("at_ns", 1_704_067_200_123_456_789), "nanoseconds a timestamp column"),
    "a decimal with more scale than the column": (
        _with("price", unscaled(-155), {"parameters": {"scale": "3"}}),
        "does not fit decimal(10,2)"),
    "decimal bytes that are not base64": (_with("price", "not base64!"), "'price'"),
    "a date encoding in a timestamp column": (
        _with("at_ms", 19_723, {"name": "io.debezium.time.Date"}),
        "io.debezium.time.Date cannot fill a timestamp column"),
    "a variable scale decimal without its scale": (
        _with("amount", {"value": unscaled(5)}), "expected a {scale, value} object"),
    "a time of day past midnight": (_with("t_ms", 90_000_000), "is not a time of day"),
    "a zoned timestamp that is a number": (_with("zoned", 5), "expected str"),
    "microseconds read as milliseconds without a schema": (
        postgres_event("c", lsn=4, after={"id": 7, "at_ms": 1_704_067_200_123_456}),
        "too large for epoch milliseconds"),
    "decimal bytes without the schema giving their scale": (
        postgres_event("c", lsn=4, after={"id": 7, "price": "AJY="}),
        "base64 decimal bytes need the envelope's schema"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(WRONG_ENCODINGS))
def test_an_encoding_that_does_not_fit_the_column_is_a_dead_letter_naming_why(case: str) -> None:
    event, reason = WRONG_ENCODINGS[case]
    got = judge(copy.deepcopy(event))
    assert isinstance(got, DeadLetter), got
    assert reason in got.reason
    assert got.place == HERE
