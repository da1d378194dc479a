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

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from horizon_broker._core.errors import Internal
from horizon_broker.ingest.bucketing import BUCKET_COLUMN, bucket_layout
from horizon_broker.ingest.local_frames import local_frame
from horizon_broker.ingest.resolve import segment_schema, stored_columns
from horizon_broker.ingest.rewrite_groups import rewrite_groups
from horizon_broker.ingest.segments import (
    FooterSummary,
    WrittenSegment,
    describe_segment,
    union_keeps_partitions,
    write_segments,
)
from horizon_broker.ingest.storage import Storage
from horizon_broker.ingest.table import TableDefinition
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment, SegmentId
from horizon_broker.timeline.timeline import Timeline
from horizon_broker.watermark.catalog import VALID_FROM, VALID_UNTIL

REWRITE_TARGET_BYTES = 128 * 1024 * 1024
"""Bytes (Parquet, on disk) up to which a rewrite merges small segments (the table's
``rewrite_target_rows`` bounds its rows): what the driver rewrites in memory."""
BROADCAST_UPDATES = 1_000_000
"""Pending updates (narrow rows: key, segment, two timestamps) small enough to broadcast."""


Target = tuple[int, int]
"""A logical segment: (chunk start, root partition), as the key index and the updates name it."""


@dataclass(frozen=True, slots=True)
class UpdatePlan:
    """Which physical segments the targeted logical segments are now, and what replaces them.

    A compacted segment covers several root partitions, so several targets can share one
    rewrite, and a rewrite may merge adjacent small segments no update is for
    (:mod:`horizon_broker.ingest.rewrite_groups`); rewrites are keyed by ``(chunk start, root
    start)`` of the first segment they rewrite.
    """

    inputs: dict[Target, tuple[Segment, ...]]
    """(chunk start, root start) -> the segments one rewrite replaces, in root order (a
    gap-free run of one chunk and major version)."""
    new_partition: dict[Target, int]
    """(chunk start, root start) -> the overwrite partition number of its rewrite."""
    targets: dict[Target, Target]
    """Each targeted (chunk start, root partition) -> the key of the rewrite that covers it."""

    @property
    def segments(self) -> list[Segment]:
        """Every segment the plan rewrites."""
        return [segment for group in self.inputs.values() for segment in group]


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
    *,
    server: str = "",
) -> UpdatePlan:
    """Find the segments to rewrite (``(chunk start, root partition)`` targets, found in the
    pending updates), group them with the small segments of ``server`` around them
    (:func:`horizon_broker.ingest.rewrite_groups.rewrite_groups`, up to the table's
    ``rewrite_target_rows``) and reserve the rewrites' overwrite partition numbers."""
    covering = current_segments(announced, table, targets)
    rewritten = list({segment.id: segment for segment in covering.values()}.values())
    groups = rewrite_groups(
        visible_segments(table.name, announced),
        rewritten,
        server=server,
        target_rows=table.rewrite_target_rows,
        target_bytes=REWRITE_TARGET_BYTES,
    )
    starts = [(group[0].interval.start_ms, group[0].root_start) for group in groups]
    if len(set(starts)) < len(starts):
        # A segment to rewrite that queries do not read (a newer major version that fell back)
        # starts where a visible run does: each segment is rewritten alone then.
        groups = [(segment,) for segment in rewritten]
    inputs: dict[Target, tuple[Segment, ...]] = {}
    group_of: dict[SegmentId, Target] = {}
    for group in groups:
        key = (group[0].interval.start_ms, int(group[0].root_start))  # type: ignore[arg-type]
        inputs[key] = group
        group_of.update((segment.id, key) for segment in group)
    target_keys = {target: group_of[segment.id] for target, segment in sorted(covering.items())}
    new_partition: dict[Target, int] = {}
    by_chunk: dict[int, list[Target]] = {}
    for key in sorted(inputs):
        by_chunk.setdefault(key[0], []).append(key)
    for _chunk, keys in sorted(by_chunk.items()):
        by_version: dict[str, list[Target]] = {}
        for key in keys:
            by_version.setdefault(inputs[key][0].version, []).append(key)
        for version, same in sorted(by_version.items()):
            numbers = allocate(inputs[same[0]][0].interval, version, len(same))
            new_partition.update(zip(same, numbers, strict=True))
    return UpdatePlan(inputs=inputs, new_partition=new_partition, targets=target_keys)


def visible_segments(table: str, announced: Iterable[Segment]) -> list[Segment]:
    """The segments a query reads now."""
    timeline = Timeline(table)
    timeline.add_all(announced)
    return list(timeline.visible_segments())


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
    layout = bucket_layout(sorted(plan.inputs), max(1, min(len(plan.inputs), 2 * cores)))
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
            for (chunk, root), group in plan.inputs.items()
            for segment in group
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
        _segment_rows(spark, plan, table, columns)
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
    with union_keeps_partitions(spark):
        return write_segments(
            applied,
            columns,
            directory,
            len(plan.inputs),
            storage,
            primary_key=table.primary_key,
            shuffle=False,
        )


def _segment_rows(
    spark: Any, plan: UpdatePlan, table: TableDefinition, columns: Sequence[str]
) -> Any:
    """``columns`` of every row of the segments the plan rewrites, and ``_file``, the path of
    the file it came from.

    A rewrite of up to :data:`REWRITE_TARGET_BYTES`, or one that merges segments, is read in one
    task (its files coalesced, not shuffled), which writes its one open and one closed file:
    read as Spark splits it, a rewrite leaves a file per task that read part of it (Spark splits
    small files apart to keep every core busy), so a segment's files grew by one a rewrite and a
    merge would not merge. A larger segment is read as Spark splits it, for the cores."""
    from pyspark.sql import functions as F

    schema = segment_schema(table)

    def read(paths: list[str]) -> Any:
        return (
            spark.read.schema(schema)
            .parquet(*paths)
            .select(*columns, F.col("_metadata.file_path").alias("_file"))
        )

    def whole(group: tuple[Segment, ...]) -> bool:
        size = sum(segment.size_bytes for segment in group)
        return len(group) > 1 or 0 < size <= REWRITE_TARGET_BYTES

    split = sorted(
        {p for group in plan.inputs.values() if not whole(group) for p in group[0].location}
    )
    frames = [read(split)] if split else []
    for _, group in sorted(plan.inputs.items()):
        if whole(group):
            frames.append(read(sorted({p for s in group for p in s.location})).coalesce(1))
    rows = frames[0]
    for frame in frames[1:]:
        rows = rows.union(frame)
    return rows


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
    replaced: Sequence[Segment],
    written: WrittenSegment,
    summary: FooterSummary,
    server_id: str,
    table: TableDefinition,
    applied_through: int,
) -> Segment:
    """The description of a rewrite of the gap-free run ``replaced`` (one segment, or several
    merged; retention may have dropped some rows): their root range, the next minor version,
    every update committed up to ``applied_through`` applied."""
    first, last = replaced[0], replaced[-1]
    # A rewrite changes validUntil and drops rows: the old bounds of validFrom still hold.
    bounds = [segment.max_valid_from for segment in replaced]
    max_valid_from = None if None in bounds else max(b for b in bounds if b is not None)
    summary = replace(summary, max_valid_from=max_valid_from)
    return describe_segment(
        written,
        summary,
        table=table.name,
        interval=first.interval,
        version=first.version,
        server=server_id,
        core_partitions=max(segment.core_partitions for segment in replaced),
        root_range=(first.root_range[0], last.root_range[1]),
        minor_version=max(segment.minor_version for segment in replaced) + 1,
        applied_through=applied_through,
    )
