"""A minor compaction run: lock, merge on Spark, publish under the locks, or clean up.

1. Plan (:func:`horizon_broker.compaction.plan.plan_minor`) against the announced segments.
2. Lock every input with a segment lock (priority 25 by default: ingestion and the updater preempt
   it), then keep only the targets whose inputs are still visible once locked.
3. Allocate the outputs' overwrite partition numbers and lock them too.
4. Read the inputs' files, drop the versions no permitted snapshot can see (``validUntil`` at or
   below the table's retention horizon, and empty ``[t, t)`` versions, which are never visible),
   and write each output as ingestion writes segments: open versions by key, closed ones by
   ``validFrom``, in separate files.
5. Announce the outputs in one atomic step guarded by the locks (a target none of whose versions
   a permitted snapshot can see has no output: its inputs are withdrawn in that step). The other
   inputs stay announced, overshadowed: if an output goes missing the timeline falls back to
   them. They are withdrawn and their files deleted after the grace period
   (:mod:`horizon_broker.compaction.collect`), from the record that step 5 leaves under
   ``<table root>/_compaction/``.

A revoked or expired lock makes the publish fail and announce nothing; the run then deletes what it
wrote. A publish whose outcome is unknown (its reply lost, or a retry refused after the first try
ran) is read back from the state store: if it took effect the run goes on; otherwise only what no
announcement names is deleted, and nothing if the store cannot be read
(:func:`horizon_broker.ingest.garbage.delete_unannounced`). A killed run leaves a directory nothing names; its
locks run out.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from horizon_broker._core.errors import FailedPrecondition, Internal, InvalidArgument, Unavailable
from horizon_broker.compaction.plan import (
    CompactionSettings,
    CompactionTarget,
    MajorTarget,
    plan_major,
    plan_minor,
    tiling,
    visible_by_chunk,
)
from horizon_broker.compaction.publish import publish_checked
from horizon_broker.compaction.restore import restore_lost_outputs
from horizon_broker.ingest.compaction_records import compaction_record_dir
from horizon_broker.ingest.garbage import delete_unannounced
from horizon_broker.ingest.logged_numbers import logged_segments_of_table
from horizon_broker.ingest.resolve import segment_schema, stored_columns
from horizon_broker.ingest.retention import kept_rows
from horizon_broker.ingest.schema_follow import follow_schema
from horizon_broker.ingest.segments import (
    SEGMENT_ROW_GROUP_BYTES,
    describe_segment,
    footer_summaries,
    union_keeps_partitions,
    write_segments,
)
from horizon_broker.ingest.storage import Storage
from horizon_broker.ingest.table import TableDefinition
from horizon_broker.locks.client import DEFAULT_LEASE_S, JobLocks, LockClient
from horizon_broker.locks.rules import COMPACTION_PRIORITY
from horizon_broker.timeline.fallback import merged_bound
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.catalog import VALID_FROM, VALID_UNTIL
from horizon_broker.watermark.server import ServerClient

log = logging.getLogger(__name__)

KILL_POINTS = ("after_lock", "after_files")
"""Where a test can make a run die (its locks are then left to run out, as a killed process's)."""


class CompactionKilled(Internal):
    """Raised at an injected kill point (tests only)."""


COMPACTED_ROW_GROUP_BYTES = SEGMENT_ROW_GROUP_BYTES
"""Row groups of compacted segments: ingestion's size (why: its docstring), a name of its own so
``bench.tpch --compaction-row-group-mib`` can probe another."""


@dataclass(frozen=True, slots=True)
class CompactionReport:
    """What one run did."""

    run_id: str
    outcome: str
    """``published``, ``nothing to do`` or ``revoked`` (a lock was refused, revoked or ran out,
    or the chunk was superseded: nothing announced, nothing left behind)."""
    targets: int = 0
    inputs: tuple[Segment, ...] = ()
    outputs: tuple[Segment, ...] = ()
    rows_in: int = 0
    rows_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    seconds: float = 0.0
    message: str = ""
    chunks: tuple[str, ...] = field(default=())

    @property
    def rows_dropped(self) -> int:
        return self.rows_in - self.rows_out


class Compactor:
    """Runs minor compactions of one table, as one job of the lock service per run."""

    def __init__(
        self,
        spark: Any,
        table: TableDefinition,
        client: ServerClient,
        *,
        settings: CompactionSettings | None = None,
        priority: int = COMPACTION_PRIORITY,
        lease_s: float = DEFAULT_LEASE_S,
        wait_s: float = 0.0,
        progress: Callable[[str], None] | None = None,
        fail_at: str | None = None,
    ) -> None:
        if fail_at is not None and fail_at not in KILL_POINTS:
            raise InvalidArgument(f"unknown kill point {fail_at!r}: expected one of {KILL_POINTS}")
        self.spark = spark
        self.table = table
        self.client = client
        self.settings = settings or CompactionSettings()
        self.priority = priority
        self.lease_s = lease_s
        self.wait_s = wait_s
        self.storage = Storage(spark)
        self.root = self.storage.qualify(table.table_root)
        self._progress = progress or (lambda message: log.info("%s", message))
        self._fail_at = fail_at
        self._numbers_reserved = False

    def plan(self, **kwargs: Any) -> list[CompactionTarget]:
        """The targets a run would compact now (see :func:`horizon_broker.compaction.plan.plan_minor`)."""
        announced = self.client.announced_segments(self.table.name)
        return plan_minor(self.table.name, announced, self.settings, **kwargs)

    def compact(
        self, targets: Sequence[CompactionTarget] | None = None, **plan: Any
    ) -> CompactionReport:
        """Run one minor compaction (of ``targets``, or of what :meth:`plan` finds)."""
        started = time.perf_counter()
        run_id = f"{self.client.server_id}-{uuid.uuid4().hex[:10]}"
        self.restore_lost_outputs()
        targets = list(self.plan(**plan) if targets is None else targets)
        if not targets:
            return CompactionReport(run_id, "nothing to do")
        locks = self._job_locks(run_id)
        directory = f"{self.root}/segments/{run_id}"
        killed = attempted = False
        try:
            targets = self._lock_inputs(locks, targets)
            if not targets:
                return CompactionReport(run_id, "nothing to do", message="inputs changed")
            self._kill_point("after_lock")
            self._reserve_logged_numbers()
            partitions = self._allocate_outputs(locks, targets)
            self._progress(
                f"compacting {sum(len(t.inputs) for t in targets)} segments of table "
                f"{self.table.name} into {len(targets)}"
            )
            written = self._write(targets, partitions, directory)
            self._kill_point("after_files")
            locks.check()
            outputs = self._describe(targets, partitions, written, run_id)
            published = {(s.interval, s.root_start) for s in outputs}
            # A target none of whose versions a permitted snapshot can see wrote nothing: its
            # inputs are withdrawn instead (their files go after the grace period).
            emptied = [s for t in targets if (t.interval, t.root_range[0]) not in published
                       for s in t.inputs]  # fmt: skip
            inputs = tuple(s for t in targets for s in t.inputs)
            attempted = True
            publish_checked(
                self.client,
                lambda: self.client.replace(
                    add=outputs, remove=emptied, guard=locks.guard([*inputs, *outputs])
                ),
                outputs,
                emptied,
            )
            self._record(run_id, inputs, outputs)
            return self._published(run_id, inputs, outputs, started, len(targets))
        except FailedPrecondition as error:  # a lock refused or lost, a chunk superseded
            return self._gave_up(run_id, directory, error, started, attempted)
        except CompactionKilled:
            killed = True
            raise
        except BaseException:
            self._clean_up(directory, attempted)
            raise
        finally:
            if killed:
                locks.abandon()
            else:
                locks.release()

    def compact_major(
        self, *, interval: Interval | None = None, skip_newest: int = 0
    ) -> CompactionReport:
        """Rewrite whole time chunks into a new major version, each under an exclusive
        time-chunk lock (:class:`horizon_broker.compaction.plan.MajorTarget`). Ingestion into a chunk preempts
        the lock; batches allocated in the old version are refused at publish and allocated again
        (see :func:`horizon_broker.ingest.allocation.allocate_partitions`)."""
        started = time.perf_counter()
        run_id = f"{self.client.server_id}-{uuid.uuid4().hex[:10]}"
        suffix = f"major-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{run_id[-10:]}"
        self.restore_lost_outputs()
        announced = self.client.announced_segments(self.table.name)
        majors = plan_major(
            self.table.name, announced, self.settings, suffix,
            interval=interval, skip_newest=skip_newest,
        )  # fmt: skip
        if not majors:
            return CompactionReport(run_id, "nothing to do")
        locks = self._job_locks(run_id)
        directory = f"{self.root}/segments/{run_id}"
        attempted = False
        try:
            for target in majors:
                locks.lock_time_chunk(target.interval)
            visible = visible_by_chunk(
                self.table.name, self.client.announced_segments(self.table.name)
            )
            majors = [
                t
                for t in majors
                if [s.id for s in visible.get(t.interval, ())] == [s.id for s in t.inputs]
            ]
            if not majors:
                return CompactionReport(run_id, "nothing to do", message="inputs changed")
            groups: list[CompactionTarget] = []
            partitions: list[int] = []
            for target in majors:
                numbers = self.client.allocate_overwrite_partitions(
                    self.table.name, target.interval, target.version, len(target.groups)
                )
                groups.extend(target.groups)
                partitions.extend(numbers)
            self._progress(
                f"rewriting {len(majors)} time chunks of table {self.table.name} "
                f"({sum(len(t.inputs) for t in majors)} segments) into new major versions"
            )
            written = self._write(groups, partitions, directory)
            locks.check()
            outputs: list[Segment] = []
            for target in majors:
                outputs.extend(self._describe_major(target, groups, partitions, written, run_id))
            inputs = tuple(s for t in majors for s in t.inputs)
            attempted = True
            publish_checked(
                self.client,
                lambda: self.client.announce(outputs, guard=locks.guard([*inputs, *outputs])),
                outputs,
                (),
            )
            self._record(run_id, inputs, outputs)
            return self._published(run_id, inputs, outputs, started, len(majors))
        except FailedPrecondition as error:
            return self._gave_up(run_id, directory, error, started, attempted)
        except BaseException:
            self._clean_up(directory, attempted)
            raise
        finally:
            locks.release()

    # -- steps -------------------------------------------------------------------------------

    def _job_locks(self, run_id: str) -> JobLocks:
        return JobLocks(
            LockClient(self.client.redis, prefix=self.client.prefix),
            self.table.name,
            run_id,
            self.priority,
            lease_s=self.lease_s,
            wait_s=self.wait_s,
        )

    def _published(
        self,
        run_id: str,
        inputs: Sequence[Segment],
        outputs: Sequence[Segment],
        started: float,
        targets: int,
    ) -> CompactionReport:
        report = CompactionReport(
            run_id,
            "published",
            targets=targets,
            inputs=tuple(inputs),
            outputs=tuple(outputs),
            rows_in=sum(s.row_count for s in inputs),
            rows_out=sum(s.row_count for s in outputs),
            bytes_in=sum(s.size_bytes for s in inputs),
            bytes_out=sum(s.size_bytes for s in outputs),
            seconds=time.perf_counter() - started,
            chunks=tuple(sorted({str(s.interval) for s in inputs})),
        )
        self._progress(
            f"published {len(outputs)} segments: {report.rows_in} -> {report.rows_out} rows, "
            f"{report.bytes_in} -> {report.bytes_out} bytes in {report.seconds:.1f} s"
        )
        return report

    def _clean_up(self, directory: str, attempted: bool) -> bool:
        """Delete what the run wrote; once a publish was attempted, only what no announcement
        names (:func:`horizon_broker.ingest.garbage.delete_unannounced`). Returns whether it all went."""
        if not attempted:
            self.storage.delete(directory)
            return True
        try:
            return delete_unannounced(self.storage, self.client, self.table.name, directory)
        except Unavailable as error:
            log.warning("keeping %s: cannot tell whether it was published (%s)", directory, error)
            return False

    def _gave_up(
        self, run_id: str, directory: str, error: Exception, started: float, attempted: bool
    ) -> CompactionReport:
        cleaned = self._clean_up(directory, attempted)
        self._progress(
            f"compaction {run_id} gave up, "
            f"{'nothing announced' if cleaned else 'what is announced kept'}: {error}"
        )
        return CompactionReport(
            run_id, "revoked", seconds=time.perf_counter() - started, message=str(error)
        )

    def _describe_major(
        self,
        target: MajorTarget,
        groups: Sequence[CompactionTarget],
        partitions: Sequence[int],
        written: dict[tuple[int, int], Any],
        run_id: str,
    ) -> list[Segment]:
        """The new version's segments of one chunk; the groups that kept rows tile the roots."""
        chunk = target.interval.start_ms
        kept = [
            (group, number, written[(chunk, number)])
            for group, number in zip(groups, partitions, strict=True)
            if group in target.groups and (chunk, number) in written
        ]
        if not kept:
            return []
        ranges = tiling([int(group.root_range[0]) for group, _, _ in kept], target.core)
        summaries = footer_summaries(self.storage, [item for _, _, item in kept])
        return [
            describe_segment(
                item,
                summary,
                table=self.table.name,
                interval=target.interval,
                version=target.version,
                server=run_id,
                core_partitions=target.core,
                root_range=roots,
                minor_version=1,
                # It holds the updates its inputs held: its fallback bound is theirs.
                applied_through=merged_bound(group.inputs),
            )
            for (group, number, item), summary, roots in zip(kept, summaries, ranges, strict=True)
        ]

    def _lock_inputs(
        self, locks: JobLocks, targets: Sequence[CompactionTarget]
    ) -> list[CompactionTarget]:
        """Lock every input, then keep the targets whose inputs are all still visible."""
        locks.lock_covering(segment for target in targets for segment in target.inputs)
        visible = {
            segment.id
            for segments in visible_by_chunk(
                self.table.name, self.client.announced_segments(self.table.name)
            ).values()
            for segment in segments
        }
        return [t for t in targets if all(segment.id in visible for segment in t.inputs)]

    def _allocate_outputs(self, locks: JobLocks, targets: Sequence[CompactionTarget]) -> list[int]:
        """An overwrite partition number per target, locked."""
        numbers: list[int] = []
        by_chunk: dict[tuple[Any, str], list[int]] = {}
        for index, target in enumerate(targets):
            by_chunk.setdefault((target.interval, target.version), []).append(index)
        numbers = [0] * len(targets)
        for (interval, version), indexes in sorted(by_chunk.items()):
            allocated = self.client.allocate_overwrite_partitions(
                self.table.name, interval, version, len(indexes)
            )
            locks.lock_segments(interval, version, allocated)
            for index, number in zip(indexes, allocated, strict=True):
                numbers[index] = number
        return numbers

    def rewrite(self, targets: Sequence[CompactionTarget], directory: str) -> int:
        """The Spark work of a run alone, into ``directory``: no locks, nothing announced (what
        ``bench.compaction`` times against a bare read and write of the same files). Returns
        the segments written."""
        numbers = [32_768 + index for index in range(len(targets))]
        return len(self._write(targets, numbers, directory))

    def _write(
        self, targets: Sequence[CompactionTarget], partitions: Sequence[int], directory: str
    ) -> dict[tuple[int, int], Any]:
        from pyspark.sql import functions as F

        if not targets:
            return {}
        # The schema registered now: every planned input was announced before it (a server
        # reads a new version before writing under it), so none has a column this misses.
        table = self.table = follow_schema(self.client, self.table)
        columns = stored_columns(table)
        horizon = self.client.retention_horizon(table.name)
        # Each target is read by one Spark task (its files coalesced, not shuffled) and written
        # by that same task: the union's partitions are the targets, one each, so the write
        # needs no shuffle and no core waits on a partition that two targets hashed into.
        frames = []
        for target, number in zip(targets, partitions, strict=True):
            files = sorted({path for segment in target.inputs for path in segment.location})
            rows = (
                self.spark.read.schema(segment_schema(table))
                .parquet(*files)
                .select(*columns)
                # An empty version [t, t) is visible at no snapshot and never in a change feed.
                .filter(F.col(VALID_UNTIL).isNull() | (F.col(VALID_UNTIL) > F.col(VALID_FROM)))
            )
            if horizon:
                rows = rows.filter(kept_rows(horizon))
            frames.append(
                rows.withColumn("_chunk", F.lit(target.interval.start_ms).cast("long"))
                .withColumn("_seg", F.lit(number).cast("int"))
                .coalesce(1)
            )
        rows = frames[0]
        for frame in frames[1:]:
            rows = rows.union(frame)
        self.spark.sparkContext.setJobDescription(f"compact {table.name}")
        try:
            with union_keeps_partitions(self.spark):
                return write_segments(
                    rows,
                    columns,
                    directory,
                    len(targets),
                    self.storage,
                    primary_key=table.primary_key,
                    shuffle=False,
                    row_group_bytes=COMPACTED_ROW_GROUP_BYTES,
                )
        finally:
            self.spark.sparkContext.setJobDescription(None)

    def _describe(
        self,
        targets: Sequence[CompactionTarget],
        partitions: Sequence[int],
        written: dict[tuple[int, int], Any],
        run_id: str,
    ) -> list[Segment]:
        kept = [
            (target, number, written[(target.interval.start_ms, number)])
            for target, number in zip(targets, partitions, strict=True)
            if (target.interval.start_ms, number) in written
        ]
        items = [item for _, _, item in kept]
        summaries = footer_summaries(self.storage, items)
        return [
            describe_segment(
                item,
                summary,
                table=self.table.name,
                interval=target.interval,
                version=target.version,
                server=run_id,
                core_partitions=max(s.core_partitions for s in target.inputs),
                root_range=target.root_range,
                minor_version=target.minor_version,
                # It holds the updates its inputs held: its fallback bound is theirs.
                applied_through=merged_bound(target.inputs),
            )
            for (target, number, item), summary in zip(kept, summaries, strict=True)
        ]

    def restore_lost_outputs(self) -> int:
        """Announce again the outputs of earlier compactions a failed-over store lost
        (:mod:`horizon_broker.compaction.restore`); returns how many segments."""
        self._reserve_logged_numbers()
        return restore_lost_outputs(
            self.storage, self.client, self.table.name, self.root, self._job_locks
        )

    def _reserve_logged_numbers(self) -> None:
        """Before the first allocation: the store hands out no number a commit log or compaction
        record of the table names, now or after a change of primary (rule F4)."""
        if self._numbers_reserved:
            return

        def logged() -> list[Segment]:
            return logged_segments_of_table(self.storage, self.root)

        self.client.follow_numbers_of(f"table {self.table.name}", logged)
        self._numbers_reserved = True

    def _record(self, run_id: str, inputs: Sequence[Segment], outputs: Sequence[Segment]) -> None:
        """What :mod:`horizon_broker.compaction.collect` needs to withdraw and delete the inputs later."""
        body = {
            "run": run_id,
            "published_ms": time.time_ns() // 1_000_000,
            "inputs": [segment.to_dict() for segment in inputs],
            "outputs": [segment.to_dict() for segment in outputs],
        }
        self.storage.write_atomically(
            f"{compaction_record_dir(self.root)}/{run_id}.json", json.dumps(body, sort_keys=True)
        )

    def _kill_point(self, name: str) -> None:
        if self._fail_at == name:
            raise CompactionKilled(f"simulated kill of the compaction at {name}")
