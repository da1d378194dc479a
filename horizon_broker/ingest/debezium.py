"""Debezium change events flattened into a table's rows: a pure verdict on each event.

Debezium writes one envelope per change (``op``, the ``before`` and ``after`` row images,
``source`` with the log position, ``ts_ms``, ``transaction``), with or without the
``schema``/``payload`` wrapper, and a tombstone (a null value) after each delete. The pipeline
downstream knows only rows of the table's columns, so the envelopes are flattened once, before a
batch takes any of its roads (driver rows, driver columns, Spark), and every road sees the same
rows. This module is that flattening and nothing else: :func:`verdict` judges one event's text,
:func:`flatten` a sequence of them; reading files (:mod:`horizon_broker.ingest.debezium_files`)
or a stream is the caller's business.

How an event becomes a row of the table:

- ``c`` (create), ``u`` (update), ``r`` (snapshot read): the ``after`` image;
- ``d`` (delete): the ``before`` image (its key columns at least), with the table's
  ``delete_column`` true, so it ends the key's current version;
- a tombstone is skipped (counted); ``t`` (truncate) is refused unless the table sets
  ``allow_truncate``: then it is a :class:`Truncate`, which the batch turns into a delete of
  every key current at its place (:mod:`horizon_broker.ingest.debezium_truncate`);
- the table's ``delete_column`` is ``op = d``, its ``transaction_column`` the source
  transaction (``transaction.id``, else ``source.txId``), and with ``debezium_order`` its one
  comparison column the event's log position (:func:`log_position`);
- each value is read by its Debezium encoding (``io.debezium.time.*``, Connect's ``Decimal``,
  ``VariableScaleDecimal``) as the envelope's ``schema`` block names it, else by the column's type
  (:mod:`horizon_broker.ingest.debezium_values`);
- anything else wrong (not JSON, no or an unknown ``op``, no image, a key column missing, a
  value of the wrong type or encoding) is a :class:`DeadLetter`, never silently dropped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from horizon_broker._core.errors import FailedPrecondition
from horizon_broker.ingest.debezium_settings import DebeziumOrder
from horizon_broker.ingest.debezium_values import (
    FieldSchema,
    Malformed,
    column_value,
    image_schemas,
    kind_of,
    supported,
)
from horizon_broker.ingest.table import TableDefinition

FORMAT = "debezium"
"""The changelog format of Debezium envelopes (JSON, one event a line)."""
IMAGE_OPS = frozenset({"c", "u", "r"})
DELETE_OP = "d"
TRUNCATE_OP = "t"
_BINLOG_FILE = re.compile(r"(\d+)$")


@dataclass(frozen=True, slots=True)
class Place:
    """Where an event was read: its source (a file's path, a stream's name) and its place
    there (a file's line number from 1, a stream's entry)."""

    source: str
    position: int


@dataclass(frozen=True, slots=True)
class Row:
    """An event that is a change of the table: its values by column name."""

    values: dict[str, Any]
    absent: frozenset[str] = frozenset()
    """The image's columns the event left out (null in ``values``): a partial upsert keeps the
    key's value of them (:mod:`horizon_broker.ingest.partial_upsert`)."""


@dataclass(frozen=True, slots=True)
class Tombstone:
    """The null value Debezium sends after a delete (for log compaction): nothing to do."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """An event that cannot be a row: why, where, and its text as read."""

    place: Place
    reason: str
    text: str

    def as_json(self) -> str:
        """One line of a dead-letter file."""
        return json.dumps(
            {
                "source": self.place.source,
                "position": self.place.position,
                "reason": self.reason,
                "event": self.text,
            }
        )


class TruncateRefused(FailedPrecondition):
    """A truncate event for a table that does not allow truncation (``allow_truncate``)."""


@dataclass(frozen=True, slots=True)
class Truncate:
    """A truncate the table allows: the values each of its deletes takes (the delete flag, the
    log position, the transaction; every other column null)."""

    values: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Truncation:
    """A truncate among a batch's rows: before row ``at`` (the rows before it precede it)."""

    at: int
    values: dict[str, Any]
    source: str


Verdict = Row | Tombstone | DeadLetter | Truncate


@dataclass(frozen=True, slots=True)
class Flattened:
    """A sequence of events as rows (each with its source), in event order."""

    rows: list[dict[str, Any]]
    sources: list[str]
    """The source of each row (a changelog file's path), for the stored ``_sourceFile``."""
    dead_letters: list[DeadLetter]
    tombstones: int
    absent: list[frozenset[str]] = field(default_factory=list)
    """Each row's absent columns (:attr:`Row.absent`); empty: none known."""
    truncates: list[Truncation] = field(default_factory=list)
    """The truncates among the rows, in order (to expand before the batch runs)."""


