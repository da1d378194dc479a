"""Conversions from Horizon's values (segments, timeline snapshots, watermark reports, query
metadata) to the API's protobuf messages. Pure; the servicer stays thin."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker.engine import (
    SNAPSHOT_CHANGES,
    SNAPSHOT_LWM,
    SNAPSHOT_NONE,
    SNAPSHOT_PIN,
    SNAPSHOT_TIMESTAMP,
    SNAPSHOT_VERSION,
    Prepared,
    TableReadInfo,
)
from horizon_broker.broker.sql.feed_files import files_view
from horizon_broker.timeline.interval import Interval

SNAPSHOT_SOURCES = {
    SNAPSHOT_LWM: pb.SNAPSHOT_SOURCE_LWM,
    SNAPSHOT_VERSION: pb.SNAPSHOT_SOURCE_VERSION,
    SNAPSHOT_TIMESTAMP: pb.SNAPSHOT_SOURCE_TIMESTAMP,
    SNAPSHOT_CHANGES: pb.SNAPSHOT_SOURCE_CHANGES,
    SNAPSHOT_NONE: pb.SNAPSHOT_SOURCE_NONE,
    SNAPSHOT_PIN: pb.SNAPSHOT_SOURCE_PIN,
}
LOCK_GRANULARITIES = {
    "time_chunk": pb.LOCK_GRANULARITY_TIME_CHUNK,
    "segment": pb.LOCK_GRANULARITY_SEGMENT,
}
LOCK_MODES = {"exclusive": pb.LOCK_MODE_EXCLUSIVE, "shared": pb.LOCK_MODE_SHARED}
GROUP_STATES = {
    "visible": pb.GROUP_STATE_VISIBLE,
    "standby": pb.GROUP_STATE_STANDBY,
    "overshadowed": pb.GROUP_STATE_OVERSHADOWED,
}


def interval_message(interval: Interval) -> pb.Interval:
    return pb.Interval(start_ms=interval.start_ms, end_ms=interval.end_ms)


def segment_message(segment: Any) -> pb.Segment:
    message = pb.Segment(
        id=str(segment.id),
        table=segment.table,
        interval=interval_message(segment.interval),
        version=segment.version,
        partition=segment.partition,
        core_partitions=segment.core_partitions,
        root_start=segment.root_start,
        root_end=segment.root_end,
        minor_version=segment.minor_version,
        atomic_update_group_size=segment.atomic_update_group_size,
        location=list(segment.location),
        row_count=segment.row_count,
        size_bytes=segment.size_bytes,
        server=segment.server,
        open_files=list(getattr(segment, "open_files", ())),
    )
    for bound in ("max_valid_from", "max_valid_until", "applied_through"):
        value = getattr(segment, bound, None)
        if value is not None:
            setattr(message, bound, value)
    return message


PARTITION_STATES = {
    "active": pb.PARTITION_STATE_ACTIVE,
    "idle": pb.PARTITION_STATE_IDLE,
    "parked": pb.PARTITION_STATE_PARKED,
}


def laggard_message(laggard: Any) -> pb.Laggard | None:
    if laggard is None:
        return None
    return pb.Laggard(
        server=laggard.server,
        partition=laggard.partition,
        watermark=laggard.lwm,
        state=PARTITION_STATES.get(getattr(laggard, "state", "active"), 0),
    )


def table_read_message(read: TableReadInfo) -> pb.TableRead:
    message = pb.TableRead(
        table=read.table,
        timeline_generation=read.generation,
        retention_horizon=read.retention_horizon,
        view=read.view,
        segment_count=len(read.segments),
        file_count=len(read.files),
        staleness_seconds=read.staleness_s,
        held_segments=read.held_segments,
    )
    if read.snapshot is not None:
        message.snapshot = read.snapshot
    if read.lwm is not None:
        message.lwm = read.lwm
    laggard = laggard_message(read.laggard)
    if laggard is not None:
        message.laggard.CopyFrom(laggard)
    return message


def metadata_message(
    prepared: Prepared,
    *,
    unreadable: Iterable[str] = (),
    retried: bool = False,
    cache: str = "",
    execution: str = "",
) -> pb.QueryMetadata:
    message = pb.QueryMetadata(
        query_id=prepared.query_id,
        snapshot_source=SNAPSHOT_SOURCES[prepared.snapshot_source],
        snapshot_reason=prepared.snapshot_reason,
        tables=[table_read_message(read) for read in prepared.tables],
        staleness_seconds=prepared.staleness_s,
        unreadable_segments=list(unreadable),
        retried=retried,
        snapshot_token=prepared.snapshot_token,
        cache=cache,
        execution=execution,
        waited_ms=prepared.waited_s * 1000,
        pin_id=prepared.pin.pin_id if prepared.pin is not None else "",
    )
    if prepared.plan.snapshot is not None:
        message.snapshot = prepared.plan.snapshot
    return message


def pin_message(pin: Any, now_ms: int, *, show_id: bool = True) -> pb.SnapshotPin:
    """A pin as the API shows it; ``show_id`` False hides the id (another identity's pin: who
    holds it and what it holds back is visible, the handle to renew or release it is not)."""
    return pb.SnapshotPin(
        pin_id=pin.pin_id if show_id else "",
        tables=list(pin.tables),
        snapshot=pin.snapshot,
        created_ms=pin.created_ms,
        expires_ms=pin.expires_ms,
        lease_left_seconds=pin.lease_left_s(now_ms),
        owner=pin.owner,
    )


def substituted_table_messages(read: TableReadInfo, sql: str) -> list[pb.SubstitutedTable]:
    """One entry per temp view of this table the rewritten ``sql`` reads, with that view's files
    (up to four when the table's files are split, see ``horizon_broker.broker.spark.scan_layout``; a view the
    snapshot lets the rewrite skip, such as closed files past their end, is left out). A change
    feed may read a view's companion (``feed_files.files_view``): it has an entry of its own, whose
    rows carry their file's name as ``feed_files.FILE_COLUMN``."""
    messages = []
    views = ((part, view) for part in read.parts for view in (part.name, files_view(part.name)))
    for part, view in views:
        if not re.search(rf"(?<!\w){re.escape(view)}(?!\w)", sql):
            continue
        message = pb.SubstitutedTable(
            table=read.table,
            view=view,
            timeline_generation=read.generation,
            schema_ddl=read.schema_ddl,
            files=list(part.files),
            segments=[segment_message(segment) for segment in part.segments],
        )
        if read.snapshot is not None:
            message.snapshot = read.snapshot
        messages.append(message)
    return messages


