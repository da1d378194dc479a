"""The Spark batch: one batch's changes resolved against the key index and written as segments.

:func:`write_batch` runs a batch up to its commit, stage by stage::

    read and count (changelog, commit_times) -> commit timestamps -> PREPARE -> allocate partitions
    (allocation) -> resolve keys against the key index, write the resolution (key_index) ->
    write segments (segments) -> describe them from their footers

and returns what the commit records (:class:`horizon_broker.ingest.commit.IngestCommit`); the commit protocol
takes it from there. A batch shuffles its rows once: every key partition goes to one Spark task
(:mod:`horizon_broker.ingest.bucketing`), which resolves its keys and writes the resolved frame once, one
directory per key partition. That write is the partition's new key index level and holds the
batch's pending ``validUntil`` updates; the segment rows are a filter of it.

A batch of at most the table's ``driver_batch_rows`` rows, or ``driver_columnar_rows`` rows,
takes another road from the first read on: its rows are collected in that one job and everything
up to the commit runs on the driver, row by row (:mod:`horizon_broker.ingest.driver_rows`) or as Arrow columns
(:mod:`horizon_broker.ingest.driver_columns`), writing the same files (:mod:`horizon_broker.ingest.driver_batches` chooses); the stages
around it (timestamps, prepare, allocation, describing the segments) are the same for all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from horizon_broker._core.errors import Internal
from horizon_broker.ingest.allocation import allocate_partitions, segment_slots
from horizon_broker.ingest.bucketing import (
    BUCKET_COLUMN,
    allow_partial_cluster_keys,
    bucket_column,
    bucket_layout,
)
from horizon_broker.ingest.changelog import enrich
from horizon_broker.ingest.commit import CommitProtocol, IngestCommit, ResolvedBatch
from horizon_broker.ingest.commit_times import ChangeCount, count_changes, reserve_timestamps, stamp
from horizon_broker.ingest.driver_batches import collect_on_driver
from horizon_broker.ingest.granularity import chunk_interval
from horizon_broker.ingest.key_index import (
    INDEX_PARTITION_DIR,
    levels_after_batch,
    read_index,
    read_resolutions,
    resolution_directory,
    resolves_against_levels,
)
from horizon_broker.ingest.local_frames import local_frame
from horizon_broker.ingest.manifest import INGEST
from horizon_broker.ingest.partial_upsert_batch import merge_batch
from horizon_broker.ingest.resolve import (
    PLAIN_RESOLUTION_COLUMNS,
    append_only,
    resolution_file,
    resolution_summary,
    resolve,
    stored_columns,
    stored_versions,
)
from horizon_broker.ingest.segments import (
    WrittenSegment,
    describe_segment,
    footer_summaries,
    keep_row_order_in_partitioned_writes,
    plain_encoded,
    unique_key,
    write_segments,
)


def write_batch(
    protocol: CommitProtocol,
    frame: Any,
    seq: int,
    sources: tuple[str, ...],
    partitions: Sequence[int],
) -> IngestCommit:
    """Write batch ``seq`` of ``frame`` for the owned ``partitions`` that still need its
    ``sources``, up to its commit; returns what the commit must record."""

    server = protocol.server
    spark, table, steps = server.spark, server.table, server.steps
    allow_partial_cluster_keys(spark, frame.sparkSession)
    keep_row_order_in_partitioned_writes(spark)  # before the resolution's write too
    # Not cached: on Spark the source is read twice (here and by the resolution), which costs
    # less than caching it. Sources must give the same rows when read again (files, Kafka offsets
    # and foreachBatch frames do); the resolution counts them again and fails the batch loudly
    # otherwise.
    rows = enrich(frame, table, partitions)
    # A partial table's records become their keys' merged rows before any road takes them.
    merged = merge_batch(server, rows) if table.partial_upsert is not None else None
    rows = rows if merged is None else merged.rows
    on_driver = collect_on_driver(server, rows, protocol.state.key_index)
    if on_driver is not None:
        count = on_driver.count
    else:
        with steps.action("read and count"):
            count = count_changes(rows, table)
    protocol.resume()  # quiet partitions stop following the clock before any timestamp is taken
    base, high = reserve_timestamps(server.clock, count)
    if count.rows == 0:
        return IngestCommit(seq, sources, partitions, base, high)
    segments_directory = server.batch_directory(seq)
    # The resolved frame: also this batch's key index level and pending updates.
    resolution_dir = resolution_directory(server.root, server.server_id, seq)
    logged = [] if merged is None else [merged.directory(server, seq)]
    protocol.prepare(seq, INGEST, sorted([segments_directory, resolution_dir, *logged]))
    if merged is not None:
        merged.write_events(server, seq, base)
    steps.step("after_prepare")
    slots = segment_slots(count.groups, table.granularity, base, high)
    allocation = allocate_partitions(server.client, table, protocol.transaction_locks(), slots)
    if on_driver is not None:
        resolved, written = on_driver.write(
            server, base, allocation.numbers, seq, segments_directory
        )
    else:
        resolved, written = resolve_and_write(
            protocol, rows, count, base, allocation.numbers, resolution_dir, segments_directory
        )
    if resolved.rows != count.rows:
        raise Internal(
            f"table {table.name!r}: the batch's source gave {count.rows} rows when counted and "
            f"{resolved.rows} when read again: it must be deterministic (persist it first)"
        )
    steps.step("after_segments")
    steps.step("after_files")

    summaries = footer_summaries(server.storage, list(written.values()))
    segments = tuple(
        describe_segment(
            item,
            summary,
            table=table.name,
            interval=chunk_interval(table.granularity, item.chunk_start),
            version=allocation.versions[item.chunk_start],
            server=server.server_id,
        )
        for item, summary in zip(written.values(), summaries, strict=True)
    )
    return IngestCommit(
        seq,
        sources,
        partitions,
        base,
        high,
        rows=count.rows,
        segments=segments,
        key_index=resolved.key_index,
        updates=resolved.updates,
        pending_min=resolved.pending_min,
        targets=resolved.targets,
        earliest_event_ms=count.earliest_event_ms,
    )


def resolve_and_write(
    protocol: CommitProtocol,
    rows: Any,
    count: ChangeCount,
    base: int,
    numbers: Mapping[tuple[int, int], int],
    resolution_dir: str,
    segments_directory: str,
) -> tuple[ResolvedBatch, dict[tuple[int, int], WrittenSegment]]:
    """The Spark path of a batch: stamp its rows, resolve them (an upsert table) and write the
    segments; returns the resolution and what was written."""
    from pyspark.sql import functions as F

    server = protocol.server
    spark, table, steps = server.spark, server.table, server.steps
    stamped = stamp(spark, rows, table, count.spans, base)
    mapping = local_frame(
        spark,
        [(chunk, kp, number) for (chunk, kp), number in numbers.items()],
        [("_chunk", "long"), ("_kp", "int"), ("_seg", "int")],
    )
    if table.upsert:
        resolved = resolve_upserts(protocol, stamped, mapping, count.touched, resolution_dir)
    else:
        versions = append_only(stamped, table).join(F.broadcast(mapping), on=["_chunk", "_kp"])
        resolved = ResolvedBatch(versions, count.rows)
    with steps.action("write segments"):
        written = write_segments(
            resolved.versions,
            stored_columns(table),
            segments_directory,
            len(numbers),
            server.storage,
            primary_key=table.primary_key,
            # Each resolution file holds whole key partitions (horizon_broker.ingest.bucketing): no shuffle.
            shuffle=not table.upsert,
        )
    return resolved, written


def resolve_upserts(
    protocol: CommitProtocol,
    stamped: Any,
    mapping: Any,
    touched: Sequence[int],
    directory: str,
) -> ResolvedBatch:
    """Resolve an upsert table's batch against the key index of the ``touched`` partitions and
    write the resolution to ``directory``: the versions to store, the new key index levels and
    the pending updates."""
    from pyspark.sql import functions as F

    server = protocol.server
    spark, table, steps = server.spark, server.table, server.steps
    key_index = protocol.state.key_index
    layout = bucket_layout(touched, resolution_tasks(spark, len(touched)))
    on_top = resolves_against_levels(key_index, touched)
    # Taken before the shuffle: the broadcast's own job reads the source for them.
    batch_keys = stamped.select(*table.primary_key) if on_top else None
    stamped = stamped.withColumn(BUCKET_COLUMN, bucket_column(layout)).repartition(
        layout.tasks, BUCKET_COLUMN
    )
    index = read_index(spark, table, key_index, touched, stamped, layout, only_keys=batch_keys)
    resolved = resolve(
        stamped, index, table, mapping, cluster_by=[BUCKET_COLUMN], untouched_keys=not on_top
    )
    with steps.action("resolve"):
        (
            resolution_file(resolved, [BUCKET_COLUMN])
            .withColumn(INDEX_PARTITION_DIR, F.col("_kp"))
            .write.mode("overwrite")
            .options(**plain_encoded([*PLAIN_RESOLUTION_COLUMNS, *unique_key(table.primary_key)]))
            .partitionBy(INDEX_PARTITION_DIR)
            .parquet(directory)
        )
    staged = read_resolutions(spark, table, [directory])
    with steps.action("summarize resolution"):
        summary = resolution_summary(staged).collect()
    updated = [row for row in summary if row["_seg"] is not None]
    versions = stored_versions(staged, table)
    levels = levels_after_batch(server.storage, key_index, directory, touched, on_top)
    updates, pending_min = None, {}
    if updated:
        oldest = min(int(row["oldest"]) for row in updated)
        # Per partition, the batch's oldest update: held back no later than needed by those
        # with updates, a little longer by the others (until applied).
        updates, pending_min = directory, {kp: oldest for kp in touched}
    return ResolvedBatch(
        versions,
        rows=sum(int(row["rows"]) for row in summary),
        key_index=levels,
        updates=updates,
        pending_min=pending_min,
        targets=sorted(
            [int(row["_chunk"]), int(row["_seg"]), int(row["updates"])] for row in updated
        ),
    )


def resolution_tasks(spark: Any, partitions: int) -> int:
    """Spark tasks resolving a batch: one per key partition, at most two per core."""
    cores = max(1, int(spark.sparkContext.defaultParallelism))
    return max(1, min(partitions, 2 * cores))
