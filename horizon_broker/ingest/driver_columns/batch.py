"""Running a large batch on the driver as Arrow columns: when it applies, its index and files.

:func:`columnar_batch` takes a batch already collected as Arrow (:mod:`horizon_broker.ingest.driver_batches`)
when the table's rules allow it (those of :func:`horizon_broker.ingest.driver_rows.batch.driver_can_take`, at most one
comparison column, keys pyarrow joins exactly, no null key, the collected rows within
:data:`DRIVER_COLUMNAR_BYTES`). :meth:`ColumnarBatch.write` then does what
:func:`horizon_broker.ingest.batch.resolve_upserts` and :func:`horizon_broker.ingest.segments.write_segments` do: the batch's
keys are looked up in each level (:mod:`horizon_broker.ingest.driver_columns.index_lookup`), the batch is resolved
(:mod:`horizon_broker.ingest.driver_columns.resolution`), and its level (one file per key partition, sorted by key)
and segments (open versions by key, closed ones by ``validFrom``) are written one file per core
at a time, with Spark's row-group size and dictionary choices. The batch that finds a partition
with :data:`horizon_broker.ingest.key_index.MAX_INDEX_LEVELS` levels (one in eight) reads the partitions' whole
index instead and carries the entry of every key it has no record of into its level, which then
replaces the stack, as the Spark path's full join does (on Spark that batch took 8 to 9 s more
than the others on the benchmark's table).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from horizon_broker._core.errors import Internal
from horizon_broker.ingest import segment_files as files
from horizon_broker.ingest.commit import ResolvedBatch
from horizon_broker.ingest.commit_times import ChangeCount
from horizon_broker.ingest.driver_columns import level_cache, resolution, stamps
from horizon_broker.ingest.driver_columns.arrays import numpy_of
from horizon_broker.ingest.driver_columns.index_lookup import batch_entries, partition_entries
from horizon_broker.ingest.key_index import (
    INDEX_PARTITION_DIR,
    is_resolution,
    levels_after_batch,
    resolution_directory,
    resolves_against_levels,
)
from horizon_broker.ingest.manifest import KeyIndexVersion
from horizon_broker.ingest.resolve import PLAIN_RESOLUTION_COLUMNS, SOURCE_FILE, SOURCE_POSITION
from horizon_broker.ingest.segments import (
    CHUNK_DIR_COLUMN,
    CLOSED_ROWS,
    KEY_INDEX_ROW_GROUP_BYTES,
    OPEN_ROWS,
    ROWS_DIR_COLUMN,
    SEGMENT_DIR_COLUMN,
    SEGMENT_ROW_GROUP_BYTES,
    WrittenSegment,
    collect_written,
    plain_segment_columns,
    unique_key,
)
from horizon_broker.ingest.storage import Storage
from horizon_broker.ingest.table import TableDefinition
from horizon_broker.watermark.catalog import VALID_FROM, VALID_UNTIL

if TYPE_CHECKING:
    from horizon_broker.ingest.server_table import ServerTable

DRIVER_COLUMNAR_BYTES = 512 * 1024 * 1024
"""The most a collected batch may hold in memory for the driver to take it (its resolution and
files take about as much again)."""
RESOLVE_ACTION = "resolve columns on the driver"
_JOINED = ("string", "large_string", "int8", "int16", "int32", "int64", "date32", "bool")
"""Key types pyarrow's join compares exactly (Arrow type names)."""