def table_info_message(view: Any) -> pb.TableInfo:
    descriptor = view.descriptor
    message = pb.TableInfo(
        name=descriptor.name,
        columns=[pb.Column(name=c.name, type=c.type) for c in descriptor.columns],
        primary_key=list(descriptor.primary_key),
        upsert=descriptor.upsert,
        timeline_generation=view.generation,
        visible_segments=len(view.visible_segments),
        time_column=descriptor.time_column or "",
    )
    if view.lwm is not None:
        message.lwm = view.lwm
    return message


def lock_message(lock: Any, now_ms: int) -> pb.Lock:
    """A :class:`horizon_broker.locks.rules.HeldLock` as the API shows it, its lease measured at ``now_ms``."""
    request = lock.request
    return pb.Lock(
        lock_id=lock.lock_id,
        table=request.table,
        interval=interval_message(request.interval),
        granularity=LOCK_GRANULARITIES.get(request.granularity.value, 0),
        mode=LOCK_MODES.get(request.mode.value, 0),
        job=request.job,
        priority=request.priority,
        version=request.version,
        partitions=sorted(request.partitions),
        acquired_ms=lock.acquired_ms,
        expires_ms=lock.expires_ms,
        lease_left_seconds=max(0.0, (lock.expires_ms - now_ms) / 1000),
        revoked=lock.revoked_by is not None,
        revoked_by=lock.revoked_by or "",
    )


def timeline_message(
    snapshot: Any,
    *,
    interval: Interval | None,
    include_overshadowed: bool,
    locks: Iterable[pb.Lock] = (),
) -> pb.GetTimelineResponse:
    chunks = []
    for chunk in snapshot.chunks:
        if interval is not None and not (
            chunk.true_interval.start_ms < interval.end_ms
            and interval.start_ms < chunk.true_interval.end_ms
        ):
            continue
        groups = [
            pb.AtomicUpdateGroup(
                version=chunk.version,
                minor_version=group.minor_version,
                root_start=group.root_start,
                root_end=group.root_end,
                state=GROUP_STATES.get(group.state, pb.GROUP_STATE_UNSPECIFIED),
                full=group.full,
                expected_size=group.atomic_update_group_size,
                segments=[segment_message(segment) for segment in group.segments],
            )
            for group in chunk.groups
            if include_overshadowed or group.state != "overshadowed"
        ]
        if not groups and not include_overshadowed:
            continue
        chunks.append(
            pb.TimeChunk(
                interval=interval_message(chunk.true_interval),
                version=chunk.version,
                complete=chunk.complete,
                core_partitions=chunk.core_partitions,
                queried=bool(chunk.lookup_pieces),
                groups=groups,
            )
        )
    return pb.GetTimelineResponse(
        table=snapshot.table,
        timeline_generation=snapshot.generation,
        chunks=chunks,
        locks=[
            lock
            for lock in locks
            if interval is None
            or (
                lock.interval.start_ms < interval.end_ms
                and interval.start_ms < lock.interval.end_ms
            )
        ],
    )


