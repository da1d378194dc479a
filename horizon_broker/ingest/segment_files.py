"""A small batch's files, read and written by pyarrow in the layout Spark writes them.

Key index levels are batches' resolution files (:mod:`horizon_broker.ingest.key_index`): a small batch reads
the entries of its own keys from them, skipping the row groups whose key statistics rule the keys
out (Spark writes a level sorted by key), and writes its own level as one file per key partition
(``_kpDir=<kp>/``). Its segments go under ``_chunk=<c>/_seg=<s>/_rows=open|closed/`` like
:func:`horizon_broker.ingest.segments.write_segments`'s: open versions by key, closed ones by ``validFrom``.
Column types are the ones Spark gave the collected rows, and timestamps are stored the way the
session's Spark writes them (``spark.sql.parquet.outputTimestampType``), so readers cannot tell
the writers apart. Each file is written under a hidden name and renamed into place: listings
skip hidden files, so a crash never leaves half a file where a reader looks.
"""

from __future__ import annotations

import bisect
import os
import shutil
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from horizon_broker.ingest.driver_rows.resolution import IndexEntry, Key, entries_of, order_key
from horizon_broker.ingest.key_index import INDEX_PARTITION_DIR
from horizon_broker.ingest.resolve import SOURCE_FILE, SOURCE_POSITION
from horizon_broker.ingest.segments import (
    CHUNK_DIR_COLUMN,
    CLOSED_ROWS,
    OPEN_ROWS,
    ROWS_DIR_COLUMN,
    SEGMENT_DIR_COLUMN,
    plain_segment_columns,
)
from horizon_broker.ingest.storage import Storage
from horizon_broker.ingest.table import TableDefinition
from horizon_broker.watermark.catalog import VALID_FROM, VALID_UNTIL

LEVEL_COLUMNS = (
    "_ts", "_next", "_kp", "_chunk", "_acc", "_carry", "_newSeg",
    "_i_cmp", "_i_validFrom", "_i_deleted", "_i_chunk", "_i_seg",
)  # fmt: skip
"""The columns of a resolution file that its index entries are made of (with the key, the
comparison and the delete columns)."""


