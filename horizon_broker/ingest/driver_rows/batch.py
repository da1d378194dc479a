"""Running a small batch on the driver: when it applies, and its resolution and files.

:func:`driver_can_take` says whether the driver may take a table's batches at all: its files are
local, its session writes in UTC, every column has a type the driver writes as Spark does, the key,
comparison and transaction columns compare exactly (no floating point or timestamps).
:func:`small_batch` takes a collected batch of at most the table's ``driver_batch_rows`` rows
(10,000 by default, about where the Spark path's fixed cost of about a second stops dominating the
Python work per row) when no key is null and the key index levels allow it. :meth:`SmallBatch.write`
then does what :func:`horizon_broker.ingest.batch.resolve_upserts` and :func:`horizon_broker.ingest.segments.write_segments` do,
on rows.

Key index levels: a small batch's level is small, and one level per micro-batch would soon reach
:data:`horizon_broker.ingest.key_index.MAX_INDEX_LEVELS`, after which a batch resolves against the whole index
on Spark. So a small batch folds the small levels on top of its partitions' stacks (at most
:data:`SMALL_LEVEL_ROWS` in all) into its own: their entries of keys the batch does not touch are
carried into its level as the Spark path's full join carries untouched keys, and its level
replaces them. A stack then grows by one level per :data:`SMALL_LEVEL_ROWS` entries of small
batches.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from horizon_broker._core.errors import Internal
from horizon_broker.ingest import key_index as levels_module
from horizon_broker.ingest import segment_files as files
from horizon_broker.ingest.commit import ResolvedBatch
from horizon_broker.ingest.commit_times import ChangeCount, SourceSpan
from horizon_broker.ingest.driver_rows.resolution import (
    IndexEntry,
    Key,
    carried_rows,
    epoch_ms,
    key_of,
    resolve_rows,
    stamp_rows,
    stored_rows,
    update_summary,
)
from horizon_broker.ingest.key_index import resolution_directory
from horizon_broker.ingest.manifest import KeyIndexVersion
from horizon_broker.ingest.resolve import SOURCE_FILE, SOURCE_POSITION
from horizon_broker.ingest.segments import WrittenSegment, collect_written
from horizon_broker.ingest.storage import Storage
from horizon_broker.ingest.table import TableDefinition
from horizon_broker.watermark.catalog import VALID_FROM, VALID_UNTIL

if TYPE_CHECKING:
    from horizon_broker.ingest.server_table import ServerTable

SMALL_LEVEL_ROWS = 8_192
"""Key index levels on top of a stack, up to this many rows in all, that a small batch folds
into its own level (each batch reads and writes them again)."""

_PASSED = r"string|boolean|tinyint|byte|smallint|short|int|integer|bigint|long|date|binary"
_EXACT = re.compile(rf"^(?:{_PASSED}|decimal\(\s*\d+\s*,\s*\d+\s*\))$")
"""Types the driver compares as Spark does and writes as Spark does."""
_WRITTEN = re.compile(
    rf"^(?:{_PASSED}|float|double|real|timestamp|decimal\(\s*\d+\s*,\s*\d+\s*\))$"
)
"""Types the driver only carries through (never compares), written as Spark does."""
_TIME = re.compile(r"^(?:tinyint|byte|smallint|short|int|integer|bigint|long|date|timestamp)$")


def driver_can_take(table: TableDefinition, session_conf: Mapping[str, str], local: bool) -> bool:
    """Whether a table's batches may run on the driver at all (pure): row by row
    (:mod:`horizon_broker.ingest.driver_rows`) or as columns (:mod:`horizon_broker.ingest.driver_columns`)."""
    if (
        table.driver_batch_rows < 1
        or not local
        or session_conf.get("spark.sql.session.timeZone", "UTC") not in ("UTC", "Z")
    ):
        return False
    types = {column.name: column.type.strip().lower() for column in table.columns}
    if any(not _WRITTEN.match(kind) for kind in types.values()):
        return False
    exact = [*table.primary_key, *table.comparison_columns]
    if table.transaction_column is not None:
        exact.append(table.transaction_column)
    if any(name not in types or not _EXACT.match(types[name]) for name in exact):
        return False
    if table.delete_column is not None and table.delete_column not in types:
        return False
    return table.time_column is None or bool(_TIME.match(types.get(table.time_column, "")))


@dataclass(frozen=True, slots=True)
class LevelPlan:
    """What a small batch does with one key partition's stack of key index levels."""

    below: tuple[str, ...]
    """The levels it keeps and looks its keys up in."""
    folded: tuple[str, ...]
    """The small levels on top whose entries it carries into its own level (which replaces them)."""


