"""Applying pending ``validUntil`` updates to segments on the driver, with pyarrow.

The updater rewrites every segment an update is for (:mod:`horizon_broker.ingest.updater`); through Spark that
is two or three jobs whatever the size, about 0.5 to 1 s for one updated row, on the path of
every batch that updates a key, and for large rewrites Spark's row-by-row join, sort and write
cost four to five times what pyarrow's columnar ones do on the same machine. When the table lets
batches run on the driver (``driver_batch_rows``, local storage), no rewrite (a segment, or the
small ones it merges, :mod:`horizon_broker.ingest.rewrite_groups`) is over
:data:`DRIVER_SEGMENT_ROWS` rows or :data:`DRIVER_SEGMENT_BYTES`, and there are at most
:data:`DRIVER_UPDATE_ROWS` updates, pyarrow reads the updates once, and then, a few rewrites at
a time, reads each one's rows, joins them with its updates on (key, ``validFrom``), applies
them as the Spark join does (``coalesce(validUntil, new validUntil)``), drops the history
retention lets go, and writes the rewrite with :mod:`horizon_broker.ingest.segment_files`: open versions by key,
closed ones by ``validFrom``. A segment's closed files are kept as they are (copied into the
rewrite byte for byte, next to one file of the versions it closes) up to
:data:`MAX_CLOSED_FILES`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from horizon_broker._core.errors import Internal
from horizon_broker.ingest import segment_files as files
from horizon_broker.ingest.driver_rows.batch import driver_can_take
from horizon_broker.ingest.segments import (
    CLOSED_ROWS,
    OPEN_ROWS,
    ROWS_DIR_COLUMN,
    SEGMENT_ROW_GROUP_BYTES,
    WrittenSegment,
    collect_written,
    is_open_file,
    plain_segment_columns,
)
from horizon_broker.ingest.storage import Storage
from horizon_broker.ingest.table import TableDefinition
from horizon_broker.ingest.updater import REWRITE_TARGET_BYTES, Target, UpdatePlan
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.catalog import VALID_FROM, VALID_UNTIL

DRIVER_SEGMENT_ROWS = 2_000_000
"""Rows of the largest rewrite (the segments it merges together) up to which the driver
rewrites them (one rewrite is in memory per worker at a time)."""
DRIVER_SEGMENT_BYTES = REWRITE_TARGET_BYTES
"""Bytes (Parquet, on disk) of the largest rewrite the driver takes: a wide table's rows
take several times that in memory, and a join and a sort copy them."""
DRIVER_UPDATE_ROWS = 5_000_000
"""Pending updates up to which the driver applies them (they are in memory for the whole run;
the resolutions holding them are read one file at a time)."""
MAX_CLOSED_FILES = 4
"""Closed-version files a segment's rewrite may leave before it merges them into one (see
:func:`closed_files_stay`): readers at a recent snapshot skip closed files whole, time travel
and compaction read a few more files."""
_NEW_UNTIL = "_newUntil"


@dataclass(frozen=True, slots=True)
class DriverRewrite:
    """The planned rewrites, checked and ready to compute and write on the driver."""

    table: TableDefinition
    updates: dict[Target, Any]
    """(chunk start, root start) of each planned rewrite -> its pending updates: key columns,
    ``validFrom`` and the new ``validUntil`` (Arrow, typed like the segment's key columns)."""
    segment_files: dict[Target, list[str]]
    """(chunk start, root start) of each planned rewrite -> the local files of its segments."""
    horizon: int | None
    timestamp_type: str
    workers: int

    def write(
        self, plan: UpdatePlan, directory: str, storage: Storage
    ) -> dict[tuple[int, int], WrittenSegment] | None:
        """Rewrite every planned segment, ``workers`` at a time (pyarrow's reading, joining,
        sorting and writing run outside the GIL): an open file and a closed one each, omitted
        when empty, and the segment's closed files copied in as they are while
        :func:`closed_files_stay`. Returns what was written; None when pyarrow could not join or sort a segment's
        rows after all (:func:`prepare` checks their schemas), for Spark to rewrite them into
        the same directory (its write replaces what this one left)."""
        import pyarrow as pa

        writer = files.Writer(self.timestamp_type)
        local = storage.local_path(directory)
        if local is None:
            raise Internal(f"the updater's directory {directory!r} is not local")
        storage.delete(directory)  # what an earlier attempt left: Spark's writes overwrite too

        def rewrite(key: Target) -> None:
            import pyarrow.parquet as pq

            paths = self.segment_files[key]
            open_paths = [path for path in paths if is_open_file(path)]
            closed_paths = [path for path in paths if not is_open_file(path)]
            kept = bool(open_paths) and closed_files_stay(closed_paths, self.horizon)
            opened = [pq.ParquetFile(path).read() for path in open_paths]
            closed = [] if kept else [pq.ParquetFile(path).read() for path in closed_paths]
            # A merge's segments may have been written under different schema versions (a
            # column added since, a type widened): both sides take every column, newest type.
            schema = pa.unify_schemas(
                [part.schema for part in (*opened, *closed)], promote_options="permissive"
            )
            open_rows, closed_rows = applied(
                _concatenated([schema.empty_table(), *opened]),
                _concatenated([schema.empty_table(), *closed]),
                self.updates[key], self.table, self.horizon, open_sorted=len(opened) == 1,
            )  # fmt: skip
            base = os.path.join(local, f"_chunk={key[0]}", f"_seg={plan.new_partition[key]}")
            plain = plain_segment_columns(open_rows.schema.names, self.table.primary_key)
            for name, part in ((OPEN_ROWS, open_rows), (CLOSED_ROWS, closed_rows)):
                if part.num_rows:
                    rows_dir = os.path.join(base, f"{ROWS_DIR_COLUMN}={name}")
                    writer.write(rows_dir, part, SEGMENT_ROW_GROUP_BYTES, plain)
            if kept:
                for path in closed_paths:
                    files.copy_into(path, os.path.join(base, f"{ROWS_DIR_COLUMN}={CLOSED_ROWS}"))

        try:
            with ThreadPoolExecutor(self.workers, thread_name_prefix="rewrite") as pool:
                for _ in pool.map(rewrite, sorted(self.segment_files)):
                    pass
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            return None
        return collect_written(directory, storage)


def applied(
    open_rows: Any,
    closed_rows: Any,
    updates: Any,
    table: TableDefinition,
    horizon: int | None,
    *,
    open_sorted: bool = False,
) -> tuple[Any, Any]:
    """A segment's open and closed rows with their updates applied as
    :func:`horizon_broker.ingest.updater.rewrite_segments` applies them (``coalesce(validUntil, new
    validUntil)``, history before ``horizon`` dropped), split again into open rows (by key, then
    ``validFrom``) and closed ones (by ``validFrom``).

    Only open rows can change: a closed row keeps its ``validUntil``. So the updates are joined
    with the open rows' key and ``validFrom`` alone, the rows they close move to the closed side,
    and the others stay in their order: a segment's one open file is written sorted, so its rest
    needs no sort (``open_sorted``). Against a join and sort of every row it halves the work of a
    rewrite where most rows stay open."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = [*table.primary_key, VALID_FROM]
    numbered = open_rows.select(keys).append_column(
        "_row", pa.array(np.arange(open_rows.num_rows, dtype=np.int64))
    )
    hits = numbered.join(updates, keys=keys, join_type="inner", use_threads=False)
    rows = np.asarray(hits["_row"].to_numpy(), dtype=np.int64)
    if len(np.unique(rows)) != len(rows):
        raise Internal("two pending updates end the same version of a key")
    closing = np.zeros(open_rows.num_rows, dtype=bool)
    closing[rows] = True
    newly_closed = open_rows.take(pa.array(rows))
    position = open_rows.schema.get_field_index(VALID_UNTIL)
    until = hits[_NEW_UNTIL].cast(open_rows.schema.field(VALID_UNTIL).type)
    newly_closed = newly_closed.set_column(position, open_rows.schema.field(VALID_UNTIL), until)
    still_open = open_rows.filter(pa.array(~closing))
    if not open_sorted:
        still_open = still_open.sort_by([(name, "ascending") for name in keys])
    closed = _concatenated([closed_rows, newly_closed.cast(closed_rows.schema)])
    if horizon:
        kept = pc.or_(pc.is_null(closed[VALID_UNTIL]), pc.greater(closed[VALID_UNTIL], horizon))
        closed = closed.filter(pc.fill_null(kept, True))
    return still_open, closed.sort_by([(VALID_FROM, "ascending")])


def closed_files_stay(paths: Sequence[str], horizon: int | None) -> bool:
    """Whether a rewrite keeps a segment's closed files as they are (copied into the rewrite)
    and writes the rows it closes as one more: a closed row never changes, so decoding and
    encoding them again (a third of a rewrite once a table has history) buys nothing until
    they are :data:`MAX_CLOSED_FILES` or retention drops some of them (their footers say a
    ``validUntil`` at or before ``horizon``); then they are merged into one file again."""
    if not paths or len(paths) + 1 > MAX_CLOSED_FILES:
        return False
    if not horizon:
        return True
    return all(
        oldest is not None and oldest > horizon
        for oldest in (_least_valid_until(path) for path in paths)
    )


def _least_valid_until(path: str) -> int | None:
    """The least ``validUntil`` a closed file's footer records (None: it keeps no statistics)."""
    import pyarrow.parquet as pq

    metadata = pq.read_metadata(path)
    columns = [
        i for i in range(metadata.num_columns) if metadata.schema.column(i).path == VALID_UNTIL
    ]
    if not columns:
        return None
    column = columns[0]
    least = None
    for group in range(metadata.num_row_groups):
        statistics = metadata.row_group(group).column(column).statistics
        if statistics is None or not statistics.has_min_max:
            return None
        least = statistics.min if least is None else min(least, statistics.min)
    return least


def may_take(
    spark: Any, storage: Storage, table: TableDefinition, root: str, plan: UpdatePlan
) -> bool:
    """Whether the driver may rewrite the planned segments, as far as their descriptions tell
    (:func:`prepare` looks at the files)."""
    timezone = spark.conf.get("spark.sql.session.timeZone")
    local = storage.local_path(root) is not None
    if not driver_can_take(table, {"spark.sql.session.timeZone": timezone}, local):
        return False
    return driver_can_hold(plan.inputs.values())


def driver_can_hold(groups: Iterable[Sequence[Segment]]) -> bool:
    """Whether every rewrite (its segments together) is small enough for the driver's memory
    (one with a segment of unknown size is not)."""
    return all(
        all(segment.row_count > 0 and segment.size_bytes > 0 for segment in group)
        and sum(segment.row_count for segment in group) <= DRIVER_SEGMENT_ROWS
        and sum(segment.size_bytes for segment in group) <= DRIVER_SEGMENT_BYTES
        for group in groups
    )


def prepare(
    spark: Any,
    storage: Storage,
    table: TableDefinition,
    resolutions: Sequence[str],
    plan: UpdatePlan,
    horizon: int | None,
) -> DriverRewrite | None:
    """The pending updates read and the segments' files checked (nothing is written yet), once
    :func:`may_take` said yes; None: too many updates, or files not readable as one table or
    not joinable with the updates, and Spark rewrites them."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    segment_files = {
        key: [storage.local_path(path) for segment in group for path in segment.location]
        for key, group in plan.inputs.items()
    }
    update_files = [files.local_parquet_files(storage, path) for path in resolutions]
    if any(p is None for paths in segment_files.values() for p in paths) or any(
        paths is None for paths in update_files
    ):
        return None
    flat_updates = [path for paths in update_files for path in paths or ()]
    pk = list(table.primary_key)
    wanted = [*pk, "_first", "_i_chunk", "_i_seg", "_i_deleted", "_i_validFrom", "_ts"]
    pieces, kept = [], 0
    for path in flat_updates:  # one resolution file in memory at a time, then its updates only
        piece = pq.ParquetFile(path).read(columns=wanted)
        # :func:`horizon_broker.ingest.resolve.supersedes_stored`: the rows that end a version an earlier
        # batch stored.
        supersedes = pc.and_(
            pc.and_(pc.fill_null(piece["_first"], False), pc.is_valid(piece["_i_seg"])),
            pc.invert(pc.fill_null(piece["_i_deleted"], True)),
        )
        piece = piece.filter(supersedes)
        kept += piece.num_rows
        if kept > DRIVER_UPDATE_ROWS:
            return None
        pieces.append(piece)
    try:
        found = pa.concat_tables(pieces, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    # Each update to the rewrite of the segment it is for (a compacted segment covers several
    # root partitions, a rewrite may merge several segments): a rewrite joins its own updates.
    rewrite_of = {target: index for index, target in enumerate(sorted(plan.inputs))}
    targets = pa.table(
        {
            "_i_chunk": pa.array([chunk for chunk, _ in plan.targets], pa.int64()),
            "_i_seg": pa.array([root for _, root in plan.targets], pa.int32()),
            "_i_rewrite": pa.array([rewrite_of[plan.targets[t]] for t in plan.targets], pa.int32()),
        }
    )
    try:
        found = found.join(targets, keys=["_i_chunk", "_i_seg"], join_type="inner")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    # Sorted by rewrite once, so each segment's updates are one slice (no scan per segment).
    found = found.sort_by("_i_rewrite")
    updates = pa.table(
        {
            **{name: found[name] for name in pk},
            VALID_FROM: found["_i_validFrom"],
            _NEW_UNTIL: found["_ts"],
        }
    )
    bounds = np.searchsorted(found["_i_rewrite"].to_numpy(), np.arange(len(rewrite_of) + 1))
    per_rewrite: dict[Target, Any] = {}
    for key, paths in segment_files.items():
        index = rewrite_of[key]
        mine = updates.slice(bounds[index], bounds[index + 1] - bounds[index])
        try:
            schema = pa.unify_schemas(
                [pq.read_schema(path) for path in paths if path is not None],
                promote_options="permissive",
            )
            fields = [schema.field(name) for name in pk]
            rest = [mine.schema.field(VALID_FROM), mine.schema.field(_NEW_UNTIL)]
            per_rewrite[key] = mine.cast(pa.schema([*fields, *rest]))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, KeyError):
            return None
    timestamps = spark.conf.get("spark.sql.parquet.outputTimestampType", "INT96")
    cores = min(int(spark.sparkContext.defaultParallelism), os.cpu_count() or 1)
    workers = max(1, min(len(segment_files), cores))
    return DriverRewrite(
        table,
        per_rewrite,
        {key: [p for p in paths if p is not None] for key, paths in segment_files.items()},
        horizon,
        str(timestamps),
        workers,
    )


def _concatenated(tables: Sequence[Any]) -> Any:
    import pyarrow as pa

    return pa.concat_tables(tables, promote_options="permissive")