@dataclass(frozen=True, slots=True)
class EnvelopeSpec:
    """What flattening needs of a table: its columns, key, and the columns the envelope fills."""

    columns: tuple[tuple[str, str], ...]
    """(name, Spark type), in the table's order."""
    primary_key: tuple[str, ...]
    delete_column: str | None
    transaction_column: str | None
    position_column: str | None
    """The comparison column the log position fills (None: the image's values compare)."""
    order: DebeziumOrder | None
    allow_truncate: bool = False

    @classmethod
    def of(cls, table: TableDefinition) -> EnvelopeSpec:
        order = table.debezium_order
        return cls(
            columns=tuple((column.name, column.type.strip().lower()) for column in table.columns),
            primary_key=table.primary_key,
            delete_column=table.delete_column,
            transaction_column=table.transaction_column,
            position_column=table.comparison_columns[0] if order else None,
            order=order,
            allow_truncate=table.allow_truncate,
        )

    def type_of(self, name: str) -> str:
        return dict(self.columns)[name]

    @property
    def filled(self) -> frozenset[str]:
        """The columns the envelope fills, not the row image."""
        return frozenset(
            name
            for name in (self.delete_column, self.transaction_column, self.position_column)
            if name
        )


def table_problems(table: TableDefinition) -> list[str]:
    """Why ``table`` cannot take Debezium envelopes (empty: it can)."""
    problems = []
    if not table.upsert or not table.primary_key:
        problems.append("format debezium needs an upsert table with a primary key")
    if table.delete_column is None:
        problems.append(
            "format debezium needs a delete_column (a boolean column it sets for op = d)"
        )
    for column in table.columns:
        if not supported(column.type.strip().lower()):
            problems.append(
                f"format debezium cannot fill column {column.name!r} of type {column.type} "
                "(it takes string, boolean, integral, float, double, decimal(p,s), timestamp, "
                "date and binary columns)"
            )
    return [f"table {table.name!r}: {problem}" for problem in problems]


def flatten(events: Iterable[tuple[Place, str]], spec: EnvelopeSpec) -> Flattened:
    """The rows of ``events`` (each its place and text), in order; tombstones counted,
    malformed events dead-lettered. A truncate the table does not allow raises
    :class:`TruncateRefused`."""
    return gathered((place.source, verdict(place, text, spec)) for place, text in events)


def gathered(verdicts: Iterable[tuple[str, Verdict]]) -> Flattened:
    """Verdicts (each with the source its row keeps) as rows, in order."""
    rows: list[dict[str, Any]] = []
    sources: list[str] = []
    dead: list[DeadLetter] = []
    tombstones = 0
    absent: list[frozenset[str]] = []
    truncates: list[Truncation] = []
    for source, judged in verdicts:
        if isinstance(judged, Row):
            rows.append(judged.values)
            sources.append(source)
            absent.append(judged.absent)
        elif isinstance(judged, DeadLetter):
            dead.append(judged)
        elif isinstance(judged, Truncate):
            truncates.append(Truncation(len(rows), judged.values, source))
        else:
            tombstones += 1
    return Flattened(rows, sources, dead, tombstones, absent, truncates)


def verdict(place: Place, text: str, spec: EnvelopeSpec) -> Verdict:
    """What one event is: a row, a tombstone, or a dead letter (a truncate raises). The
    envelope's ``schema`` block, when there, says how each column is encoded."""
    try:
        value = json.loads(text)
    except ValueError as error:
        return DeadLetter(place, f"not JSON: {error}", text)
    return envelope_verdict(place, value, text, spec, image_schemas(value))


def envelope_verdict(
    place: Place,
    value: Any,
    text: str,
    spec: EnvelopeSpec,
    schemas: Mapping[str, FieldSchema] | None = None,
) -> Verdict:
    """What one decoded event is (``schemas``: its image columns' encodings, by name)."""
    try:
        payload = unwrapped(value)
        if payload is None:
            return Tombstone()
        if payload.get("op") == TRUNCATE_OP:
            return truncate_of(payload, spec, place)
        return Row(row_of(payload, spec, place, schemas), absent_columns(payload, spec))
    except Malformed as error:
        return DeadLetter(place, str(error), text)


