"""Commit timestamps: each change's hybrid-clock timestamp from its place in the source.

A batch counts its rows per (source file, Spark partition) first (:func:`count_changes`), then
reserves one timestamp per row position of each, ``[0, highest row]`` (:func:`reserve_timestamps`):
a change's commit timestamp is the base of its file and partition plus its position there
(:func:`stamp`), even when other servers' rows were filtered out, so it is the same whenever the
batch is read again. Changes sharing a transaction share the timestamp of its first change. The
count also says which key partitions and time chunks the batch touches (:mod:`horizon_broker.ingest.allocation`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from horizon_broker._core.hlc import HybridLogicalClock
from horizon_broker.ingest.granularity import spark_chunk_start
from horizon_broker.ingest.local_frames import local_frame
from horizon_broker.ingest.resolve import SOURCE_FILE
from horizon_broker.ingest.table import TableDefinition


@dataclass(frozen=True, slots=True, order=True)
class SourceSpan:
    """The rows one Spark partition read from one source file: their positions and count
    (ordered as the batch hands out timestamps: by file, then Spark partition)."""

    source_file: str
    spark_partition: int
    lowest: int
    highest: int
    rows: int


@dataclass(frozen=True, slots=True)
class ChangeCount:
    """What a batch's first read of its source found."""

    groups: list[Any]
    """One row per (source file, Spark partition, key partition, time chunk by the time column):
    ``_kp``, ``_tchunk`` (null where the commit time decides the chunk), ``_lo``, ``_hi``, ``_n``."""
    spans: list[SourceSpan]

    @property
    def rows(self) -> int:
        return sum(span.rows for span in self.spans)

    @property
    def positions(self) -> int:
        """Commit timestamps to reserve: ``[0, highest]`` of every (file, Spark partition)."""
        return sum(span.highest + 1 for span in self.spans)

    @property
    def earliest_event_ms(self) -> int | None:
        """The oldest event time (the table's ``time_column``, epoch ms) among the rows; None
        without a time column."""
        times = [group["_tmin"] for group in self.groups if group["_tmin"] is not None]
        return min(times) if times else None

    @property
    def touched(self) -> list[int]:
        """The key partitions the batch has rows of."""
        return sorted({group["_kp"] for group in self.groups})


def count_changes(rows: Any, table: TableDefinition) -> ChangeCount:
    """Count the enriched rows (:func:`horizon_broker.ingest.changelog.enrich`): one Spark job."""
    from pyspark.sql import functions as F

    time_chunk = time_column_chunk(table)
    event_ms = time_column_ms(table)
    groups = (
        rows.groupBy(SOURCE_FILE, "_pid", "_kp", time_chunk.alias("_tchunk"))
        .agg(
            F.min("_row").alias("_lo"),
            F.max("_row").alias("_hi"),
            F.count("*").alias("_n"),
            F.min(event_ms if event_ms is not None else F.lit(None).cast("long")).alias("_tmin"),
        )
        .collect()
    )
    spans_by_source: dict[tuple[str, int], list[int]] = {}
    for g in groups:
        span = spans_by_source.setdefault((g[SOURCE_FILE], g["_pid"]), [g["_lo"], g["_hi"], 0])
        span[0], span[1] = min(span[0], g["_lo"]), max(span[1], g["_hi"])
        span[2] += g["_n"]
    spans = sorted(
        SourceSpan(file, pid, lo, hi, n) for (file, pid), (lo, hi, n) in spans_by_source.items()
    )
    return ChangeCount(groups, spans)


def reserve_timestamps(clock: HybridLogicalClock, count: ChangeCount) -> tuple[int, int]:
    """``(base, high)``: the batch's commit timestamps, taken from the clock (at least one)."""
    base = clock.now()
    high = base + max(count.positions, 1) - 1
    clock.observe(high)
    return base, high


def span_bases(spans: Sequence[SourceSpan], base: int) -> dict[tuple[str, int], int]:
    """Each (source file, Spark partition)'s first commit timestamp: the batch's ``base`` plus
    the positions of the spans before it, in span order (pure; every path stamps with these).

    >>> span_bases([SourceSpan("b", 0, 0, 4, 5), SourceSpan("a", 1, 2, 9, 3)], 100)
    {('a', 1): 100, ('b', 0): 110}
    """
    bases, running = {}, 0
    for span in sorted(spans):
        bases[(span.source_file, span.spark_partition)] = base + running
        running += span.highest + 1
    return bases


def stamp(
    spark: Any, rows: Any, table: TableDefinition, spans: Sequence[SourceSpan], base: int
) -> Any:
    """The rows with their source order ``_ord``, commit timestamp ``_ts`` and chunk ``_chunk``."""
    from pyspark.sql import functions as F

    offsets = [(file, pid, first) for (file, pid), first in span_bases(spans, base).items()]
    offset_frame = local_frame(
        spark, offsets, [(SOURCE_FILE, "string"), ("_pid", "int"), ("_off", "long")]
    )
    stamped = rows.join(F.broadcast(offset_frame), on=[SOURCE_FILE, "_pid"]).withColumn(
        "_ord", F.col("_off") + F.col("_row")
    )
    stamped = stamped.withColumn("_ts", commit_timestamp(table))
    return stamped.withColumn("_chunk", spark_chunk_start(table.granularity, time_ms(table)))


def commit_timestamp(table: TableDefinition) -> Any:
    """Each change's commit timestamp from its source order ``_ord`` (base + position).

    With a transaction column, every change of a transaction takes the position of the
    transaction's first change: one timestamp for all, increasing in first-change order.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    name = table.transaction_column
    if name is None:
        return F.col("_ord")
    first = F.min("_ord").over(Window.partitionBy(F.col(f"`{name}`")))
    return F.when(F.col(f"`{name}`").isNull(), F.col("_ord")).otherwise(first)


def time_ms(table: TableDefinition) -> Any:
    """Each row's time (epoch ms) for its chunk: the time column, else the commit time."""
    from pyspark.sql import functions as F

    commit_ms = F.shiftright(F.col("_ts"), 16)
    value = time_column_ms(table)
    return commit_ms if value is None else F.coalesce(value, commit_ms)


def time_column_ms(table: TableDefinition) -> Any | None:
    """The time column as epoch ms (``None`` for tables chunked by commit time)."""
    from pyspark.sql import functions as F

    name = table.time_column
    if name is None:
        return None
    kind = next(c.type for c in table.columns if c.name == name).lower()
    column = F.col(name)
    if kind.startswith("timestamp") or kind == "date":
        return F.unix_millis(column.cast("timestamp"))
    return column.cast("long")


def time_column_chunk(table: TableDefinition) -> Any:
    """Each row's chunk by its time column; null where the commit time decides it."""
    from pyspark.sql import functions as F

    value = time_column_ms(table)
    if value is None:
        return F.lit(None).cast("long")
    return F.when(value.isNotNull(), spark_chunk_start(table.granularity, value))
