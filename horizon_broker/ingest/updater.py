"""The segment updater: applies pending ``validUntil`` updates by rewriting the affected segments.

Segments are immutable, so a segment whose rows got superseded is rewritten whole as an overwrite
segment of the same time chunk and major version, covering the same root range with the next minor
version (Druid's NumberedOverwriteShardSpec). Announcing it overshadows the old one in the timeline.

Updates are addressed to *logical* segments, ``(chunk, root partition)``: whatever the newest
physical segment covering that root partition is (first generation, an earlier overwrite, or a
compaction of several root partitions) is the one read. Rewrites are batched: every pending update
of a segment is applied in one rewrite.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from horizon_broker._core.errors import Internal
from horizon_broker.ingest.bucketing import BUCKET_COLUMN, bucket_layout
from horizon_broker.ingest.local_frames import local_frame
from horizon_broker.ingest.resolve import segment_schema, stored_columns
from horizon_broker.ingest.segments import (
    FooterSummary,
    WrittenSegment,
    describe_segment,
    write_segments,
)
from horizon_broker.ingest.storage import Storage
from horizon_broker.ingest.table import TableDefinition
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.catalog import VALID_FROM, VALID_UNTIL

BROADCAST_UPDATES = 1_000_000
"""Pending updates (narrow rows: key, segment, two timestamps) small enough to broadcast."""


Target = tuple[int, int]
"""A logical segment: (chunk start, root partition), as the key index and the updates name it."""


@dataclass(frozen=True, slots=True)
class UpdatePlan:
    """Which physical segments the targeted logical segments are now, and what replaces them.

    A compacted segment covers several root partitions, so several targets can share one
    rewrite; rewrites are keyed by ``(chunk start, root start)`` of the segment they rewrite.
    """

    current: dict[Target, Segment]
    """(chunk start, root start) -> the segment to rewrite."""
    new_partition: dict[Target, int]
    """(chunk start, root start) -> the overwrite partition number of its rewrite."""
    targets: dict[Target, Target]
    """Each targeted (chunk start, root partition) -> the key of the rewrite that covers it."""


def current_segments(
    announced: Sequence[Segment], table: TableDefinition, targets: Sequence[Target]
) -> dict[Target, Segment]:
    """The newest announced segment covering each ``(chunk start, root partition)`` (pure): of
    the highest major version (a major compaction keeps the root numbering), the highest minor
    version whose root range holds the partition."""
    wanted = set(targets)
    by_chunk: dict[int, list[Segment]] = {}
    for segment in announced:
        by_chunk.setdefault(segment.interval.start_ms, []).append(segment)
    found: dict[Target, Segment] = {}
    for chunk, root in wanted:
        for segment in by_chunk.get(chunk, ()):
            if not segment.root_start <= root < segment.root_end:  # type: ignore[operator]
                continue
            best = found.get((chunk, root))
            if best is None or (segment.version, segment.minor_version) > (
                best.version,
                best.minor_version,
            ):
                found[(chunk, root)] = segment
    missing = sorted(wanted - set(found))
    if missing:
        raise Internal(
            f"table {table.name!r}: validUntil updates target segments that are not announced "
            f"(chunk start, partition): {missing[:5]}"
        )
    return found


def plan_updates(
    targets: Sequence[Target],
    table: TableDefinition,
    announced: Sequence[Segment],
    allocate: Callable[[Interval, str, int], list[int]],
) -> UpdatePlan:
    """Find the segments to rewrite (``(chunk start, root partition)`` targets, found in the
    pending updates) and reserve their overwrite partition numbers."""
    covering = current_segments(announced, table, targets)
    current: dict[Target, Segment] = {}
    target_keys: dict[Target, Target] = {}
    for target, segment in sorted(covering.items()):
        key = (segment.interval.start_ms, int(segment.root_start))  # type: ignore[arg-type]
        current[key] = segment
        target_keys[target] = key
    new_partition: dict[Target, int] = {}
    by_chunk: dict[int, list[Target]] = {}
    for key in sorted(current):
        by_chunk.setdefault(key[0], []).append(key)
    for _chunk, keys in sorted(by_chunk.items()):
        by_version: dict[str, list[Target]] = {}
        for key in keys:
            by_version.setdefault(current[key].version, []).append(key)
        for version, same in sorted(by_version.items()):
            numbers = allocate(current[same[0]].interval, version, len(same))
            new_partition.update(zip(same, numbers, strict=True))
    return UpdatePlan(current=current, new_partition=new_partition, targets=target_keys)


def rewrite_segments(
    spark: Any,
    updates: Any,
    plan: UpdatePlan,
    table: TableDefinition,
    directory: str,
    storage: Storage,
    *,
    keep: Any | None = None,
    rows: int | None = None,
) -> dict[tuple[int, int], WrittenSegment]:
    """Rewrite every planned segment with its updates applied; returns the written files.

    ``keep``, a Spark predicate, drops the rows failing it (history past retention). ``rows``
    is how many updates there are, when the caller knows (else counted here).

    Up to :data:`BROADCAST_UPDATES` pending updates are broadcast to the tasks reading the
    segments, so the segments' rows are never shuffled (each file is read whole by one task:
    a segment gets an open and a closed file per task that read part of it). More updates than
    that: the rows of each rewritten segment and its updates are brought to one Spark task (one
    shuffle of each side, see :mod:`horizon_broker.ingest.bucketing`), joined there and written there as one
    open and one closed file.
    """
    from pyspark.sql import functions as F

    cores = max(1, int(spark.sparkContext.defaultParallelism))
    layout = bucket_layout(sorted(plan.current), max(1, min(len(plan.current), 2 * cores)))
    files = sorted({path for segment in plan.current.values() for path in segment.location})
    # Each row learns its segment from its file: a broadcast join on the path, as Spark's
    # ``_metadata.file_path`` spells it (the URI form), costs far less than parsing it per row.
    mapping_rows = sorted(
        {
            (
                storage.uri(path),
                chunk,
                plan.new_partition[(chunk, root)],
                layout.values[(chunk, root)],
            )
            for (chunk, root), segment in plan.current.items()
            for path in segment.location
        }
    )
    mapping = local_frame(
        spark,
        mapping_rows,
        [("_file", "string"), ("_chunk", "long"), ("_seg", "int"), (BUCKET_COLUMN, "int")],
    )
    columns = stored_columns(table)
    unmapped = F.raise_error(F.concat(F.lit("a segment row from an unplanned file: "), "_file"))
    data = (
        spark.read.schema(segment_schema(table))
        .parquet(*files)
        .select(*columns, F.col("_metadata.file_path").alias("_file"))
        .join(F.broadcast(mapping), on="_file", how="left")
        .withColumn("_seg", F.when(F.col("_seg").isNull(), unmapped).otherwise(F.col("_seg")))
    )
    pk = list(table.primary_key)
    # A version is stored once and superseded once, so (key, validFrom) finds the one row an
    # update is for; a row that shares them (an empty interval from the same transaction) has a
    # validUntil already, which the coalesce below keeps.
    keys = [*pk, VALID_FROM]
    if (updates.count() if rows is None else rows) <= BROADCAST_UPDATES:
        joined = join_broadcast_updates(data, updates, pk)
    else:
        targets = local_frame(
            spark,
            sorted(
                (chunk, root, layout.values[key]) for (chunk, root), key in plan.targets.items()
            ),
            [("_chunk", "long"), ("_root", "int"), (BUCKET_COLUMN, "int")],
        )
        bucketed = (
            updates.withColumnRenamed("_seg", "_root")
            .join(F.broadcast(targets), on=["_chunk", "_root"])
            .select(BUCKET_COLUMN, *keys, F.col(VALID_UNTIL).alias("_newUntil"))
        )
        joined = data.repartition(layout.tasks, BUCKET_COLUMN).join(
            bucketed.repartition(layout.tasks, BUCKET_COLUMN),
            on=[*keys, BUCKET_COLUMN],  # the sort's order: key first (see resolve.resolve)
            how="left",
        )
    applied = joined.withColumn(VALID_UNTIL, F.coalesce(F.col(VALID_UNTIL), F.col("_newUntil")))
    if keep is not None:
        applied = applied.filter(keep)
    return write_segments(
        applied,
        columns,
        directory,
        len(plan.current),
        storage,
        primary_key=table.primary_key,
        shuffle=False,
    )


def join_broadcast_updates(data: Any, updates: Any, primary_key: Sequence[str]) -> Any:
    """Each segment row with its pending update's validUntil as ``_newUntil`` (null: none), the
    updates broadcast to the tasks reading the segments.

    The hash key is ``validFrom`` alone, a long: Spark then builds and probes its long-keyed map
    instead of hashing every (key, validFrom) row, which cost about 0.25 s per 260,000 updates.
    Changes of one transaction share a commit timestamp, so several updates can share a
    validFrom: the key is compared as well, inside ``coalesce(a = b, false)``, which Spark keeps
    out of the hash key (and which, like an equi-join, never matches null keys).
    """
    from pyspark.sql import functions as F

    renamed = {name: f"_update_{name}" for name in primary_key}
    pending = updates.select(
        F.col(VALID_FROM).alias("_updateFrom"),
        *[F.col(name).alias(alias) for name, alias in renamed.items()],
        F.col(VALID_UNTIL).alias("_newUntil"),
    )
    condition = data[VALID_FROM] == pending["_updateFrom"]
    for name, alias in renamed.items():
        condition = condition & F.coalesce(data[name] == pending[alias], F.lit(False))
    return data.join(F.broadcast(pending), on=condition, how="left").drop(
        "_updateFrom", *renamed.values()
    )


def overwrite_segment(
    old: Segment,
    written: WrittenSegment,
    summary: FooterSummary,
    server_id: str,
    table: TableDefinition,
    applied_through: int,
) -> Segment:
    """The description of a rewrite of ``old`` (retention may have dropped some rows): same root
    range, next minor version, every update committed up to ``applied_through`` applied."""
    # A rewrite changes validUntil and drops rows: the old bound of validFrom still holds.
    summary = replace(summary, max_valid_from=old.max_valid_from)
    return describe_segment(
        written,
        summary,
        table=table.name,
        interval=old.interval,
        version=old.version,
        server=server_id,
        core_partitions=old.core_partitions,
        root_range=old.root_range,
        minor_version=old.minor_version + 1,
        applied_through=applied_through,
    )