@dataclass(frozen=True, slots=True)
class ColumnarBatch:
    """A batch collected to the driver that the driver resolves as columns."""

    rows: Any
    """The enriched rows (:func:`horizon_broker.ingest.changelog.enrich`) as an Arrow table."""
    count: ChangeCount
    key_index: Mapping[int, KeyIndexVersion]
    timestamp_type: str
    workers: int
    full: bool = False
    """Whether the batch resolves against its partitions' whole index (one has
    :data:`horizon_broker.ingest.key_index.MAX_INDEX_LEVELS` levels): its level then holds every key and
    replaces the stack."""

    def write(
        self,
        server: ServerTable,
        base: int,
        numbers: Mapping[tuple[int, int], int],
        seq: int,
        segments_directory: str,
    ) -> tuple[ResolvedBatch, dict[tuple[int, int], WrittenSegment]]:
        """Resolve, write the level and the segments; returns the ``ResolvedBatch`` (without
        lazy versions: they are written) and what was written."""
        table, storage, steps = server.table, server.storage, server.steps
        writer = files.Writer(self.timestamp_type)
        directory = resolution_directory(server.root, server.server_id, seq)
        for path in (segments_directory, directory):
            storage.delete(path)  # what an earlier attempt left: Spark's writes overwrite too
        local = _local(storage)
        stamped = stamps.stamp_columns(self.rows, table, self.count.spans, base)
        if not table.upsert:
            versions = _append_versions(stamped, table, numbers)
            with steps.action("write segments"):
                self._write_segments(writer, local(segments_directory), versions, table)
            resolved = ResolvedBatch(None, stamped.num_rows)
            return resolved, collect_written(segments_directory, storage)
        key_index = self.key_index
        with steps.action(RESOLVE_ACTION):
            carried: dict[int, Any] = {}
            if self.full:
                index, carried = self._whole_index(table, storage, stamped)
            else:
                index = batch_entries(
                    table, storage, key_index, stamped, self.count.touched, self.workers
                )
            resolved = resolution.resolve_columns(stamped, index, table, numbers)
            summary = resolution.update_summary(resolved)
            self._write_level(writer, local(directory), resolved, table, carried)
        with steps.action("write segments"):
            versions = resolution.stored_versions(resolved, table)
            self._write_segments(writer, local(segments_directory), versions, table)
        levels = levels_after_batch(
            storage, key_index, directory, self.count.touched, not self.full
        )
        updates, pending_min = None, {}
        if summary.targets:
            updates = directory
            pending_min = {kp: summary.oldest for kp in self.count.touched}
        batch = ResolvedBatch(
            None, summary.rows, key_index=levels, updates=updates,
            pending_min=pending_min, targets=summary.targets,
        )  # fmt: skip
        return batch, collect_written(segments_directory, storage)

    def _whole_index(
        self, table: TableDefinition, storage: Storage, stamped: Any
    ) -> tuple[Any | None, dict[int, Any]]:
        """The entries of the batch's keys, and per partition those of every other key (the
        partitions' whole index, each key's newest entry), one partition per core at a time."""
        import pyarrow as pa

        def split(kp: int) -> tuple[Any | None, Any | None]:
            every = partition_entries(table, storage, self.key_index, [kp], workers=1)
            return _split_by_keys(every, stamped, table)

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            found = dict(zip(self.count.touched, pool.map(split, self.count.touched), strict=True))
        mine = [batch for batch, _ in found.values() if batch is not None and batch.num_rows]
        index = pa.concat_tables(mine, promote_options="permissive") if mine else None
        others = {kp: rest for kp, (_, rest) in found.items() if rest is not None}
        return index, others

    def _write_level(
        self,
        writer: files.Writer,
        directory: str,
        resolved: Any,
        table: Any,
        carried: Mapping[int, Any],
    ) -> None:
        """The batch's level: one file per key partition under ``_kpDir=<kp>``, in key order,
        then the ``carried`` entries of keys the batch has no record of (per partition: a full
        index) in key order too (:meth:`files.Writer.write_runs`: sorting both runs as one cost
        1.5 s of the 7M-key full level's 3 s), each partition's file built and written by one
        core at a time."""
        import pyarrow as pa
        import pyarrow.compute as pc

        schema = files.resolution_arrow_schema(table, self.rows.schema)
        level = resolved.select(schema.names).cast(schema)
        plain = [*PLAIN_RESOLUTION_COLUMNS, *unique_key(table.primary_key)]

        def write(kp: int) -> None:
            runs = [level.filter(pc.equal(level["_kp"], kp))]
            entries = resolution.level_entries(runs[0], table)
            kept = carried.get(kp)
            if kept is not None and kept.num_rows:
                rows = resolution.carried_columns(kept, resolved.schema, table)
                runs.append(rows.select(schema.names).cast(schema))
                entries = pa.concat_tables([entries, kept], promote_options="permissive")
            path = writer.write_runs(
                os.path.join(directory, f"{INDEX_PARTITION_DIR}={kp}"),
                runs,
                KEY_INDEX_ROW_GROUP_BYTES,
                plain,
            )
            level_cache.remember(path, table, entries)

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            list(pool.map(write, self.count.touched))

    def _write_segments(
        self, writer: files.Writer, directory: str, versions: Any, table: TableDefinition
    ) -> None:
        """An open and a closed file per segment, each omitted when empty: open versions by key,
        closed ones by ``validFrom``."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        schema = files.segment_arrow_schema(table, self.rows.schema)
        pk = list(table.primary_key)
        pairs, segment = resolution.distinct_pairs(
            numpy_of(versions["_chunk"]), numpy_of(versions["_seg"])
        )
        versions = versions.append_column("_segment", pa.array(segment, pa.int64()))
        is_open = pc.is_null(versions[VALID_UNTIL])
        parts = []
        # One sort per kind, each segment's rows then a slice (a filter per segment would scan
        # the batch once per segment: a backfill over many time chunks has thousands).
        for rows_dir, kind, order in (
            (OPEN_ROWS, is_open, [*pk, VALID_FROM]),
            (CLOSED_ROWS, pc.invert(is_open), [VALID_FROM]),
        ):
            chosen = versions.filter(kind)
            chosen = chosen.sort_by([(name, "ascending") for name in ["_segment", *order]])
            bounds = np.searchsorted(numpy_of(chosen["_segment"]), np.arange(len(pairs) + 1))
            for number, (chunk, seg) in enumerate(pairs):
                start, stop = int(bounds[number]), int(bounds[number + 1])
                if start == stop:
                    continue
                path = os.path.join(
                    directory,
                    f"{CHUNK_DIR_COLUMN}={chunk}",
                    f"{SEGMENT_DIR_COLUMN}={seg}",
                    f"{ROWS_DIR_COLUMN}={rows_dir}",
                )
                part = chosen.slice(start, stop - start).select(schema.names).cast(schema)
                parts.append((path, part))
        self._write_all(writer, parts, plain_segment_columns(schema.names, pk))

    def _write_all(
        self, writer: files.Writer, parts: Sequence[tuple[str, Any]], plain: Sequence[str]
    ) -> list[str]:
        """Write each ``(directory, table)`` as one file, one per core at a time (pyarrow
        writes outside the GIL); returns the files' paths."""

        def write(part: tuple[str, Any]) -> str:
            return writer.write(part[0], part[1], SEGMENT_ROW_GROUP_BYTES, plain)

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(write, parts))