def plan_levels(
    key_index: Mapping[int, KeyIndexVersion],
    touched: Sequence[int],
    rows_of: Callable[[str], int],
) -> dict[int, LevelPlan] | None:
    """Each touched partition's :class:`LevelPlan`; None when a partition would still have more
    than :data:`horizon_broker.ingest.key_index.MAX_INDEX_LEVELS` levels (the Spark path then writes its full
    index)."""
    plans = {}
    for kp in touched:
        levels = key_index[kp].levels if kp in key_index else ()
        folded: list[str] = []
        total = 0
        for level in reversed(levels):
            total += rows_of(level)
            if total > SMALL_LEVEL_ROWS:
                break
            folded.insert(0, level)
        below = tuple(levels[: len(levels) - len(folded)])
        if len(below) + 1 > levels_module.MAX_INDEX_LEVELS:
            return None
        plans[kp] = LevelPlan(below, tuple(folded))
    return plans


def count_rows(rows: Sequence[Mapping[str, Any]], table: TableDefinition) -> ChangeCount:
    """:func:`horizon_broker.ingest.commit_times.count_changes` of collected rows."""
    from horizon_broker.ingest.granularity import chunk_start_ms

    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    spans: dict[tuple[str, int], list[int]] = {}
    for row in rows:
        event = epoch_ms(row[table.time_column]) if table.time_column is not None else None
        chunk = None if event is None else chunk_start_ms(table.granularity, event)
        group = groups.setdefault(
            (row[SOURCE_FILE], row["_pid"], row["_kp"], chunk),
            {SOURCE_FILE: row[SOURCE_FILE], "_pid": row["_pid"], "_kp": row["_kp"],
             "_tchunk": chunk, "_lo": row["_row"], "_hi": row["_row"], "_n": 0, "_tmin": None},
        )  # fmt: skip
        group["_lo"], group["_hi"] = min(group["_lo"], row["_row"]), max(group["_hi"], row["_row"])
        group["_n"] += 1
        if event is not None:
            group["_tmin"] = event if group["_tmin"] is None else min(group["_tmin"], event)
        span = spans.setdefault((row[SOURCE_FILE], row["_pid"]), [row["_row"], row["_row"], 0])
        span[0], span[1], span[2] = (
            min(span[0], row["_row"]),
            max(span[1], row["_row"]),
            span[2] + 1,
        )
    return ChangeCount(
        list(groups.values()),
        sorted(SourceSpan(f, pid, lo, hi, n) for (f, pid), (lo, hi, n) in spans.items()),
    )


