"""Writing segment files: one Parquet file per segment, laid out for snapshot pruning.

Every segment's files live in their own directory ``<attempt dir>/segment=<chunk>_<partition>/``,
so the directory name identifies the segment a file belongs to (the updater relies on it). Inside a
file, current versions (``validUntil IS NULL``) come first, by key, then history by ``validFrom``:
Parquet's min/max statistics (per row group, and per page through the column indexes Spark's
reader uses) then let a reader skip history, and a key lookup all but a page or two of the current
versions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ingest.storage import FileInfo, Storage
from watermark.catalog import VALID_FROM, VALID_UNTIL

SEGMENT_DIR_COLUMN = "segment"
ROW_GROUP_BYTES = 8 * 1024 * 1024
CONCURRENT_WRITERS = 16
"""Segment (or key index) files one Spark task keeps open at once (see
:func:`keep_row_order_in_partitioned_writes`)."""
FOOTER_READERS = 8
_TAG = re.compile(r"/segment=(-?\d+)_(\d+)/")


def segment_tag(chunk_start: int, partition: int) -> str:
    return f"{chunk_start}_{partition}"


def tag_of_file(path: str) -> tuple[int, int] | None:
    """``(chunk_start, partition)`` of a segment file written by :func:`write_segments`."""
    match = _TAG.search(path)
    return (int(match.group(1)), int(match.group(2))) if match else None


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


def keep_row_order_in_partitioned_writes(session: Any) -> None:
    """Let a partitioned write keep each task's rows in their order: one open file per partition
    (up to :data:`CONCURRENT_WRITERS`) instead of a sort by the partition column first.

    A task mostly holds one segment. Sorted by segment first, every comparison of the sort ties on
    its prefix and falls back to comparing whole rows: more than twice the time of a sort led by
    the key. Past :data:`CONCURRENT_WRITERS` partitions in one task, Spark sorts the rest by
    partition (the files stay right; their order inside may not).
    """
    session.conf.set("spark.sql.optimizer.plannedWrite.enabled", "false")
    session.conf.set("spark.sql.maxConcurrentOutputFileWriters", str(CONCURRENT_WRITERS))


def write_segments(
    frame: Any,
    columns: Sequence[str],
    directory: str,
    segment_count: int,
    storage: Storage,
    *,
    primary_key: Sequence[str] = (),
    shuffle: bool = True,
) -> dict[tuple[int, int], WrittenSegment]:
    """Write ``frame`` (which has ``_chunk`` and ``_seg``) as one file per (chunk, partition).

    Current versions come first, sorted by ``primary_key`` (row-group statistics on the key then
    narrow a key lookup to about one row group per file), then history by ``validFrom`` (so time
    travel skips what was not yet written). A current version whose first key column is null
    sorts among the history (a layout blemish, never a wrong answer). ``shuffle=False`` when
    every segment's rows are already in one Spark task (no repartition). Returns what was
    written, keyed by ``(chunk_start, partition)``.
    """
    from pyspark.sql import functions as F

    current = F.col(VALID_UNTIL).isNull()
    # Led by the key (nulls, i.e. history, last), so the sort compares by its prefix.
    order = [*[F.when(current, F.col(name)).asc_nulls_last() for name in primary_key], VALID_FROM]
    keep_row_order_in_partitioned_writes(frame.sparkSession)

    tagged = frame.withColumn(
        SEGMENT_DIR_COLUMN,
        F.concat(F.col("_chunk").cast("string"), F.lit("_"), F.col("_seg").cast("string")),
    )
    if shuffle:
        tagged = tagged.repartition(max(1, min(segment_count, 512)), SEGMENT_DIR_COLUMN)
    (
        tagged.sortWithinPartitions(*order)
        .select(*columns, SEGMENT_DIR_COLUMN)
        .write.mode("overwrite")
        .option("parquet.block.size", ROW_GROUP_BYTES)
        .partitionBy(SEGMENT_DIR_COLUMN)
        .parquet(directory)
    )
    return collect_written(directory, storage)


def footer_summaries(
    storage: Storage, written: Sequence[WrittenSegment]
) -> list[tuple[int, int | None]]:
    """Each segment's row count and greatest ``validFrom``, from its files' footers (no scan).

    The greatest ``validFrom`` is ``None`` (unknown) when a footer keeps no statistics for it.
    The files are read concurrently: through Hadoop a footer takes a few round trips to the JVM,
    which serves several threads at once (local footers are read by pyarrow, see ``Storage``).
    """
    paths = [path for item in written for path in item.locations]
    with ThreadPoolExecutor(max_workers=max(1, min(FOOTER_READERS, len(paths)))) as pool:
        read = pool.map(lambda path: storage.parquet_footer(path, VALID_FROM), paths)
        footers = dict(zip(paths, read, strict=True))
    summaries = []
    for item in written:
        mine = [footers[path] for path in item.locations]
        rows = sum(count for count, _ in mine)
        if any(count and greatest is None for count, greatest in mine):
            summaries.append((rows, None))
        else:
            greatest = max((int(g) for _, g in mine if g is not None), default=None)
            summaries.append((rows, greatest))
    return summaries


def collect_written(directory: str, storage: Storage) -> dict[tuple[int, int], WrittenSegment]:
    grouped: dict[tuple[int, int], list[FileInfo]] = {}
    for info in storage.list_files(directory, suffix=".parquet"):
        tag = tag_of_file(info.path)
        if tag is not None:
            grouped.setdefault(tag, []).append(info)
    return {
        tag: WrittenSegment(tag[0], tag[1], tuple(files)) for tag, files in sorted(grouped.items())
    }
