"""Reclaiming history below the retention horizon, in bounded steps (Ignite's idea, its
garbage collection for multi-version storage; see ``docs/design/contract/index.md``).

Ingestion drops expired history only when the updater happens to rewrite a segment, so a segment
that stops receiving updates would keep its history forever. This pass measures, in one Spark job
over the closed-version files of the visible segments, how many versions each holds that no
permitted snapshot can see (``validUntil`` at or below the table's retention horizon, or an empty
``[t, t)`` interval), and rewrites the segments holding the most of them, a bounded number of rows
and files per step, each as a compaction of that one segment (:class:`horizon_broker.compaction.run.Compactor`:
same root range, next minor version, under its segment lock). Brokers refuse snapshots below the
horizon, so no query can see what goes; the replaced files outlive the rewrite by the grace
period, so a query that started before the horizon moved still finds them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from horizon_broker.compaction.plan import CompactionTarget, visible_by_chunk
from horizon_broker.compaction.run import CompactionReport, Compactor
from horizon_broker.ingest.resolve import segment_schema
from horizon_broker.ingest.segments import is_open_file
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.catalog import VALID_FROM, VALID_UNTIL


@dataclass(frozen=True, slots=True)
class ReclaimSettings:
    max_rows_per_step: int = 2_000_000
    """Rows (of the rewritten segments, kept or not) one step may rewrite."""
    max_files_per_step: int = 64
    min_reclaimable_rows: int = 1
    """A segment is rewritten only if at least this many of its versions can go."""


@dataclass(frozen=True, slots=True)
class SegmentHistory:
    segment: Segment
    reclaimable_rows: int


@dataclass(frozen=True, slots=True)
class ReclaimReport:
    horizon: int
    candidates: int
    reclaimable_rows: int
    steps: tuple[CompactionReport, ...]

    @property
    def rows_reclaimed(self) -> int:
        return sum(step.rows_dropped for step in self.steps if step.outcome == "published")

    @property
    def bytes_before(self) -> int:
        return sum(step.bytes_in for step in self.steps if step.outcome == "published")

    @property
    def bytes_after(self) -> int:
        return sum(step.bytes_out for step in self.steps if step.outcome == "published")


def plan_steps(
    histories: Iterable[SegmentHistory], settings: ReclaimSettings
) -> list[list[Segment]]:
    """The segments to rewrite, most reclaimable first, cut into bounded steps (pure).

    >>> from horizon_broker.timeline.interval import Interval
    >>> seg = lambda p, rows: Segment(table="t", interval=Interval(0, 10), version="v",
    ...                               partition=p, row_count=rows, location=(f"f{p}",))
    >>> steps = plan_steps([SegmentHistory(seg(0, 50), 5), SegmentHistory(seg(1, 50), 40),
    ...                     SegmentHistory(seg(2, 50), 0)], ReclaimSettings(max_rows_per_step=60))
    >>> [[s.partition for s in step] for step in steps]
    [[1], [0]]
    """
    ranked = sorted(
        (h for h in histories if h.reclaimable_rows >= max(1, settings.min_reclaimable_rows)),
        key=lambda h: (-h.reclaimable_rows, h.segment.interval, h.segment.partition),
    )
    steps: list[list[Segment]] = []
    step: list[Segment] = []
    rows = files = 0
    for history in ranked:
        segment = history.segment
        too_big = (
            rows + segment.row_count > settings.max_rows_per_step
            or files + len(segment.location) > settings.max_files_per_step
        )
        if step and too_big:
            steps.append(step)
            step, rows, files = [], 0, 0
        step.append(segment)
        rows += segment.row_count
        files += len(segment.location)
    if step:
        steps.append(step)
    return steps


def measure_history(
    spark: Any, compactor: Compactor, segments: Sequence[Segment], horizon: int
) -> list[SegmentHistory]:
    """How many versions of each segment no permitted snapshot can see (one Spark job over the
    segments' closed-version files; open versions never qualify)."""
    from pyspark.sql import functions as F

    storage = compactor.storage
    owner = {
        storage.uri(path): segment
        for segment in segments
        for path in segment.location
        if not is_open_file(path)
    }
    if not owner:
        return []
    dead = F.col(VALID_UNTIL).isNotNull() & (
        (F.col(VALID_UNTIL) <= F.lit(horizon)) | (F.col(VALID_UNTIL) == F.col(VALID_FROM))
    )
    rows = (
        spark.read.schema(segment_schema(compactor.table))
        .parquet(*sorted(owner))
        .where(dead)
        .groupBy(F.col("_metadata.file_path").alias("file"))
        .count()
        .collect()
    )
    counts: dict[tuple, int] = {}
    for row in rows:
        segment = owner.get(row["file"])
        if segment is not None:
            counts[segment.id] = counts.get(segment.id, 0) + int(row["count"])
    return [SegmentHistory(s, counts.get(s.id, 0)) for s in segments]


def reclaim(
    compactor: Compactor, settings: ReclaimSettings | None = None, *, max_steps: int | None = None
) -> ReclaimReport:
    """Rewrite the segments holding the most unreachable history, step by step; a step whose
    locks are refused or revoked (ingestion preempts it) ends the pass."""
    settings = settings or ReclaimSettings()
    table = compactor.table
    horizon = compactor.client.retention_horizon(table.name)
    visible = [
        segment
        for segments in visible_by_chunk(
            table.name, compactor.client.announced_segments(table.name)
        ).values()
        for segment in segments
    ]
    histories = measure_history(compactor.spark, compactor, visible, horizon)
    steps = plan_steps(histories, settings)
    reports: list[CompactionReport] = []
    for step in steps[:max_steps]:
        report = compactor.compact([CompactionTarget((segment,)) for segment in step])
        reports.append(report)
        if report.outcome == "revoked":
            break
    return ReclaimReport(
        horizon=horizon,
        candidates=sum(1 for h in histories if h.reclaimable_rows),
        reclaimable_rows=sum(h.reclaimable_rows for h in histories),
        steps=tuple(reports),
    )
