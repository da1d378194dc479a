"""Debezium envelopes in Avro Object Container Files, flattened as the JSON ones are.

Debezium with Confluent's ``AvroConverter`` writes each envelope as an Avro record whose writer
schema names the Connect semantic type of every column (``connect.name``, with
``connect.parameters``): the same names the JSON converter's ``schema`` block carries. A file of
such records (an Object Container File: the writer schema in its header, then the records; what
an S3 sink with ``format.class = AvroFormat`` writes) is read here with fastavro, each record
judged by :func:`horizon_broker.ingest.debezium.envelope_verdict` with the column encodings read
from the writer schema, so an Avro event and a JSON one become the same row (fastavro decodes an
Avro ``decimal`` logical type itself; the conversion takes the decimal or its bytes).

A changelog file of format ``debezium`` is read as Avro when it starts with the container's
magic bytes (``Obj\\x01``), else as JSON lines. A file that breaks off mid-way (a truncated
upload) is one dead letter at the first record that could not be read; the records before it
are rows.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Mapping
from typing import Any

from horizon_broker.ingest.debezium import (
    DeadLetter,
    EnvelopeSpec,
    Place,
    Verdict,
    envelope_verdict,
)
from horizon_broker.ingest.debezium_values import FieldSchema

MAGIC = b"Obj\x01"
"""The first bytes of an Avro Object Container File."""


def is_avro(data: bytes) -> bool:
    return data.startswith(MAGIC)


def avro_verdicts(path: str, data: bytes, spec: EnvelopeSpec) -> Iterator[tuple[str, Verdict]]:
    """Each record of the container ``data`` (read from ``path``) judged, in order, with its
    source (``path``): rows, tombstones, truncates and dead letters."""
    import fastavro

    number = 0
    try:
        reader = fastavro.reader(io.BytesIO(data))
        schemas = image_schemas(reader.writer_schema)
        for number, record in enumerate(reader, 1):
            text = json.dumps(record, default=str)
            yield path, envelope_verdict(Place(path, number), record, text, spec, schemas)
    except (ValueError, EOFError, OSError, StopIteration) as error:  # a corrupt or cut file
        place = Place(path, number + 1)
        yield path, DeadLetter(place, f"not a readable Avro container from here: {error}", "")


def image_schemas(writer_schema: Any) -> dict[str, FieldSchema]:
    """The column encodings of an envelope's row image from its Avro writer schema: each field
    of the ``after`` record (else ``before``) with its ``connect.name`` and
    ``connect.parameters`` (an Avro ``decimal`` without them is decoded by fastavro itself).

    >>> value = {"type": "record", "name": "Value", "fields": [{"name": "d", "type": ["null",
    ...     {"type": "int", "connect.name": "io.debezium.time.Date"}]}]}
    >>> image_schemas({"type": "record", "name": "Envelope", "fields": [
    ...     {"name": "before", "type": ["null", value]}, {"name": "after", "type": ["null", "Value"]}]})
    {'d': FieldSchema(name='io.debezium.time.Date', parameters={})}
    """
    named = dict(_named_records(writer_schema))
    sides = {
        field["name"]: _record(field["type"], named)
        for field in (writer_schema or {}).get("fields", ())
        if isinstance(field, dict)
    }
    image = sides.get("after") or sides.get("before")
    if image is None:
        return {}
    return {
        field["name"]: _encoding(_non_null(field["type"]))
        for field in image.get("fields", ())
        if isinstance(field, dict) and "name" in field
    }


def _named_records(schema: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every record type defined in ``schema``, by its name and full name."""
    if isinstance(schema, list):
        for branch in schema:
            yield from _named_records(branch)
    elif isinstance(schema, dict):
        if schema.get("type") == "record" and "name" in schema:
            name = schema["name"]
            yield name, schema
            if schema.get("namespace"):
                yield f"{schema['namespace']}.{name}", schema
            yield name.rsplit(".", 1)[-1], schema
        for field in schema.get("fields", ()):
            if isinstance(field, dict):
                yield from _named_records(field.get("type"))


def _record(type_: Any, named: Mapping[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The record a field's type is (through a union with null, or a reference by name)."""
    type_ = _non_null(type_)
    if isinstance(type_, str):
        return named.get(type_) or named.get(type_.rsplit(".", 1)[-1])
    if isinstance(type_, dict) and type_.get("type") == "record":
        return type_
    return None


def _non_null(type_: Any) -> Any:
    """A union's one branch that is not null (an optional column's type)."""
    if isinstance(type_, list):
        branches = [branch for branch in type_ if branch != "null"]
        return branches[0] if len(branches) == 1 else type_
    return type_


def _encoding(type_: Any) -> FieldSchema:
    if not isinstance(type_, dict):
        return FieldSchema(None)
    parameters = type_.get("connect.parameters") or {}
    return FieldSchema(type_.get("connect.name"), {str(k): str(v) for k, v in parameters.items()})
