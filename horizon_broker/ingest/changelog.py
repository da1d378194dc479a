"""The changelog: reading it, and naming what a batch consumed (its sources).

A batch names its sources (``file:<path>`` for a changelog file, ``stream:<checkpoint>:<batch
id>`` for a micro-batch); the commit log remembers them per key partition, so a source ingested
before is skipped (exactly once across restarts and handovers). :func:`enrich` turns the rows
read into the batch's rows: the user columns typed, each row's key partition and its place in
the source (from which its commit timestamp follows, see :mod:`horizon_broker.ingest.commit_times`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.ingest.partial_upsert import ABSENT
from horizon_broker.ingest.partitioning import key_partition
from horizon_broker.ingest.resolve import SOURCE_FILE, SOURCE_POSITION
from horizon_broker.ingest.storage import FileInfo, Storage
from horizon_broker.ingest.table import TableDefinition

ROW_BITS = 33
"""``monotonically_increasing_id()``: the Spark partition id in the upper bits, the row in the
lower 33."""
_SKIPPED_SUFFIXES = (".crc", ".tmp")


def read_files(
    spark: Any,
    table: TableDefinition,
    paths: Sequence[str],
    fmt: str,
    options: dict[str, str] | None = None,
) -> Any:
    """Changelog files as a DataFrame of the table's columns."""
    return _changelog_reader(spark.read, table, fmt, options).load(list(paths))


def stream_files(
    spark: Any,
    table: TableDefinition,
    path: str,
    fmt: str,
    options: dict[str, str] | None = None,
) -> Any:
    """A streaming DataFrame over a directory of changelog files."""
    return _changelog_reader(spark.readStream, table, fmt, options).load(path)


def _changelog_reader(
    reader: Any, table: TableDefinition, fmt: str, options: dict[str, str] | None
) -> Any:
    """A batch or streaming reader of changelog files in ``fmt`` (CSV files have a header)."""
    if fmt == "debezium":
        raise InvalidArgument(
            f"table {table.name!r}: Debezium envelopes are read by directory passes (--watch "
            "or --once), not as a Spark stream yet"
        )
    reader = reader.format(fmt).schema(table.spark_schema_ddl())
    if fmt == "csv":
        reader = reader.option("header", "true")
    return reader.options(**(options or {}))


def file_source(path: str) -> str:
    """The source name of a changelog file."""
    return f"file:{path}"


def stream_id(storage: Storage, checkpoint: str) -> str:
    """A streaming query's name in its micro-batches' sources: a hash of its checkpoint."""
    return hashlib.sha1(storage.qualify(checkpoint).encode()).hexdigest()[:12]


def stream_source(stream: str, batch_id: int) -> str:
    """The source name of a micro-batch: its query's :func:`stream_id` and Spark's ``batch_id``,
    so a batch replayed after a crash is recognised."""
    return f"stream:{stream}:{batch_id}"


def new_files(
    storage: Storage, path: str, needing: Callable[[str], tuple[int, ...]]
) -> list[list[FileInfo]]:
    """The files of a directory some partitions still need, in batches (in file name order):
    files are grouped by the partitions that need them (``needing(source)``), which differ
    after a handover."""
    files = [info for info in storage.list_files(path) if not info.path.endswith(_SKIPPED_SUFFIXES)]
    groups: dict[tuple[int, ...], list[FileInfo]] = {}
    for info in files:
        needed = needing(file_source(info.path))
        if needed:
            groups.setdefault(needed, []).append(info)
    return [infos for _, infos in sorted(groups.items(), key=lambda item: item[1][0].path)]


def batch_column(frame: Any, name: str, type_: str, table: TableDefinition) -> Any:
    """A user column of a batch, typed: NULL where the frame lacks it (a column added or
    dropped by a schema change), its default (``horizon table alter``) where it is null."""
    from pyspark.sql import functions as F

    default = dict(table.column_defaults).get(name)
    present = name.lower() in {column.lower() for column in frame.columns}
    value = F.col(f"`{name}`").cast(type_) if present else F.lit(None).cast(type_)
    if default is not None:
        value = F.coalesce(value, F.expr(default).cast(type_))
    return value.alias(name)


def enrich(frame: Any, table: TableDefinition, partitions: Sequence[int]) -> Any:
    """The user columns (typed), key partition, source position; ``partitions`` only."""
    from pyspark.sql import functions as F

    columns = [batch_column(frame, c.name, c.type, table) for c in table.columns]
    position = F.monotonically_increasing_id()
    # Rows flattened on the driver (Debezium envelopes) carry their changelog file themselves.
    source_file = F.col(SOURCE_FILE) if SOURCE_FILE in frame.columns else F.input_file_name()
    # So are the columns a partial event left out (partial upserts keep their values).
    absent = [ABSENT] if ABSENT in frame.columns else []
    enriched = frame.select(
        *columns,
        source_file.alias(SOURCE_FILE),
        position.alias("_position"),
        *absent,
    )
    key = table.primary_key or table.column_names
    enriched = enriched.select(
        "*",
        key_partition(key, table.key_partitions).alias("_kp"),
        F.shiftright(F.col("_position"), ROW_BITS).cast("int").alias("_pid"),
        (F.col("_position").bitwiseAND(F.lit((1 << ROW_BITS) - 1))).alias("_row"),
    ).withColumnRenamed("_position", SOURCE_POSITION)
    if len(partitions) < table.key_partitions:
        enriched = enriched.filter(F.col("_kp").isin(list(partitions)))
    return enriched