class Writer:
    """Writes Parquet files on the local file system as the session's Spark would.

    One writer writes the files of one batch or one updater run (one table's data): which
    columns go without a dictionary is sampled once per column (:func:`mostly_distinct`)."""

    def __init__(self, timestamp_type: str) -> None:
        kind = timestamp_type.upper()
        # Decimals of up to 18 digits as INT32/INT64, as Spark writes them: pyarrow's default
        # (fixed-length byte arrays) made Spark's scan of TPC-H's lineitem slower (bench.tpch).
        self._options: dict[str, Any] = {"compression": "snappy", "store_decimal_as_integer": True}
        if kind == "INT96":
            self._options["use_deprecated_int96_timestamps"] = True
        elif kind == "TIMESTAMP_MILLIS":
            self._options["coerce_timestamps"] = "ms"
            self._options["allow_truncated_timestamps"] = True
        else:
            self._options["coerce_timestamps"] = "us"
        self._distinct: dict[str, bool] = {}
        self._row_bytes: dict[tuple[str, ...], float] = {}

    def write(
        self,
        directory: str,
        table: Any,
        row_group_bytes: int | None = None,
        plain: Sequence[str] = (),
    ) -> str:
        """Write ``table`` as a new file in ``directory`` (created); returns its path.

        ``row_group_bytes`` sizes row groups about as Spark's ``parquet.block.size`` does (by
        the rows' size in memory): key lookups prune by row group, so a large file should not
        be one group. ``plain`` columns get no dictionary, as Spark writes them
        (:func:`horizon_broker.ingest.segments.plain_encoded`: distinct values fill a dictionary for nothing;
        it cost about 40% of a segment rewrite's write), their integers are
        :func:`delta_encoded`, and the other columns whose values are :func:`mostly_distinct` get
        no dictionary either."""
        return self.write_runs(directory, [table], row_group_bytes, plain)

    def write_runs(
        self,
        directory: str,
        runs: Sequence[Any],
        row_group_bytes: int | None = None,
        plain: Sequence[str] = (),
    ) -> str:
        """Write the tables ``runs`` (one schema) one after the other as one new file, as
        :meth:`write` writes one: no row group spans two runs, so runs each sorted by a column
        keep row groups whose statistics of it are narrow, as one sorted table would, without
        the sort of both."""
        import pyarrow.parquet as pq

        os.makedirs(directory, exist_ok=True)
        name = f"part-00000-{uuid.uuid4()}.c000.snappy.parquet"
        hidden = os.path.join(directory, f".{name}.tmp")
        options = dict(self._options)
        largest = max(runs, key=lambda run: run.num_rows)
        delta = delta_encoded(largest.schema, plain)
        if delta:
            options["column_encoding"] = dict.fromkeys(delta, "DELTA_BINARY_PACKED")
        plain = [*plain, *mostly_distinct(largest, plain, self._distinct)]
        if plain:
            options["use_dictionary"] = [n for n in largest.schema.names if n not in plain]
        rows = sum(run.num_rows for run in runs)
        group_rows = None
        if row_group_bytes is not None and rows:
            row_bytes = max(1, sum(run.nbytes for run in runs) // rows)
            if rows * row_bytes > row_group_bytes:  # more than one group even in memory
                row_bytes = self._stored_row_bytes(largest, options)
            group_rows = max(1_024, int(row_group_bytes // row_bytes))
        with pq.ParquetWriter(hidden, largest.schema, **options) as out:
            for run in runs:
                if run.num_rows or run is largest:
                    out.write_table(run, row_group_size=group_rows)
        final = os.path.join(directory, name)
        os.replace(hidden, final)
        return final

    def _stored_row_bytes(self, table: Any, options: dict[str, Any]) -> float:
        """Bytes a row of ``table`` takes in the file (encoded and compressed), from its first
        :data:`SIZE_SAMPLE_ROWS` rows written to memory: what Spark's ``parquet.block.size``
        counts. Sizing by the rows' size in memory made groups about five times smaller than
        Spark's (31,300 TPC-H lineitem rows against 159,334), and Spark scans many small groups
        far slower (bench.tpch). Kept per schema once a sample has :data:`DECIDING_ROWS` rows."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        known = self._row_bytes.get(tuple(table.schema.names))
        if known is not None:
            return known
        sample = table.slice(0, SIZE_SAMPLE_ROWS)
        sink = pa.BufferOutputStream()
        pq.write_table(sample, sink, **options)
        measured = max(1.0, sink.getvalue().size / max(1, sample.num_rows))
        if sample.num_rows >= DECIDING_ROWS:
            self._row_bytes[tuple(table.schema.names)] = measured
        return measured


def delta_encoded(schema: Any, plain: Sequence[str]) -> list[str]:
    """The 32- and 64-bit integer columns among ``plain`` (commit timestamps, source positions,
    an integer key), which are stored as deltas instead of plain values.

    Their values lie close together (a batch's timestamps, a file's positions, keys in order):
    a file's deltas take a few bits a value where plain values take 8 bytes that Snappy hardly
    shrinks. On the benchmark's segments that is a quarter of the file gone, about as fast to
    write and 15% faster to read (Spark reads the encoding too). Values the writer only
    samples as distinct (amounts, say) may lie far apart, so they stay plain."""
    import pyarrow as pa

    wanted = set(plain)
    return [
        field.name
        for field in schema
        if field.name in wanted and (pa.types.is_int64(field.type) or pa.types.is_int32(field.type))
    ]


SIZE_SAMPLE_ROWS = 16_384
"""Rows :meth:`Writer._stored_row_bytes` writes to measure a row's size in the file."""
DISTINCT_SAMPLE_ROWS = 16_384
"""Rows :func:`mostly_distinct` looks at in each column."""
DISTINCT_SHARE = 0.75
"""Share of distinct values in the sample above which a column is written without a dictionary."""
DECIDING_ROWS = 1_024
"""Values (not null) a sample needs for its answer to stand for the column's other files."""


def mostly_distinct(
    table: Any, skip: Sequence[str] = (), decided: dict[str, bool] | None = None
) -> list[str]:
    """The top-level number, string and binary columns of ``table`` (but ``skip``) whose first
    :data:`DISTINCT_SAMPLE_ROWS` values are more than :data:`DISTINCT_SHARE` distinct.

    Parquet dictionary-encodes a column per row group: with most values distinct the dictionary
    holds about every value and each row adds an index to it, so the file is larger than plain
    values and the write slower (an amount column took a fifth of a segment rewrite's write).
    Spark's writer cannot know either; a sample can, for a hash of a few thousand values.
    ``decided`` keeps the answers of samples of at least :data:`DECIDING_ROWS` values by column
    name and reuses them: a writer of one batch's or one update's files (one table's data) asks
    once per column, not once per file (a rewrite writes a hundred files; sampling each spent
    0.15 s a batch).

    >>> import pyarrow as pa
    >>> t = pa.table({"id": list(range(100)), "kind": [i % 3 for i in range(100)]})
    >>> mostly_distinct(t)
    ['id']
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    found = []
    sample = table.slice(0, DISTINCT_SAMPLE_ROWS)
    for field in table.schema:
        kind = field.type
        if field.name in skip or not (
            pa.types.is_integer(kind)
            or pa.types.is_floating(kind)
            or pa.types.is_decimal(kind)
            or pa.types.is_string(kind)
            or pa.types.is_large_string(kind)
            or pa.types.is_binary(kind)
            or pa.types.is_temporal(kind)
        ):
            continue
        known = None if decided is None else decided.get(field.name)
        if known is None:
            values = sample[field.name]
            present = len(values) - values.null_count
            known = bool(present) and pc.count_distinct(values).as_py() > DISTINCT_SHARE * present
            if decided is not None and present >= DECIDING_ROWS:
                decided[field.name] = known
        if known:
            found.append(field.name)
    return found


def copy_into(path: str, directory: str) -> str:
    """Copy the file ``path`` into ``directory`` (created) under its own name, as a written file
    lands: under a hidden name, then renamed into place; returns the new path.

    A copy, not a hard link: a link would make two segment versions one file on disk, so a file
    damaged in place (cut short, overwritten) would take the segment it was replaced by down
    with it, and the timeline's fallback from one to the other would find the same damage (the
    fault harness's truncated files stayed unreadable after they were restored). The kernel
    copies without decoding anything (and clones where the file system can); the copy's footer
    is read before it is put in place, so a file cut short is refused (pyarrow's error, as a
    decode of it would raise) instead of carried into the rewrite."""
    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=True)
    name = os.path.basename(path)
    hidden = os.path.join(directory, f".{name}.tmp")
    shutil.copyfile(path, hidden)
    try:
        pq.read_metadata(hidden)
    except Exception:
        os.remove(hidden)
        raise
    final = os.path.join(directory, name)
    os.replace(hidden, final)
    return final


def _nullable(user: Any, name: str) -> Any:
    """A user column's Arrow field, nullable: a source may declare a column non-nullable, but
    the rows that carry index entries hold no value in it (and Spark reads every column of these
    files as nullable)."""
    return user.field(name).with_nullable(True)


def comparison_type(table: TableDefinition, user: Any) -> Any:
    """The Arrow type of ``_i_cmp`` (:func:`horizon_broker.ingest.resolve.comparison_type`) from the user
    columns' Arrow schema."""
    import pyarrow as pa

    names = table.comparison_columns
    if not names:
        return pa.int32()
    if len(names) == 1:
        return user.field(names[0]).type
    return pa.struct([_nullable(user, name) for name in names])


def resolution_arrow_schema(table: TableDefinition, user: Any) -> Any:
    """The Arrow schema of a resolution file (:func:`horizon_broker.ingest.resolve.resolution_schema`)."""
    import pyarrow as pa

    return pa.schema(
        [
            *[_nullable(user, name) for name in table.column_names],
            pa.field("_ts", pa.int64()),
            pa.field("_next", pa.int64()),
            pa.field(SOURCE_FILE, pa.string()),
            pa.field(SOURCE_POSITION, pa.int64()),
            pa.field("_kp", pa.int32()),
            pa.field("_chunk", pa.int64()),
            pa.field("_acc", pa.bool_()),
            pa.field("_first", pa.bool_()),
            pa.field("_carry", pa.bool_()),
            pa.field("_i_cmp", comparison_type(table, user)),
            pa.field("_i_validFrom", pa.int64()),
            pa.field("_i_deleted", pa.bool_()),
            pa.field("_i_chunk", pa.int64()),
            pa.field("_i_seg", pa.int32()),
            pa.field("_newSeg", pa.int32()),
        ]
    )


def segment_arrow_schema(table: TableDefinition, user: Any) -> Any:
    """The Arrow schema of a segment file (:func:`horizon_broker.ingest.resolve.segment_schema`)."""
    import pyarrow as pa

    return pa.schema(
        [
            *[_nullable(user, name) for name in table.column_names],
            pa.field(VALID_FROM, pa.int64()),
            pa.field(VALID_UNTIL, pa.int64()),
            pa.field(SOURCE_FILE, pa.string()),
            pa.field(SOURCE_POSITION, pa.int64()),
        ]
    )


def _arrow_rows(rows: Sequence[Mapping[str, Any]], schema: Any) -> Any:
    """Rows as an Arrow table of ``schema`` (a struct comparison value goes in as a dict)."""
    import pyarrow as pa

    columns = {}
    for field in schema:
        values = [row[field.name] for row in rows]
        if pa.types.is_struct(field.type):
            names = [child.name for child in field.type]
            values = [None if v is None else dict(zip(names, v, strict=True)) for v in values]
        columns[field.name] = pa.array(values, type=field.type)
    return pa.table(columns, schema=schema)


def write_level(
    writer: Writer,
    directory: str,
    rows: Sequence[Mapping[str, Any]],
    schema: Any,
    table: TableDefinition,
) -> dict[int, str]:
    """Write a batch's resolution rows, one ``_kpDir=<kp>`` directory per key partition, each
    sorted by key; returns each partition's directory."""
    by_partition: dict[int, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_partition.setdefault(int(row["_kp"]), []).append(row)
    written = {}
    for kp, items in sorted(by_partition.items()):
        items.sort(key=lambda row: order_key(tuple(row[name] for name in table.primary_key)))
        path = os.path.join(directory, f"{INDEX_PARTITION_DIR}={kp}")
        writer.write(path, _arrow_rows(items, schema))
        written[kp] = path
    return written


def write_segment_files(
    writer: Writer,
    directory: str,
    versions: Iterable[Mapping[str, Any]],
    schema: Any,
    table: TableDefinition,
) -> None:
    """Write the versions (with ``_chunk`` and ``_seg``) as an open and a closed file per
    segment, each omitted when empty: open versions by key, closed ones by ``validFrom``."""
    by_segment: dict[tuple[int, int, bool], list[Mapping[str, Any]]] = {}
    for row in versions:
        is_open = row[VALID_UNTIL] is None
        by_segment.setdefault((int(row["_chunk"]), int(row["_seg"]), is_open), []).append(row)
    pk = table.primary_key
    for (chunk, seg, is_open), items in sorted(by_segment.items()):
        if is_open:
            items.sort(key=lambda r: (order_key(tuple(r[n] for n in pk)), r[VALID_FROM]))
        else:
            items.sort(key=lambda r: r[VALID_FROM])
        path = os.path.join(
            directory,
            f"{CHUNK_DIR_COLUMN}={chunk}",
            f"{SEGMENT_DIR_COLUMN}={seg}",
            f"{ROWS_DIR_COLUMN}={OPEN_ROWS if is_open else CLOSED_ROWS}",
        )
        writer.write(
            path, _arrow_rows(items, schema), plain=plain_segment_columns(schema.names, pk)
        )


def level_columns(table: TableDefinition) -> list[str]:
    """The columns of a level file its index entries are made of: the key, the comparison and
    delete columns and :data:`LEVEL_COLUMNS`."""
    delete = [table.delete_column] if table.delete_column else []
    names = [*table.primary_key, *table.comparison_columns, *delete, *LEVEL_COLUMNS]
    return list(dict.fromkeys(names))


def local_parquet_files(storage: Storage, path: str) -> list[str] | None:
    """The operating system paths of the Parquet files under ``path`` (a level's ``_kpDir=``
    directory, a batch's resolution), as :meth:`Storage.list_files` finds them; None when
    ``path`` is not on the local file system."""
    if storage.local_path(path) is None:
        return None
    found = [storage.local_path(info.path) for info in storage.list_files(path, suffix=".parquet")]
    return [local for local in found if local is not None]


def read_level_entries(
    paths: Sequence[str], table: TableDefinition, keys: Sequence[Key] | None
) -> dict[Key, IndexEntry]:
    """The index entries of a level's files: of ``keys`` only (row groups whose statistics
    rule them all out are not read), or all of them (``None``)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    wanted = None if keys is None else set(keys)
    first_values = None if keys is None else sorted({key[0] for key in keys})
    columns = level_columns(table)
    entries: dict[Key, IndexEntry] = {}
    for path in paths:
        parquet = pq.ParquetFile(path)
        groups = list(range(parquet.metadata.num_row_groups))
        if first_values is not None:
            groups = [
                g for g in groups if _may_hold(parquet, g, table.primary_key[0], first_values)
            ]
            if not groups:
                continue
        data = parquet.read_row_groups(groups, columns=columns)
        if first_values is not None:
            data = data.filter(
                pc.is_in(
                    data[table.primary_key[0]], value_set=_value_set(data, first_values, table)
                )
            )
        rows = data.to_pylist()
        if len(table.comparison_columns) > 1:
            for row in rows:
                value = row["_i_cmp"]
                if isinstance(value, dict):
                    row["_i_cmp"] = tuple(value[name] for name in table.comparison_columns)
        found = entries_of(rows, table)
        if wanted is not None:
            found = {key: entry for key, entry in found.items() if key in wanted}
        entries.update(found)
    return entries


def _value_set(data: Any, values: Sequence[Any], table: TableDefinition) -> Any:
    import pyarrow as pa

    return pa.array(values, type=data.schema.field(table.primary_key[0]).type)


def _may_hold(parquet: Any, group: int, column: str, sorted_values: Sequence[Any]) -> bool:
    """Whether a row group's min/max statistics of ``column`` leave room for any of the sorted
    ``sorted_values`` (True when it has none, or they cannot be compared)."""
    metadata = parquet.metadata.row_group(group)
    for index in range(metadata.num_columns):
        chunk = metadata.column(index)
        if chunk.path_in_schema != column:
            continue
        statistics = chunk.statistics
        if statistics is None or not statistics.has_min_max:
            return True
        try:
            at = bisect.bisect_left(sorted_values, statistics.min)
            return at < len(sorted_values) and sorted_values[at] <= statistics.max
        except TypeError:
            return True
    return True
