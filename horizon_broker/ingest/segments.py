"""Writing segment files (open and closed versions apart, laid out for snapshot pruning) and
describing them.

Every segment's files live in their own directory ``<attempt>/_chunk=<chunk>/_seg=<partition>/``,
so the directory names identify the segment a file belongs to (the updater relies on it). Below
it, ``_rows=open/`` holds the versions not yet replaced (``validUntil IS NULL``), by key, and
``_rows=closed/`` the others, by ``validFrom``. The directory levels are the write's partition
columns: the chunk and partition number as the integers the rows carry (a per-row string such as
``<chunk>_<partition>`` cost a quarter of a second per million rows to build), under names that
ingestion reserves (so no user column can collide with them). The segment's description names
its open files and the greatest ``validUntil`` of its closed ones, so a reader at a recent
snapshot reads the open files without any validity test and skips the closed ones whole
(``horizon_broker.broker.spark.scan_layout``); inside a file, Parquet's min/max statistics let a key lookup skip all
but a page or two, and time travel what was not yet written. Every writer (a batch, the updater,
a compaction) turns what it wrote into the :class:`Segment` it announces with
:func:`describe_segment`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from horizon_broker.ingest.resolve import SOURCE_POSITION
from horizon_broker.ingest.storage import FileInfo, Storage
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.catalog import VALID_FROM, VALID_UNTIL

CHUNK_DIR_COLUMN = "_chunk"
SEGMENT_DIR_COLUMN = "_seg"
ROWS_DIR_COLUMN = "_rows"
"""The last directory level of a segment: ``open`` or ``closed`` versions."""
OPEN_ROWS = "open"
CLOSED_ROWS = "closed"
_OPEN_DIR = f"/{ROWS_DIR_COLUMN}={OPEN_ROWS}/"
SEGMENT_ROW_GROUP_BYTES = 32 * 1024 * 1024
"""Row groups of segment files, ingestion's and compaction's alike. Spark scans a compacted scale
factor 1 lineitem in 8 MiB groups 1.3-1.6x slower than in 32 MiB ones (TPC-H Q06 / Q19); before
a compaction, lineitem's scan time came near plain Spark's with them (Q18 110 / 97 ms against
232 / 62, Q21 302 / 211 against 449 / 170), though the queries' total did not move (three files a
key partition cost it,
``bench/runs/2026-11-30-tpch-sf1-ingest-32mib/``). The broker's key lookups read a group too
large to keep by pages, not whole (:mod:`horizon_broker.broker.direct_lookup.page_rows`); the
updater reads a segment it rewrites whole, whatever its groups."""
KEY_INDEX_ROW_GROUP_BYTES = 8 * 1024 * 1024
"""Row groups of key index files written on the driver: a batch's resolution decodes whole the
index row groups that may hold its keys, so these stay small."""
CONCURRENT_WRITERS = 16
"""Segment (or key index) files one Spark task keeps open at once (see
:func:`keep_row_order_in_partitioned_writes`)."""
FOOTER_READERS = 8
_SEGMENT_DIR = re.compile(rf"^(.*/{CHUNK_DIR_COLUMN}=(-?\d+)/{SEGMENT_DIR_COLUMN}=(\d+))/")
"""A segment file's ``.../_chunk=<chunk>/_seg=<partition>`` directory, chunk and partition."""


def tag_of_file(path: str) -> tuple[int, int] | None:
    """``(chunk_start, partition)`` of a segment file written by :func:`write_segments`."""
    match = _SEGMENT_DIR.match(path)
    return (int(match.group(2)), int(match.group(3))) if match else None


def segment_directory_of(path: str) -> str | None:
    """The ``.../_chunk=<chunk>/_seg=<partition>`` directory holding a segment file written by
    :func:`write_segments` (None for any other path)."""
    match = _SEGMENT_DIR.match(path)
    return match.group(1) if match else None


@dataclass(frozen=True, slots=True)
class WrittenSegment:
    chunk_start: int
    partition: int
    files: tuple[FileInfo, ...]

    @property
    def size_bytes(self) -> int:
        return sum(info.size for info in self.files)

    @property
    def locations(self) -> tuple[str, ...]:
        return tuple(info.path for info in self.files)

    @property
    def open_locations(self) -> tuple[str, ...]:
        """The files holding only versions whose ``validUntil`` is NULL."""
        return tuple(path for path in self.locations if is_open_file(path))


