"""Changelog files of Debezium envelopes (format ``debezium``) as a batch's frame.

The imperative shell around :mod:`horizon_broker.ingest.debezium`: it reads each file (one
JSON event a line, or an Avro container of them, :mod:`horizon_broker.ingest.debezium_avro`; in
file name order), flattens the events into the table's rows, writes the
malformed ones to dead-letter files next to the commit log, and hands the rows to the batch as a
Spark frame (a local relation built from Arrow, so every road of the batch, driver rows, driver
columns or Spark, reads the same rows in the same order). Each row keeps its changelog file as
its stored ``_sourceFile``.

Dead letters go to ``<table root>/_dead_letters/<server id>/<file name>.<hash>.jsonl``, one line
per event (its source file, line number, reason and text), written whole again when a batch is
read again (a retry after a crash writes the same file). A batch with more than the table's
``max_dead_letters`` fails with an error naming the file, so a file of the wrong format stops
the table instead of vanishing into dead letters.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from horizon_broker._core.errors import FailedPrecondition
from horizon_broker.ingest.debezium import (
    DeadLetter,
    EnvelopeSpec,
    Flattened,
    Place,
    Verdict,
    gathered,
    verdict,
)
from horizon_broker.ingest.debezium_avro import avro_verdicts, is_avro
from horizon_broker.ingest.debezium_truncate import KeysReader, expanded
from horizon_broker.ingest.partial_upsert import ABSENT
from horizon_broker.ingest.resolve import SOURCE_FILE
from horizon_broker.ingest.table import TableDefinition

if TYPE_CHECKING:
    from horizon_broker.ingest.server_table import ServerTable

_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


@dataclass(frozen=True, slots=True)
class EnvelopeBatch:
    """A batch's Debezium files, read: the rows as a frame, and what was not a row."""

    frame: Any
    dead_letters: int
    tombstones: int


def dead_letter_directory(root: str, server_id: str) -> str:
    """Where a server's dead letters of a table go: beside its commit log (``_manifest``)."""
    return f"{root}/_dead_letters/{server_id}"


def read_envelopes(
    server: ServerTable, paths: Sequence[str], current: KeysReader | None = None
) -> EnvelopeBatch:
    """The rows of the Debezium files ``paths`` (in order) as a frame of the table's columns;
    malformed events dead-lettered (the batch fails past ``max_dead_letters``); each truncate a
    delete of every key current at its place (``current``: the keys current before the batch,
    :mod:`horizon_broker.ingest.debezium_truncate`)."""
    table, storage = server.table, server.storage
    spec = EnvelopeSpec.of(table)
    verdicts: list[tuple[str, Verdict]] = []
    for path in paths:
        data = file_bytes(server, path)
        if is_avro(data):
            verdicts += avro_verdicts(path, data, spec)
            continue
        verdicts += (
            (path, verdict(Place(path, number), line, spec))
            for number, line in enumerate(data.decode("utf-8").splitlines(), 1)
            if line.strip()
        )
    flattened = expanded(gathered(verdicts), table.primary_key, current)
    directory = dead_letter_directory(server.root, server.server_id)
    for path, letters in _by_source(flattened.dead_letters).items():
        text = "".join(letter.as_json() + "\n" for letter in letters)
        storage.write_atomically(f"{directory}/{dead_letter_name(path)}", text)
    dead = len(flattened.dead_letters)
    if dead > table.max_dead_letters:
        first = flattened.dead_letters[0]
        raise FailedPrecondition(
            f"table {table.name!r}: {dead} malformed Debezium events in this batch, more than "
            f"max_dead_letters = {table.max_dead_letters} (the first at "
            f"{first.place.source}:{first.place.position}: {first.reason}); they are in "
            f"{directory}"
        )
    return EnvelopeBatch(rows_frame(server.spark, table, flattened), dead, flattened.tombstones)


def file_bytes(server: ServerTable, path: str) -> bytes:
    """A changelog file's bytes (a file on another file system read through Spark)."""
    local = server.storage.local_path(path)
    if local is not None:
        with open(local, "rb") as stream:
            return stream.read()
    found = server.spark.read.format("binaryFile").load(path).select("content").collect()
    return bytes(found[0][0]) if found else b""


def dead_letter_name(path: str) -> str:
    """A source file's dead-letter file: its name and a hash of its path (two directories may
    hold files of one name)."""
    digest = hashlib.sha1(path.encode()).hexdigest()[:10]
    return f"{path.rstrip('/').rsplit('/', 1)[-1]}.{digest}.jsonl"


def rows_frame(spark: Any, table: TableDefinition, flattened: Flattened) -> Any:
    """The flattened rows as a Spark frame: the table's columns, typed, and ``_sourceFile``."""
    import pyarrow as pa

    arrays = {
        column.name: pa.array(
            [row[column.name] for row in flattened.rows], type=arrow_type(column.type)
        )
        for column in table.columns
    }
    arrays[SOURCE_FILE] = pa.array(flattened.sources, type=pa.string())
    if table.partial_upsert is not None and len(flattened.absent) == len(flattened.rows):
        absent = [sorted(names) for names in flattened.absent]
        arrays[ABSENT] = pa.array(absent, type=pa.list_(pa.string()))
    return spark.createDataFrame(pa.table(arrays))


def arrow_type(spark_type: str) -> Any:
    """The Arrow type of the values :func:`horizon_broker.ingest.debezium.column_value` gives
    for a Spark column type."""
    import pyarrow as pa

    kind = spark_type.strip().lower()
    simple = {
        "string": pa.string(), "boolean": pa.bool_(), "tinyint": pa.int8(), "byte": pa.int8(),
        "smallint": pa.int16(), "short": pa.int16(), "int": pa.int32(), "integer": pa.int32(),
        "bigint": pa.int64(), "long": pa.int64(), "double": pa.float64(), "float": pa.float32(),
        "real": pa.float32(), "timestamp": pa.timestamp("us", tz="UTC"), "date": pa.date32(),
        "binary": pa.binary(),
    }  # fmt: skip
    if kind in simple:
        return simple[kind]
    match = _DECIMAL.match(kind)
    if match is None:
        raise ValueError(f"no Arrow type for {spark_type}")
    return pa.decimal128(int(match.group(1)), int(match.group(2)))


def _by_source(letters: Sequence[DeadLetter]) -> dict[str, list[DeadLetter]]:
    grouped: dict[str, list[DeadLetter]] = {}
    for letter in letters:
        grouped.setdefault(letter.place.source, []).append(letter)
    return grouped