def watermarks_message(report: Any, *, queries_blocked: bool) -> pb.GetWatermarksResponse:
    message = pb.GetWatermarksResponse(
        table=report.table,
        stale_servers=list(report.stale_servers),
        staleness_seconds=report.staleness_s,
        queries_blocked=queries_blocked,
        store_clock_ms=report.store_ms,
        held_segments=report.held_segments,
    )
    if report.lwm is not None:
        message.lwm = report.lwm
    laggard = laggard_message(report.laggard)
    if laggard is not None:
        message.laggard.CopyFrom(laggard)
    servers: dict[str, list[Any]] = {}
    for row in report.partitions:
        message.partitions.append(
            pb.PartitionWatermark(
                server=row.owner or "",
                partition=row.partition,
                ingested=row.ingested if row.ingested is not None else 0,
                applied=row.applied if row.applied is not None else 0,
                watermark=row.lwm if row.lwm is not None else 0,
                live=row.live,
                state=PARTITION_STATES[row.state],
                state_since_ms=row.since_ms or 0,
            )
        )
        servers.setdefault(row.owner or "", []).append(row)
    stale = set(report.stale_servers)
    for server, rows in sorted(servers.items()):
        status = report.server_status.get(server, "live")
        server_message = pb.ServerWatermark(
            server=server,
            status="stale" if server in stale else status,
            clock=report.server_clocks.get(server, 0),
            live=server not in stale and all(row.live for row in rows),
            heartbeat_age_seconds=max(
                (row.report_age_s for row in rows if row.report_age_s is not None), default=0.0
            ),
            partitions=[row.partition for row in rows],
        )
        lwms = [row.lwm for row in rows if row.lwm is not None]
        if lwms:
            server_message.watermark = min(lwms)
        message.servers.append(server_message)
    for regression in report.regressions:
        message.regressions.append(
            pb.Regression(
                server=regression.server or "",
                partition=regression.partition if regression.partition is not None else -1,
                from_watermark=regression.from_lwm,
                to_watermark=regression.to_lwm,
                detail=(
                    f"LWM would have gone from {regression.from_lwm} down to "
                    f"{regression.to_lwm}; the broker kept {regression.from_lwm}"
                ),
            )
        )
    return message


def query_info_message(
    record: Any, *, show_sql: bool, spark_jobs_running: int | None
) -> pb.QueryInfo:
    """A running or recent query (:class:`horizon_broker.broker.engine.registry.QueryRecord`). Without
    ``show_sql`` (the inspector may not read every table it read) neither its text nor its
    tables nor its error message, which can quote the text's literals, are shown."""
    timings = record.timings
    message = pb.QueryInfo(
        query_id=record.query_id,
        identity=record.identity,
        sql=record.sql if show_sql else "",
        state=record.state,
        started_ms=record.started_ms,
        ended_ms=record.ended_ms,
        status=record.status,
        message=record.message if show_sql else "",
        tables=list(record.tables) if show_sql else [],
        row_count=record.rows,
        byte_count=record.bytes,
        cache=record.cache,
        source=record.rpc,
        timings=pb.QueryTimings(
            total_ms=timings.get("total", 0.0),
            queued_ms=timings.get("queued", 0.0),
            rewrite_ms=timings.get("rewrite", 0.0),
            views_ms=timings.get("views", 0.0),
            spark_ms=timings.get("spark", 0.0),
            serialize_ms=timings.get("serialize", 0.0),
        ),
    )
    if spark_jobs_running is not None:
        message.spark_jobs_running = spark_jobs_running
    if record.snapshot is not None:
        message.snapshot = record.snapshot
    return message