def is_open_file(path: str) -> bool:
    """True for a segment file :func:`write_segments` wrote under ``_rows=open/``."""
    return _OPEN_DIR in path


def keep_row_order_in_partitioned_writes(session: Any) -> None:
    """Let a partitioned write keep each task's rows in their order (up to
    :data:`CONCURRENT_WRITERS` open files per task) instead of sorting them by the partition
    columns first, which would undo the order :func:`write_segments` sorts them in.
    """
    session.conf.set("spark.sql.optimizer.plannedWrite.enabled", "false")
    session.conf.set("spark.sql.maxConcurrentOutputFileWriters", str(CONCURRENT_WRITERS))


UNION_PARTITIONING = "spark.sql.unionOutputPartitioning"


@contextmanager
def union_keeps_partitions(session: Any) -> Iterator[None]:
    """Plan writes whose union of one-partition children (a coalesced read per output
    segment) stays one partition per child: Spark otherwise gives such a union its
    children's partitioning, one partition for all of them (one task, one core). The setting
    is read when a write is planned."""
    previous = session.conf.get(UNION_PARTITIONING, None)
    session.conf.set(UNION_PARTITIONING, "false")
    try:
        yield
    finally:
        if previous is None:
            session.conf.unset(UNION_PARTITIONING)
        else:
            session.conf.set(UNION_PARTITIONING, previous)


def plain_encoded(columns: Sequence[str]) -> dict[str, str]:
    """Parquet write options that store ``columns`` without a dictionary.

    A column whose values are all distinct (commit timestamps, source positions, a one-column
    primary key) fills a dictionary page for nothing: Parquet builds it for about the first 100,000
    values of every row group, then encodes them again plainly. Other columns keep theirs.
    """
    return {f"parquet.enable.dictionary#{name}": "false" for name in columns}


def unique_key(primary_key: Sequence[str]) -> tuple[str, ...]:
    """The primary key when it is one column (distinct values); nothing for a composite key, whose
    columns may each repeat (a tenant, a region)."""
    return tuple(primary_key) if len(primary_key) == 1 else ()


def write_segments(
    frame: Any,
    columns: Sequence[str],
    directory: str,
    segment_count: int,
    storage: Storage,
    *,
    primary_key: Sequence[str] = (),
    shuffle: bool = True,
    row_group_bytes: int | None = None,
) -> dict[tuple[int, int], WrittenSegment]:
    """Write ``frame`` (which has ``_chunk`` and ``_seg``) as an open and a closed file per
    (chunk, partition), each omitted when it would be empty, in row groups of about
    ``row_group_bytes`` (:data:`SEGMENT_ROW_GROUP_BYTES` when None).

    Open versions are sorted by ``primary_key`` (row-group statistics on the key then narrow a
    key lookup to about one row group per file), closed ones by ``validFrom`` (so time travel
    skips what was not yet written). ``shuffle=False`` when every segment's rows are already in
    one Spark task (no repartition). Returns what was written, keyed by
    ``(chunk_start, partition)``.

    A task's rows are sorted by segment first, so the write fills one file at a time: led by the
    key, the rows of the segments a task holds (a task reads several small files) came
    interleaved, and the write switched files on nearly every row. The segment columns tie on
    every comparison, but a task's rows arrive in runs already sorted (each file it reads is),
    which the sort merges cheaply: side by side, as fast as one task per file.
    """
    from pyspark.sql import functions as F

    is_open = F.col(VALID_UNTIL).isNull()
    # Open versions by key, then closed ones (a null key sorts last) by validFrom.
    by_key = [F.when(is_open, F.col(name)).asc_nulls_last() for name in primary_key]
    keep_row_order_in_partitioned_writes(frame.sparkSession)

    if shuffle:
        frame = frame.repartition(max(1, min(segment_count, 512)), "_chunk", "_seg")
    (
        frame.sortWithinPartitions("_chunk", "_seg", *by_key, VALID_FROM)
        .select(
            *columns,
            F.col("_chunk").alias(CHUNK_DIR_COLUMN),
            F.col("_seg").alias(SEGMENT_DIR_COLUMN),
            F.when(is_open, F.lit(OPEN_ROWS)).otherwise(F.lit(CLOSED_ROWS)).alias(ROWS_DIR_COLUMN),
        )
        .write.mode("overwrite")
        .option("parquet.block.size", row_group_bytes or SEGMENT_ROW_GROUP_BYTES)
        .options(**plain_encoded(plain_segment_columns(columns, primary_key)))
        .partitionBy(CHUNK_DIR_COLUMN, SEGMENT_DIR_COLUMN, ROWS_DIR_COLUMN)
        .parquet(directory)
    )
    return collect_written(directory, storage)