def _split_by_keys(entries: Any | None, stamped: Any, table: TableDefinition) -> tuple[Any, Any]:
    """The entries of the batch's keys, and the others (None, None: no entries)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if entries is None:
        return None, None
    pk = list(table.primary_key)
    if len(pk) == 1:
        asked = pc.unique(stamped[pk[0]].combine_chunks()).cast(entries.schema.field(pk[0]).type)
        mine = numpy_of(pc.is_in(entries[pk[0]], value_set=asked))
    else:
        numbered = entries.select(pk).append_column(
            "_row", pa.array(np.arange(entries.num_rows, dtype=np.int64))
        )
        asked = stamped.select(pk).group_by(pk, use_threads=False).aggregate([])
        found = numbered.join(
            asked.cast(numbered.select(pk).schema), keys=pk, join_type="left semi"
        )
        mine = np.zeros(entries.num_rows, dtype=bool)
        mine[numpy_of(found["_row"])] = True
    return entries.filter(pa.array(mine)), entries.filter(pa.array(~mine))


def _append_versions(stamped: Any, table: TableDefinition, numbers: Mapping[Any, int]) -> Any:
    """An append table's versions: every record current from its commit on."""
    import pyarrow as pa

    segments = resolution.segment_numbers(stamped, numbers)
    if segments.null_count:
        raise Internal("no segment was reserved for a time chunk of the batch")
    columns = {name: stamped[name] for name in table.column_names}
    columns[VALID_FROM] = stamped["_ts"]
    columns[VALID_UNTIL] = pa.nulls(stamped.num_rows, pa.int64())
    for name in (SOURCE_FILE, SOURCE_POSITION, "_chunk"):
        columns[name] = stamped[name]
    return pa.table({**columns, "_seg": segments})


def _local(storage: Storage) -> Callable[[str], str]:
    def local(path: str) -> str:
        found = storage.local_path(path)
        if found is None:
            raise Internal(f"{path!r} is not on the local file system")
        return found

    return local


def columnar_batch(
    server: ServerTable, arrow: Any, key_index: Mapping[int, KeyIndexVersion]
) -> ColumnarBatch | None:
    """The batch when the driver resolves it as columns; None: the Spark path runs it."""
    import pyarrow.compute as pc

    table, spark = server.table, server.spark
    if not resolution.supported(table) or arrow.nbytes > DRIVER_COLUMNAR_BYTES:
        return None
    pk = list(table.primary_key) if table.upsert else []
    for name in pk:
        if str(arrow.schema.field(name).type) not in _JOINED:
            return None
        if arrow[name].null_count:
            return None  # a null key never joins its index entry: the Spark path's rules decide
    count = stamps.count_columns(arrow, table)
    if table.upsert:
        for kp in count.touched:
            version = key_index.get(kp)
            levels = version.levels if version is not None else ()
            if any(not is_resolution(level) for level in levels):
                return None  # an older layout: the Spark path reads or refuses it
            if any(server.storage.local_path(level) is None for level in levels):
                return None
    timestamps = spark.conf.get("spark.sql.parquet.outputTimestampType", "INT96")
    cores = min(int(spark.sparkContext.defaultParallelism), os.cpu_count() or 1)
    # A batch's rows come from a few files: their long paths as a dictionary cost every later
    # sort, take and filter a copy of an index instead of some 60 MB of text (500,000 rows).
    files_read = pc.dictionary_encode(arrow[SOURCE_FILE].combine_chunks())
    arrow = arrow.set_column(arrow.schema.get_field_index(SOURCE_FILE), SOURCE_FILE, files_read)
    full = table.upsert and not resolves_against_levels(key_index, count.touched)
    return ColumnarBatch(arrow, count, key_index, str(timestamps), max(1, cores), full)