@dataclass(frozen=True, slots=True)
class SmallBatch:
    """A batch collected to the driver that the driver takes."""

    rows: list[dict[str, Any]]
    user_schema: Any
    """The Arrow schema Spark gave the collected rows (the user columns' types)."""
    count: ChangeCount
    levels: dict[int, LevelPlan]
    timestamp_type: str

    def write(
        self,
        server: ServerTable,
        base: int,
        numbers: Mapping[tuple[int, int], int],
        seq: int,
        segments_directory: str,
    ) -> tuple[Any, dict[tuple[int, int], WrittenSegment]]:
        """Resolve, write the level and the segments; returns the ``ResolvedBatch`` (without
        lazy versions: they are written) and what was written."""
        table, storage, steps = server.table, server.storage, server.steps
        writer = files.Writer(self.timestamp_type)
        directory = resolution_directory(server.root, server.server_id, seq)
        for path in (segments_directory, directory):
            storage.delete(path)  # what an earlier attempt left: Spark's writes overwrite too
        stamped = stamp_rows(self.rows, table, self.count.spans, base)
        local = storage.local_path
        if not table.upsert:
            versions = [
                {**{n: row[n] for n in table.column_names}, VALID_FROM: row["_ts"],
                 VALID_UNTIL: None, SOURCE_FILE: row[SOURCE_FILE],
                 SOURCE_POSITION: row[SOURCE_POSITION], "_chunk": row["_chunk"],
                 "_seg": numbers[(row["_chunk"], row["_kp"])]}
                for row in stamped
            ]  # fmt: skip
            with steps.action("write segments"):
                files.write_segment_files(
                    writer, local(segments_directory), versions,
                    files.segment_arrow_schema(table, self.user_schema), table,
                )  # fmt: skip
            return ResolvedBatch(None, len(stamped)), collect_written(segments_directory, storage)
        with steps.action("resolve on the driver"):
            index, carried = self._index(table, storage, stamped)
            resolved = resolve_rows(stamped, index, table, numbers)
            summary = update_summary(resolved)
            level_rows = resolved + carried_rows(carried, table)
            written_levels = files.write_level(
                writer, local(directory), level_rows,
                files.resolution_arrow_schema(table, self.user_schema), table,
            )  # fmt: skip
        with steps.action("write segments"):
            files.write_segment_files(
                writer, local(segments_directory), stored_rows(resolved, table),
                files.segment_arrow_schema(table, self.user_schema), table,
            )  # fmt: skip
        levels = {}
        for kp, plan in self.levels.items():
            if kp not in written_levels:
                raise Internal(f"the resolution of key partition {kp} wrote no file")
            levels[kp] = (*plan.below, f"{directory}/{written_levels[kp].rsplit('/', 1)[-1]}")
        updates, pending_min = None, {}
        if summary.targets:
            updates = directory
            pending_min = {kp: summary.oldest for kp in self.levels}
        resolution = ResolvedBatch(
            None, summary.rows, key_index=levels, updates=updates,
            pending_min=pending_min, targets=summary.targets,
        )  # fmt: skip
        return resolution, collect_written(segments_directory, storage)

    def _index(
        self, table: TableDefinition, storage: Storage, stamped: Sequence[Mapping[str, Any]]
    ) -> tuple[dict[Key, IndexEntry], dict[Key, IndexEntry]]:
        """The current entry of each of the batch's keys, and the entries of the folded levels
        that the batch's level must carry (keys it has no record of)."""
        keys_by_kp: dict[int, set[Key]] = {}
        for row in stamped:
            keys_by_kp.setdefault(row["_kp"], set()).add(key_of(row, table))
        index: dict[Key, IndexEntry] = {}
        carried: dict[Key, IndexEntry] = {}
        for kp, plan in self.levels.items():
            keys = list(keys_by_kp.get(kp, ()))
            for level in plan.below:  # oldest first: a newer level's entry wins
                index.update(files.read_level_entries(_level_files(storage, level), table, keys))
            folded: dict[Key, IndexEntry] = {}
            for level in plan.folded:
                folded.update(files.read_level_entries(_level_files(storage, level), table, None))
            mine = keys_by_kp.get(kp, set())
            for key, entry in folded.items():
                if key in mine:
                    index[key] = entry
                else:
                    carried[key] = entry
        return index, carried


def small_batch(
    server: ServerTable, arrow: Any, key_index: Mapping[int, KeyIndexVersion]
) -> SmallBatch | None:
    """The batch when the driver takes it row by row (collected as Arrow by
    :func:`horizon_broker.ingest.driver_batches.collect_on_driver`); None: another path runs it."""
    table, storage, spark = server.table, server.storage, server.spark
    collected = arrow.to_pylist()
    if any(value is None for row in collected for value in key_of(row, table)):
        return None  # a null key never joins its index entry: the Spark path's rules decide
    count = count_rows(collected, table)
    levels = plan_levels(key_index, count.touched, lambda level: _level_rows(storage, level))
    if levels is None:
        return None
    timestamps = spark.conf.get("spark.sql.parquet.outputTimestampType", "INT96")
    return SmallBatch(collected, arrow.schema, count, levels, str(timestamps))


def _level_rows(storage: Storage, level: str) -> int:
    """A level's rows, from its footers (a level not on the local file system never counts as
    small)."""
    import pyarrow.parquet as pq

    paths = files.local_parquet_files(storage, level)
    if paths is None:
        return SMALL_LEVEL_ROWS + 1
    return sum(pq.read_metadata(path).num_rows for path in paths)


def _level_files(storage: Storage, level: str) -> list[str]:
    """A level's Parquet files (the table's root is local: :func:`collect` checked)."""
    paths = files.local_parquet_files(storage, level)
    if paths is None:
        raise Internal(f"key index level {level!r} is not on the local file system")
    return paths