def plain_segment_columns(columns: Sequence[str], primary_key: Sequence[str]) -> list[str]:
    """Segment columns of distinct values: the validity columns, the source position and a
    one-column key (see :func:`plain_encoded`)."""
    distinct = {VALID_FROM, VALID_UNTIL, SOURCE_POSITION, *unique_key(primary_key)}
    return [name for name in columns if name in distinct]


@dataclass(frozen=True, slots=True)
class FooterSummary:
    """What a segment's file footers say about it (no scan)."""

    rows: int
    max_valid_from: int | None
    """The greatest ``validFrom`` of its rows (None: a footer keeps no statistics for it)."""
    max_valid_until: int | None
    """The greatest ``validUntil`` of its closed files' rows (None: it has none, or a footer
    keeps no statistics for it)."""


def footer_summaries(storage: Storage, written: Sequence[WrittenSegment]) -> list[FooterSummary]:
    """Each segment's :class:`FooterSummary`, from its files' footers.

    The files are read concurrently: through Hadoop a footer takes a few round trips to the JVM,
    which serves several threads at once (local footers are read by pyarrow, see ``Storage``).
    """
    paths = [path for item in written for path in item.locations]

    def read(path: str) -> tuple[int, tuple[Any, ...]]:
        if is_open_file(path):
            return storage.parquet_footer(path, VALID_FROM)
        return storage.parquet_footer(path, VALID_FROM, VALID_UNTIL)

    with ThreadPoolExecutor(max_workers=max(1, min(FOOTER_READERS, len(paths)))) as pool:
        footers = dict(zip(paths, pool.map(read, paths), strict=True))
    summaries = []
    for item in written:
        mine = [footers[path] for path in item.locations]
        closed = [footers[path] for path in item.locations if not is_open_file(path)]
        summaries.append(
            FooterSummary(
                rows=sum(count for count, _ in mine),
                max_valid_from=_greatest(mine, 0),
                max_valid_until=_greatest(closed, 1) if closed else None,
            )
        )
    return summaries


def describe_segment(
    written: WrittenSegment,
    summary: FooterSummary,
    *,
    table: str,
    interval: Interval,
    version: str,
    server: str,
    core_partitions: int = 0,
    root_range: tuple[int, int] | None = None,
    minor_version: int = 0,
    applied_through: int | None = None,
) -> Segment:
    """The description of a segment :func:`write_segments` wrote, as it is announced: its files
    and what their footers say. Every writer describes its segments here: a batch (a
    first-generation segment: the defaults), the updater and compactions (overwrite segments:
    the root range they cover, their minor version, up to which commit they hold every update).
    """
    return Segment(
        table=table,
        interval=interval,
        version=version,
        partition=written.partition,
        core_partitions=core_partitions,
        root_start=None if root_range is None else root_range[0],
        root_end=None if root_range is None else root_range[1],
        minor_version=minor_version,
        atomic_update_group_size=1,
        location=written.locations,
        row_count=summary.rows,
        size_bytes=written.size_bytes,
        server=server,
        max_valid_from=summary.max_valid_from,
        open_files=written.open_locations,
        max_valid_until=summary.max_valid_until,
        applied_through=applied_through,
    )


def _greatest(footers: Sequence[tuple[int, tuple[Any, ...]]], column: int) -> int | None:
    """The greatest of the files' maxima of one column; None when a file with rows states none."""
    if any(count and maxima[column] is None for count, maxima in footers):
        return None
    return max((int(m[column]) for _, m in footers if m[column] is not None), default=None)


def collect_written(directory: str, storage: Storage) -> dict[tuple[int, int], WrittenSegment]:
    grouped: dict[tuple[int, int], list[FileInfo]] = {}
    for info in storage.list_files(directory, suffix=".parquet"):
        tag = tag_of_file(info.path)
        if tag is not None:
            grouped.setdefault(tag, []).append(info)
    return {
        tag: WrittenSegment(tag[0], tag[1], tuple(files)) for tag, files in sorted(grouped.items())
    }
