"""Debezium envelopes in Avro Object Container Files (Confluent's AvroConverter writer schema:
``connect.name`` names each column's semantic type) become the same rows as their JSON
twins, through the same flattening; a container cut short is a dead letter, not a crash."""

from __future__ import annotations

import base64
import datetime
import io
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pytest

from horizon_broker.ingest.debezium import DeadLetter, EnvelopeSpec, Row, Truncate, gathered
from horizon_broker.ingest.debezium_avro import avro_verdicts, is_avro
from horizon_broker.ingest.job import IngestJob
from tests.ingest.debezium_encoded import SAMPLE_AFTER, SAMPLE_ROW, events_table
from tests.ingest.debezium_events import postgres_event


def _optional(type_: Any) -> dict[str, Any]:
    return {"type": ["null", type_], "default": None}


def _connect(avro: str, name: str, **extra: Any) -> dict[str, Any]:
    return {"type": avro, "connect.version": 1, "connect.name": name, **extra}


VALUE = {
    "type": "record", "name": "Value", "namespace": "shop.public.events",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "day", **_optional(_connect("int", "io.debezium.time.Date"))},
        {"name": "at_ms", **_optional(_connect("long", "io.debezium.time.Timestamp"))},
        {"name": "at_us", **_optional(_connect("long", "io.debezium.time.MicroTimestamp"))},
        {"name": "at_ns", **_optional(_connect("long", "io.debezium.time.NanoTimestamp"))},
        {"name": "zoned", **_optional(_connect("string", "io.debezium.time.ZonedTimestamp"))},
        {"name": "t_ms", **_optional(_connect("int", "io.debezium.time.Time"))},
        {"name": "t_us", **_optional(_connect("long", "io.debezium.time.MicroTime"))},
        {"name": "t_ns", **_optional(_connect("long", "io.debezium.time.NanoTime"))},
        {"name": "price", **_optional(_connect(
            "bytes", "org.apache.kafka.connect.data.Decimal", scale=2, precision=10,
            logicalType="decimal",
            **{"connect.parameters": {"scale": "2", "connect.decimal.precision": "10"}}))},
        {"name": "amount", **_optional({
            "type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data",
            "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
            "connect.doc": "Variable scaled decimal", "connect.version": 1,
            "connect.name": "io.debezium.data.VariableScaleDecimal"})},
    ],
    "connect.name": "shop.public.events.Value",
}  # fmt: skip
ENVELOPE = {
    "type": "record", "name": "Envelope", "namespace": "shop.public.events",
    "fields": [
        {"name": "before", **_optional(VALUE)},
        {"name": "after", **_optional("Value")},
        {"name": "source", "type": {
            "type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
            "fields": [{"name": "lsn", **_optional("long")}, {"name": "txId", **_optional("long")},
                       {"name": "ts_ms", "type": "long"}]}},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", **_optional("long")},
        {"name": "transaction", **_optional({
            "type": "record", "name": "ConnectDefault", "namespace": "io.confluent.connect.avro",
            "fields": [{"name": "id", "type": "string"}, {"name": "total_order", "type": "long"},
                       {"name": "data_collection_order", "type": "long"}]})},
    ],
    "connect.name": "shop.public.events.Envelope",
}  # fmt: skip


def avro_record(op: str, *, lsn: int, tx: int | None = None, **images: Any) -> dict[str, Any]:
    """A Postgres envelope as the AvroConverter writes it: the JSON envelope's fields, with the
    Decimal column as the decimal itself and the VariableScaleDecimal's bytes raw."""
    event = postgres_event(op, lsn=lsn, tx=tx, **images)
    source = event["source"]
    for side in ("before", "after"):
        image = event[side]
        if image is not None:
            event[side] = {**image, "price": Decimal("-1.50"), "amount": {
                "scale": 3, "value": base64.b64decode(image["amount"]["value"])}}  # fmt: skip
    event["source"] = {"lsn": source["lsn"], "txId": source["txId"], "ts_ms": source["ts_ms"]}
    return event


def container(records: list[dict[str, Any]]) -> bytes:
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(ENVELOPE), records)
    return out.getvalue()


def test_an_avro_envelope_becomes_the_same_row_as_its_json_twin() -> None:
    spec = EnvelopeSpec.of(events_table(Path("/tmp/unused"), allow_truncate=True))
    data = container([avro_record("c", lsn=40, tx=5, after=SAMPLE_AFTER),
                      avro_record("t", lsn=50)])  # fmt: skip
    assert is_avro(data) and not is_avro(b'{"op": "c"}')
    row, truncate = [judged for _, judged in avro_verdicts("f.avro", data, spec)]
    assert row == Row(SAMPLE_ROW)
    assert isinstance(truncate, Truncate) and truncate.values["lsn"] == 50


def test_a_container_cut_short_is_a_dead_letter_after_its_readable_records() -> None:
    spec = EnvelopeSpec.of(events_table(Path("/tmp/unused")))
    records = [avro_record("c", lsn=40 + n, after={**SAMPLE_AFTER, "id": n}) for n in range(50)]
    data = container(records)
    flattened = gathered(avro_verdicts("cut.avro", data[: len(data) - 40], spec))
    [letter] = flattened.dead_letters
    assert isinstance(letter, DeadLetter) and "not a readable Avro container" in letter.reason
    assert letter.place.source == "cut.avro"


ROADS = {
    "driver rows": {},
    "driver columns": {"driver_batch_rows": 1},
    "spark": {"driver_batch_rows": 0},
}


@pytest.mark.parametrize("road", sorted(ROADS))
def test_an_avro_changelog_file_is_ingested_like_a_json_one(
    spark: Any, server: Any, tmp_path: Path, road: str
) -> None:
    """An Avro container and a JSON file in one directory pass, on every road (the Spark road
    too): the Avro event's row is stored with its values, and the JSON delete after it ends it.
    Stored timestamps are read back as the UTC instants they are (Spark writes INT96, which
    pyarrow reads without a zone)."""
    import pyarrow.parquet as pq

    table = events_table(tmp_path / "store", **ROADS[road])
    job = IngestJob(spark, table, server("avro")).start()
    changes = tmp_path / "changes"
    changes.mkdir()
    (changes / "001.avro").write_bytes(
        container([avro_record("c", lsn=40, tx=5, after=SAMPLE_AFTER)])
    )
    (changes / "002.json").write_text(json.dumps(postgres_event("d", lsn=41, before={"id": 7})))
    first = job.run_directory(str(changes), "debezium")
    stored = [
        row
        for segment in first.segments
        for location in segment.location
        for row in pq.read_table(
            location.removeprefix("file:"), coerce_int96_timestamp_unit="us"
        ).to_pylist()
    ]
    assert [{name: _utc(row[name]) for name in SAMPLE_ROW} for row in stored] == [SAMPLE_ROW]
    assert stored[0]["validUntil"] is not None  # ended by the JSON delete of the same batch


def _utc(value: Any) -> Any:
    """A stored timestamp (naive, UTC) as the aware instant it is."""
    if isinstance(value, datetime.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=datetime.UTC)
    return value
