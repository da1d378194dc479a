"""Applying a few pending ``validUntil`` updates to small segments on the driver.

The updater rewrites every segment an update is for (:mod:`ingest.updater`); through Spark that
is two or three jobs whatever the size, about 0.5 to 1 s for one updated row, on the path of
every batch that updates a key. When the segments to rewrite and the resolutions holding the
updates are small (:data:`SMALL_REWRITE_ROWS` rows each in all) and the table lets small batches
run on the driver (``driver_batch_rows``), pyarrow reads them, joins each segment's rows with its
updates on (key, ``validFrom``), applies them as the Spark join does (``coalesce(validUntil, new
validUntil)``), drops the history retention lets go, and writes the rewrite with
:mod:`ingest.small.files`: open versions by key, closed ones by ``validFrom``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.errors import Internal
from ingest.segments import WrittenSegment, collect_written
from ingest.small import files
from ingest.small.batch import driver_can_take
from ingest.storage import Storage
from ingest.table import TableDefinition
from ingest.updater import Target, UpdatePlan
from watermark.catalog import VALID_FROM, VALID_UNTIL

SMALL_REWRITE_ROWS = 200_000
"""Rows of the segments to rewrite (and, apart, of the resolutions holding the updates) up to
which the driver rewrites them."""
_NEW_UNTIL = "_newUntil"


@dataclass(frozen=True, slots=True)
class SmallRewrite:
    """Rewritten segments computed on the driver, ready to write."""

    rewritten: dict[Target, tuple[Any, Any]]
    """(chunk start, root start) of each planned rewrite -> its open and closed rows (Arrow
    tables, sorted as they are written)."""
    timestamp_type: str

    def write(
        self, plan: UpdatePlan, directory: str, storage: Storage
    ) -> dict[tuple[int, int], WrittenSegment]:
        """Write every planned rewrite (an open and a closed file, each omitted when empty);
        returns what was written."""
        writer = files.Writer(self.timestamp_type)
        local = storage.local_path(directory)
        if local is None:
            raise Internal(f"the updater's directory {directory!r} is not local")
        storage.delete(directory)  # what an earlier attempt left: Spark's writes overwrite too
        for key, (open_rows, closed_rows) in sorted(self.rewritten.items()):
            base = os.path.join(local, f"_chunk={key[0]}", f"_seg={plan.new_partition[key]}")
            if open_rows.num_rows:
                writer.write(os.path.join(base, "_rows=open"), open_rows)
            if closed_rows.num_rows:
                writer.write(os.path.join(base, "_rows=closed"), closed_rows)
        return collect_written(directory, storage)


def applied(
    rows: Any, updates: Any, table: TableDefinition, horizon: int | None
) -> tuple[Any, Any]:
    """A segment's rows with their updates applied as :func:`ingest.updater.rewrite_segments`
    applies them, split into open rows (by key, then ``validFrom``) and closed ones (by
    ``validFrom``)."""
    import pyarrow.compute as pc

    keys = [*table.primary_key, VALID_FROM]
    joined = rows.join(updates, keys=keys, join_type="left outer")
    until = pc.coalesce(joined[VALID_UNTIL], joined[_NEW_UNTIL])
    result = joined.set_column(joined.schema.get_field_index(VALID_UNTIL), VALID_UNTIL, until)
    result = result.select(rows.schema.names)
    if horizon:
        kept = pc.or_(pc.is_null(until), pc.greater(until, horizon))
        result = result.filter(pc.fill_null(kept, True))
    is_open = pc.is_null(result[VALID_UNTIL])
    open_rows = result.filter(is_open).sort_by([(name, "ascending") for name in keys])
    closed_rows = result.filter(pc.invert(is_open)).sort_by([(VALID_FROM, "ascending")])
    return open_rows, closed_rows


def may_take(
    spark: Any, storage: Storage, table: TableDefinition, root: str, plan: UpdatePlan
) -> bool:
    """Whether the driver may rewrite the planned segments, as far as their descriptions tell
    (:func:`prepare` looks at the files)."""
    timezone = spark.conf.get("spark.sql.session.timeZone")
    local = storage.local_path(root) is not None
    if not driver_can_take(table, {"spark.sql.session.timeZone": timezone}, local):
        return False
    return sum(segment.row_count for segment in plan.current.values()) <= SMALL_REWRITE_ROWS


def prepare(
    spark: Any,
    storage: Storage,
    table: TableDefinition,
    resolutions: Sequence[str],
    plan: UpdatePlan,
    horizon: int | None,
) -> SmallRewrite | None:
    """The planned rewrites computed on the driver (nothing is written yet), once
    :func:`may_take` said yes; None: the files are too many rows or not readable as one table,
    and Spark rewrites them."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    segment_files = {
        key: [storage.local_path(path) for path in segment.location]
        for key, segment in plan.current.items()
    }
    update_files = [files.local_parquet_files(storage, path) for path in resolutions]
    if any(p is None for paths in segment_files.values() for p in paths) or any(
        paths is None for paths in update_files
    ):
        return None
    flat_updates = [path for paths in update_files for path in paths or ()]
    if sum(pq.read_metadata(path).num_rows for path in flat_updates) > SMALL_REWRITE_ROWS:
        return None
    pk = list(table.primary_key)
    wanted = [*pk, "_first", "_i_seg", "_i_deleted", "_i_validFrom", "_ts"]
    pieces = [pq.ParquetFile(path).read(columns=wanted) for path in flat_updates]
    try:
        found = pa.concat_tables(pieces, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    # :func:`ingest.resolve.supersedes_stored`: the rows that end a version an earlier batch stored.
    supersedes = pc.and_(
        pc.and_(pc.fill_null(found["_first"], False), pc.is_valid(found["_i_seg"])),
        pc.invert(pc.fill_null(found["_i_deleted"], True)),
    )
    found = found.filter(supersedes)
    updates = pa.table(
        {
            **{name: found[name] for name in pk},
            VALID_FROM: found["_i_validFrom"],
            _NEW_UNTIL: found["_ts"],
        }
    )
    rewritten = {}
    for key, paths in segment_files.items():
        tables = [pq.ParquetFile(path).read() for path in paths if path is not None]
        try:
            rows = pa.concat_tables(tables, promote_options="permissive")
            fields = [rows.schema.field(name) for name in pk]
            rest = [updates.schema.field(VALID_FROM), updates.schema.field(_NEW_UNTIL)]
            typed = updates.cast(pa.schema([*fields, *rest]))
            rewritten[key] = applied(rows, typed, table, horizon)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, KeyError):
            return None
    timestamps = spark.conf.get("spark.sql.parquet.outputTimestampType", "INT96")
    return SmallRewrite(rewritten, str(timestamps))