def unwrapped(value: Any) -> Mapping[str, Any] | None:
    """The envelope without its ``schema``/``payload`` wrapper; None for a tombstone."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Malformed(f"an event is a JSON object, not {type(value).__name__}")
    if "payload" in value and "op" not in value:
        return unwrapped(value["payload"])
    return value


def row_of(
    envelope: Mapping[str, Any],
    spec: EnvelopeSpec,
    place: Place,
    schemas: Mapping[str, FieldSchema] | None = None,
) -> dict[str, Any]:
    """The row one envelope makes (its image's columns, and those the envelope fills)."""
    op = checked_op(envelope, place)
    side = "before" if op == DELETE_OP else "after"
    image = envelope.get(side)
    if not isinstance(image, dict):
        raise Malformed(f"op {op!r} needs a {side} image, got {kind_of(image)}")
    row = image_values(image, spec, side, schemas or {})
    if spec.delete_column:
        row[spec.delete_column] = op == DELETE_OP
    if spec.transaction_column:
        row[spec.transaction_column] = transaction_id(envelope)
    if spec.position_column and spec.order:
        position = log_position(envelope, spec.order)
        row[spec.position_column] = column_value(
            position, spec.type_of(spec.position_column), spec.position_column
        )
    return row


def absent_columns(envelope: Mapping[str, Any], spec: EnvelopeSpec) -> frozenset[str]:
    """The columns an ``after`` image leaves out (a delete's ``before`` has only the key)."""
    image = envelope.get("after")
    if envelope.get("op") == DELETE_OP or not isinstance(image, dict):
        return frozenset()
    return frozenset(
        name for name, _ in spec.columns if name not in spec.filled and name not in image
    )


def truncate_of(envelope: Mapping[str, Any], spec: EnvelopeSpec, place: Place) -> Truncate:
    """A truncate as the values its deletes take: at its log position, in its transaction
    (``truncate@<position>`` when it has none), so they commit together after every change
    before it. Refused unless the table allows truncation."""
    if not spec.allow_truncate or not spec.position_column or not spec.order:
        raise TruncateRefused(
            f"a truncate event (op = t) at {place.source}:{place.position}: the table does not "
            "allow truncation; set allow_truncate = true on it (with debezium_order and a "
            "transaction_column) to end every current version at the truncate, or skip "
            "truncates in the connector (skipped.operations = t)"
        )
    position = log_position(envelope, spec.order)
    values: dict[str, Any] = {name: None for name, _ in spec.columns}
    values[spec.position_column] = column_value(
        position, spec.type_of(spec.position_column), spec.position_column
    )
    if spec.delete_column:
        values[spec.delete_column] = True
    if spec.transaction_column:
        values[spec.transaction_column] = transaction_id(envelope) or f"truncate@{position}"
    return Truncate(values)


def checked_op(envelope: Mapping[str, Any], place: Place) -> str:
    """The event's ``op``: c, u, r or d (anything else is malformed)."""
    del place  # kept: callers name the event's place
    op = envelope.get("op")
    if op is None:
        raise Malformed("no op")
    if op not in IMAGE_OPS and op != DELETE_OP:
        raise Malformed(f"unknown op {op!r} (expected c, u, r, d or t)")
    return str(op)


def image_values(
    image: Mapping[str, Any],
    spec: EnvelopeSpec,
    side: str,
    schemas: Mapping[str, FieldSchema] | None = None,
) -> dict[str, Any]:
    """The table's columns from a row image (a missing non-key column is null), each read by
    its encoding in ``schemas`` when named there, else by the column's type."""
    schemas = schemas or {}
    row = {}
    for name, type_ in spec.columns:
        if name in spec.filled:
            continue
        value = image.get(name)
        if value is None and name in spec.primary_key:
            raise Malformed(f"key column {name!r} is missing from the {side} image")
        encoding = schemas.get(name)
        row[name] = None if value is None else column_value(value, type_, name, encoding)
    return row


def transaction_id(envelope: Mapping[str, Any]) -> str | None:
    """The source transaction of an event: ``transaction.id`` (Debezium's transaction
    metadata), else ``source.txId``; None when neither is there (the change commits alone)."""
    transaction = envelope.get("transaction")
    if isinstance(transaction, dict) and transaction.get("id") is not None:
        return str(transaction["id"])
    source = envelope.get("source")
    if isinstance(source, dict) and source.get("txId") is not None:
        return str(source["txId"])
    return None


def log_position(envelope: Mapping[str, Any], order: DebeziumOrder) -> int:
    """The event's place in the source database's log, as one comparable number.

    ``lsn``: Postgres' ``source.lsn``; ``scn``: Oracle's ``source.scn`` (a string of digits);
    ``binlog``: MySQL's ``source.file`` (its number), ``source.pos`` and ``source.row`` (the
    row within a multi-row event) as ``file * 10**24 + pos * 10**5 + row``; ``ts_ms``:
    ``source.ts_ms``, else the envelope's ``ts_ms``.

    >>> log_position({"source": {"file": "mysql-bin.000003", "pos": 154, "row": 1}}, DebeziumOrder.BINLOG)
    3000000000000000015400001
    """
    source = envelope.get("source")
    source = source if isinstance(source, dict) else {}
    if order is DebeziumOrder.TS_MS:
        return _whole(source.get("ts_ms", envelope.get("ts_ms")), "ts_ms")
    if order is DebeziumOrder.LSN:
        return _whole(source.get("lsn"), "source.lsn")
    if order is DebeziumOrder.SCN:
        return _whole(source.get("scn"), "source.scn")
    file = source.get("file")
    number = _BINLOG_FILE.search(file) if isinstance(file, str) else None
    if number is None:
        raise Malformed(f"source.file {file!r} is not a binlog file name ending in its number")
    pos = _whole(source.get("pos"), "source.pos")
    row = _whole(source.get("row", 0), "source.row")
    if pos >= 10**19 or row >= 10**5:
        raise Malformed(f"binlog position {pos}/{row} is out of range")
    return int(number.group(1)) * 10**24 + pos * 10**5 + row


def _whole(value: Any, what: str) -> int:
    """An integral log position (a number, or a string of digits as Oracle's SCN is)."""
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise Malformed(f"{what} is {kind_of(value)}, not a log position")
