"""The ingestion job: one server's pipeline from a changelog to announced segments and watermarks.

Per batch (see :mod:`ingest.manifest` for the exactly-once protocol)::

    read -> commit timestamps -> resolve keys -> allocate partitions -> PREPARE -> write segments,
    key index, pending updates -> COMMIT -> announce -> [updater] -> report -> DONE

A restarted job (a new object on the same storage and server id) first cleans up a dead attempt,
rolls an unpublished commit forward and reports, so nothing is lost or announced twice. Kill points
are injectable with ``fail_at`` (one of :data:`STEPS`) for tests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ingest import garbage, update_run
from ingest.bucketing import BUCKET_COLUMN, BucketLayout, bucket_column, bucket_layout
from ingest.compaction_records import compacted_inputs
from ingest.granularity import Granularity, chunk_interval, chunks_between, spark_chunk_start
from ingest.local_frames import local_frame
from ingest.locking import TransactionLocks, UpdateSuperseded, check_still_current
from ingest.manifest import (
    ABANDON,
    COLLECT,
    COMMIT,
    DONE,
    INGEST,
    PREPARE,
    UPDATE,
    Manifest,
    ManifestState,
    Record,
    manifest_dir,
    read_records,
)
from ingest.partitioning import key_partition
from ingest.resolve import (
    PLAIN_RESOLUTION_COLUMNS,
    SOURCE_FILE,
    SOURCE_POSITION,
    append_only,
    empty_index,
    index_entries,
    resolution_file,
    resolution_schema,
    resolution_summary,
    resolve,
    stored_columns,
    stored_versions,
    with_derived_columns,
)
from ingest.segments import (
    FooterSummary,
    WrittenSegment,
    describe_segment,
    footer_summaries,
    keep_row_order_in_partitioned_writes,
    plain_encoded,
    unique_key,
    write_segments,
)
from ingest.storage import Storage
from ingest.table import TableDefinition
from locks.client import DEFAULT_LEASE_S
from locks.rules import STREAMING_INGESTION_PRIORITY
from pins.store import pinned_releases
from timeline.errors import Internal, InvalidArgument, LockConflict
from timeline.segment import Segment
from watermark import tokens
from watermark.hlc import HybridLogicalClock
from watermark.server import ServerClient

log = logging.getLogger(__name__)

STEPS = (
    "after_prepare",
    "after_segments",
    "after_files",
    "after_commit",
    "after_announce",
    "after_report",
    "update_after_prepare",
    "update_after_files",
    "update_after_commit",
    "update_after_replace",
)
"""Named kill points, in the order a batch (then its updater run) passes them."""
MAX_INDEX_LEVELS = 8
"""Key index levels of a partition before a batch writes its full index again."""
INDEX_PARTITION_DIR = "_kpDir"
_RESOLUTION = re.compile(r"/_keyindex/[^/]+/r\d+(?:/|$)")
_ROW_BITS = 33  # monotonically_increasing_id(): partition id in the upper bits, row in the lower 33


def allow_partial_cluster_keys(*sessions: Any) -> None:
    """Let a join reuse a split by a bucket column that is a function of its other keys.

    Both sides of the key index join (and of the updater's join) are split by a bucket of the key
    partition (:mod:`ingest.bucketing`); by default Spark shuffles them again by every join key.
    Other plans are unaffected by the setting.
    """
    for session in sessions:
        session.conf.set("spark.sql.requireAllClusterKeysForCoPartition", "false")


class SimulatedCrash(Internal):
    """Raised at an injected kill point (tests only): the job object must be thrown away."""


@dataclass(frozen=True, slots=True)
class BatchResult:
    seq: int
    rows: int
    segments: tuple[Segment, ...] = ()
    high: int = 0
    base: int = 0
    """The first commit timestamp of the batch: change ``i`` of a one-file source gets base + i
    (with a transaction column: base + the position of its transaction's first change)."""
    skipped: bool = False
    updated_segments: int = 0
    sources: tuple[str, ...] = field(default=())
    token: str = ""
    """The snapshot token of this commit (:mod:`watermark.tokens`): a query sent with it as its
    ``min_snapshot`` sees the batch (read-your-writes)."""


class IngestJob:
    """One server's ingestion of one table.

    ``partitions`` are the key partitions this server owns (default: all); rows of other key
    partitions in the input are left to their owners (several servers may read one source).
    ``lock_priority`` is the priority of the locks its transactions take (:mod:`ingest.locking`).
    """

    def __init__(
        self,
        spark: Any,
        table: TableDefinition,
        client: ServerClient,
        *,
        partitions: Iterable[int] | None = None,
        clock: HybridLogicalClock | None = None,
        fail_at: str | None = None,
        lock_priority: int = STREAMING_INGESTION_PRIORITY,
        lock_lease_s: float = DEFAULT_LEASE_S,
    ) -> None:
        if fail_at is not None and fail_at not in STEPS:
            raise InvalidArgument(f"unknown kill point {fail_at!r}: expected one of {STEPS}")
        self.spark = spark
        self.table = table
        self.client = client
        self.server_id = client.server_id
        self.storage = Storage(spark)
        self.root = self.storage.qualify(table.table_root)
        self.manifest = Manifest(self.storage, self.root, self.server_id)
        owned = range(table.key_partitions) if partitions is None else partitions
        self.partitions = sorted(set(owned))
        for partition in self.partitions:
            if not 0 <= partition < table.key_partitions:
                raise InvalidArgument(
                    f"key partition {partition} is outside [0, {table.key_partitions}) "
                    f"of table {table.name!r}"
                )
        self.clock = clock or HybridLogicalClock()
        self.fail_at = fail_at
        self.state = ManifestState()
        self._started = False
        self.step_seconds: dict[str, float] = {}
        """Seconds spent before each step of the last batch (for benchmarks and logs)."""
        self._last_step = time.perf_counter()
        self.action_seconds: dict[str, float] = {}
        """Seconds of each Spark action of the last batch (for profiling)."""
        self.lock_priority = lock_priority
        self.lock_lease_s = lock_lease_s
        self._locks: TransactionLocks | None = None
        self.last_result: BatchResult | None = None
        """The last batch's result, with its snapshot token (streaming callers read it here)."""

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> IngestJob:
        """Register, claim the partitions, recover from the commit log, report. Idempotent."""
        if self._started:
            return self
        self.client.register()
        self.client.register_table(self.table.descriptor())
        self.client.claim_partitions(self.table.name, self.partitions)
        self._recover()
        self._started = True
        return self

    def _recover(self) -> None:
        self.state = ManifestState.from_records(self.manifest.records())
        if self.state.dangling is not None:
            self._clean_up(self.state.dangling)
            self.state.dangling = None
        self._adopt_partition_state()
        self.clock.observe(self.state.high)
        progress = self.client.partition_progress(self.table.name)
        for partition in self.partitions:
            if partition in progress:
                reported = progress[partition]
                self.clock.observe(max(int(reported.ingested or 0), int(reported.applied or 0)))
        if self.state.retention_horizon:
            # Before any roll-forward publishes history dropped below it (and into a Redis that
            # may have lost it).
            self.client.report_retention_horizon(self.table.name, self.state.retention_horizon)
        if self.state.unpublished is not None:
            try:
                self._publish(self.state.unpublished)  # a collect has nothing to publish
            except UpdateSuperseded as error:
                self._abandon_update(self.state.unpublished, error)
        self._report()
        if self.state.unpublished is not None:
            self._done(self.state.unpublished)
        else:
            self._maintain()

    def _clean_up(self, prepare: Record) -> None:
        """Delete a dead attempt's files, then its prepare record (in that order: retryable)."""
        for directory in prepare.body.get("directories", ()):
            log.info("removing files of dead attempt %s: %s", prepare.seq, directory)
            self.storage.delete(directory)
        self.manifest.delete(prepare)

    def _adopt_partition_state(self) -> None:
        """For each owned partition: the newest committed key index of any server and the sources
        earlier owners ingested (a handover moves both)."""
        root = f"{self.root}/_manifest"
        for info in self.storage.list_dir(root):
            server = info.path.rstrip("/").rsplit("/", 1)[-1]
            if server == self.server_id:
                continue
            other = ManifestState.from_records(
                r for r in read_records(self.storage, manifest_dir(self.root, server))
                if r.phase != PREPARE
            )  # fmt: skip
            for partition in self.partitions:
                theirs = other.key_index.get(partition)
                mine = self.state.key_index.get(partition)
                if theirs is not None and (mine is None or theirs.high > mine.high):
                    self.state.key_index[partition] = theirs
                consumed = other.consumed.get(partition, set())
                self.state.consumed.setdefault(partition, set()).update(consumed)
                self.clock.observe(other.ingested.get(partition, 0))

    def claim(self, partitions: Iterable[int]) -> None:
        """Take over key partitions handed to this server (its clock continues above them)."""
        added = sorted(set(partitions) - set(self.partitions))
        self.client.claim_partitions(self.table.name, added)
        self.partitions = sorted(set(self.partitions) | set(added))
        self._adopt_partition_state()
        progress = self.client.partition_progress(self.table.name)
        for partition in added:
            if partition in progress:
                reported = progress[partition]
                self.clock.observe(max(int(reported.ingested or 0), int(reported.applied or 0)))

    def hand_over(self, partition: int, to_server: str) -> None:
        """Give a key partition to another server, after applying every pending update."""
        self.start()
        self.flush_updates()
        self._report()
        self.client.hand_over(self.table.name, partition, to_server)
        self.partitions = [p for p in self.partitions if p != partition]

    # -- batches -----------------------------------------------------------------------------

    def run_batch(self, frame: Any, *, sources: Sequence[str] = ()) -> BatchResult:
        """Ingest one batch. ``sources`` name what it consumed: a batch whose sources were all
        committed before is skipped (exactly once across restarts)."""
        self.start()
        sources = tuple(sources)
        needed = [p for p in self.partitions if not sources or self.state.needs(p, sources)]
        if not needed:
            return self._remember(
                BatchResult(seq=0, rows=0, skipped=True, high=self.state.high, sources=sources)
            )
        for partition in needed:
            done = self.state.consumed.get(partition, set()) & set(sources)
            if done:
                raise InvalidArgument(
                    f"key partition {partition} already ingested {sorted(done)[:3]} but not the "
                    "rest of this batch's sources: split the batch so each one is all new"
                )
        seq = self.state.next_seq
        self.step_seconds, self._last_step = {}, time.perf_counter()
        self.action_seconds = {}
        try:
            return self._ingest(frame, seq, sources, needed)
        finally:
            self.release_transaction_locks()

    def tick(self) -> BatchResult:
        """An empty batch: nothing new arrived, so every owned partition's progress moves to now
        (an idle source must not hold the low-watermark back)."""
        self.start()
        base = self.clock.now()
        return self._commit_ingest(self.state.next_seq, (), [], base, base, 0, {}, {}, None, {})

    def run_directory(
        self, path: str, fmt: str = "parquet", *, options: dict[str, str] | None = None
    ) -> BatchResult:
        """Ingest the files of a directory not ingested yet, as one batch (in file name order)."""
        self.start()
        files = [
            info.path
            for info in self.storage.list_files(path)
            if not info.path.endswith((".crc", ".tmp"))
        ]
        # Group new files by the partitions that still need them (they differ after a handover).
        groups: dict[tuple[int, ...], list[str]] = {}
        for name in files:
            needed = tuple(p for p in self.partitions if self.state.needs(p, [f"file:{name}"]))
            if needed:
                groups.setdefault(needed, []).append(name)
        if not groups:
            return self.tick()
        result = None
        for _, names in sorted(groups.items(), key=lambda item: item[1][0]):
            result = self.run_batch(
                self.read_changelog(names, fmt, options), sources=[f"file:{n}" for n in names]
            )
        assert result is not None
        return result

    def read_changelog(
        self, paths: Sequence[str], fmt: str, options: dict[str, str] | None = None
    ) -> Any:
        reader = self.spark.read.format(fmt).schema(self._source_schema())
        if fmt == "csv":
            reader = reader.option("header", "true")
        return reader.options(**(options or {})).load(list(paths))

    def run_stream(
        self,
        source: Any,
        checkpoint: str,
        *,
        available_now: bool = False,
        processing_time: str | None = None,
        on_batch: Callable[[BatchResult], None] | None = None,
    ) -> Any:
        """Run a Structured Streaming source through ``foreachBatch``; returns the query.

        ``on_batch`` gets each micro-batch's result (its snapshot token for read-your-writes).

        ``source`` is a streaming DataFrame (``stream_directory`` builds one for a directory of
        changelog files; Kafka or any other source works the same after a select to the table's
        columns). Spark's ``batch_id`` names each micro-batch, so a batch replayed after a crash is
        recognised and skipped.
        """
        self.start()
        stream = hashlib.sha1(self.storage.qualify(checkpoint).encode()).hexdigest()[:12]

        def each(frame: Any, batch_id: int) -> None:
            result = self.run_batch(frame, sources=[f"stream:{stream}:{batch_id}"])
            if on_batch is not None:
                on_batch(result)

        writer = source.writeStream.foreachBatch(each).option("checkpointLocation", checkpoint)
        if available_now:
            writer = writer.trigger(availableNow=True)
        elif processing_time:
            writer = writer.trigger(processingTime=processing_time)
        return writer.start()

    def stream_directory(
        self, path: str, fmt: str = "parquet", *, options: dict[str, str] | None = None
    ) -> Any:
        """A streaming DataFrame over a directory of changelog files."""
        reader = self.spark.readStream.format(fmt).schema(self._source_schema())
        if fmt == "csv":
            reader = reader.option("header", "true")
        return reader.options(**(options or {})).load(path)

    def _source_schema(self) -> str:
        return self.table.spark_schema_ddl()

    # -- the batch ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _action(self, name: str) -> Iterator[None]:
        """Label the Spark jobs of one action (visible in logs and the UI) and time it."""
        context = self.spark.sparkContext
        context.setJobDescription(f"ingest {self.table.name}: {name}")
        started = time.perf_counter()
        try:
            yield
        finally:
            self.action_seconds[name] = time.perf_counter() - started
            context.setJobDescription(None)

    def _step(self, name: str) -> None:
        now = time.perf_counter()
        self.step_seconds[name] = now - self._last_step
        self._last_step = now
        if self.fail_at == name:
            raise SimulatedCrash(f"simulated crash at {name}")

    def _ingest(
        self,
        frame: Any,
        seq: int,
        sources: tuple[str, ...],
        needed: list[int],
    ) -> BatchResult:
        from pyspark.sql import functions as F

        table = self.table
        allow_partial_cluster_keys(self.spark, frame.sparkSession)
        keep_row_order_in_partitioned_writes(self.spark)  # before the resolution's write too
        # Not cached: the source is read twice (here and by the resolution), which costs less
        # than caching it. Sources must give the same rows when read again (files, Kafka offsets
        # and foreachBatch frames do); the resolution counts them again and fails the batch loudly
        # otherwise.
        rows = self._enrich(frame, needed)
        time_chunk = self._time_column_chunk()
        with self._action("read and count"):
            groups = (
                rows.groupBy(SOURCE_FILE, "_pid", "_kp", time_chunk.alias("_tchunk"))
                .agg(
                    F.min("_row").alias("_lo"), F.max("_row").alias("_hi"), F.count("*").alias("_n")
                )
                .collect()
            )
        touched = sorted({g["_kp"] for g in groups})
        spans_by_source: dict[tuple[str, int], list[int]] = {}
        for g in groups:
            span = spans_by_source.setdefault((g[SOURCE_FILE], g["_pid"]), [g["_lo"], g["_hi"], 0])
            span[0], span[1] = min(span[0], g["_lo"]), max(span[1], g["_hi"])
            span[2] += g["_n"]
        spans = sorted(
            (file, pid, lo, hi, n) for (file, pid), (lo, hi, n) in spans_by_source.items()
        )
        total_rows = sum(span[4] for span in spans)
        # Reserve [0, hi] of every (file, Spark partition): a change's commit timestamp is then
        # base + its position in the source even when other servers' rows were filtered out.
        reserved = sum(hi + 1 for _, _, _, hi, _ in spans)
        base = self.clock.now()
        high = base + max(reserved, 1) - 1
        self.clock.observe(high)
        if total_rows == 0:
            return self._commit_ingest(seq, sources, needed, base, high, 0, {}, {}, None, {})

        offsets, running = [], 0
        for source_file, pid, _, hi, _ in spans:
            offsets.append((source_file, pid, base + running))
            running += hi + 1
        offset_frame = local_frame(
            self.spark, offsets, [(SOURCE_FILE, "string"), ("_pid", "int"), ("_off", "long")]
        )
        stamped = rows.join(F.broadcast(offset_frame), on=[SOURCE_FILE, "_pid"]).withColumn(
            "_ord", F.col("_off") + F.col("_row")
        )
        stamped = stamped.withColumn("_ts", self._commit_ts())
        stamped = stamped.withColumn(
            "_chunk", spark_chunk_start(table.granularity, self._time_ms())
        )

        directories = {
            "segments": f"{self.root}/segments/{self.server_id}/b{seq:010d}",
            # The resolved frame: also this batch's key index level and pending updates.
            "resolution": resolution_directory(self.root, self.server_id, seq),
        }
        self.manifest.write(
            seq, PREPARE, {"kind": INGEST, "directories": sorted(directories.values())}
        )
        self._step("after_prepare")
        allocation, majors = self._allocate(segment_slots(groups, table.granularity, base, high))
        mapping = local_frame(
            self.spark,
            [(chunk, kp, number) for (chunk, kp), number in allocation.items()],
            [("_chunk", "long"), ("_kp", "int"), ("_seg", "int")],
        )
        key_index: dict[int, tuple[str, ...]] = {}
        updates_dir: str | None = None
        pending_min: dict[int, int] = {}
        targets: list[list[int]] = []
        read_again = total_rows
        if table.upsert:
            layout = bucket_layout(touched, self._resolution_tasks(len(touched)))
            stamped = stamped.withColumn(BUCKET_COLUMN, bucket_column(layout)).repartition(
                layout.tasks, BUCKET_COLUMN
            )
            delta = all(
                len(self.state.key_index[kp].levels) < MAX_INDEX_LEVELS
                for kp in touched
                if kp in self.state.key_index
            )
            index = self._read_index(touched, stamped, layout)
            resolved = resolve(
                stamped, index, table, mapping, cluster_by=[BUCKET_COLUMN], untouched_keys=not delta
            )
            with self._action("resolve"):
                (
                    resolution_file(resolved, [BUCKET_COLUMN])
                    .withColumn(INDEX_PARTITION_DIR, F.col("_kp"))
                    .write.mode("overwrite")
                    .options(
                        **plain_encoded([*PLAIN_RESOLUTION_COLUMNS, *unique_key(table.primary_key)])
                    )
                    .partitionBy(INDEX_PARTITION_DIR)
                    .parquet(directories["resolution"])
                )
            staged = self._read_resolutions([directories["resolution"]])
            with self._action("summarize resolution"):
                summary = resolution_summary(staged).collect()
            read_again = sum(int(row["rows"]) for row in summary)
            updated = [row for row in summary if row["_seg"] is not None]
            targets = sorted(
                [int(row["_chunk"]), int(row["_seg"]), int(row["updates"])] for row in updated
            )
            versions = stored_versions(staged, table)
            key_index = self._new_key_index(directories["resolution"], touched, delta)
            if updated:
                updates_dir = directories["resolution"]
                oldest = min(int(row["oldest"]) for row in updated)
                # Per partition, the batch's oldest update: held back no later than needed by
                # those with updates, a little longer by the others (until applied).
                pending_min = {kp: oldest for kp in touched}
        else:
            versions = append_only(stamped, table).join(F.broadcast(mapping), on=["_chunk", "_kp"])
        if read_again != total_rows:
            raise Internal(
                f"table {table.name!r}: the batch's source gave {total_rows} rows when counted and "
                f"{read_again} when read again: it must be deterministic (persist it first)"
            )
        with self._action("write segments"):
            written = write_segments(
                versions,
                stored_columns(table),
                directories["segments"],
                len(allocation),
                self.storage,
                primary_key=table.primary_key,
                # Each resolution file holds whole key partitions (ingest.bucketing): no shuffle.
                shuffle=not table.upsert,
            )
        self._step("after_segments")
        self._step("after_files")

        summaries = footer_summaries(self.storage, list(written.values()))
        segments = {
            tag: self._first_generation(item, summary, majors[item.chunk_start])
            for (tag, item), summary in zip(written.items(), summaries, strict=True)
        }
        return self._commit_ingest(
            seq,
            sources,
            needed,
            base,
            high,
            total_rows,
            segments,
            key_index,
            updates_dir,
            pending_min,
            targets,
        )

    def _commit_ingest(
        self,
        seq: int,
        sources: tuple[str, ...],
        consumed: list[int],
        base: int,
        high: int,
        rows: int,
        segments: dict[tuple[int, int], Segment],
        key_index: dict[int, tuple[str, ...]],
        updates_dir: str | None,
        pending_min: dict[int, int],
        targets: Sequence[Sequence[int]] = (),
    ) -> BatchResult:
        body = {
            "kind": INGEST,
            "sources": list(sources),
            "consumed_partitions": consumed,
            "base": base,
            "high": high,
            "rows": rows,
            "partitions": self.partitions,
            "segments": [segment.to_dict() for segment in segments.values()],
            "key_index": {str(kp): list(levels) for kp, levels in key_index.items()},
            "updates": updates_dir,
            "pending_min": {str(kp): value for kp, value in pending_min.items()},
            # [chunk start, root partition, updates] of each segment the updates are for.
            "targets": [list(target) for target in targets],
        }
        record = self.manifest.write(seq, COMMIT, body)
        self.state.apply_commit(record)
        self._step("after_commit")
        self._publish(record)
        self._step("after_announce")
        self._report()
        self._step("after_report")
        self._done(record)
        updated = 0
        if self.state.pending and len(self.state.pending) >= self.table.update_cadence:
            updated = self.flush_updates()
        return self._remember(
            BatchResult(
                seq=seq,
                rows=rows,
                segments=tuple(segments.values()),
                high=high,
                base=base,
                updated_segments=updated,
                sources=sources,
            )
        )

    def _remember(self, result: BatchResult) -> BatchResult:
        """Stamp ``result`` with its snapshot token and keep it as :attr:`last_result` (what a
        streaming query's caller reads to wait for its writes)."""
        token = tokens.encode({self.table.name: result.high}) if result.high else ""
        self.last_result = dataclasses.replace(result, token=token)
        return self.last_result

    def _publish(self, record: Record) -> None:
        """Announce a commit under its transaction's locks (taken again when rolling forward)."""
        body = record.body
        locks = self.transaction_locks()
        rolling_forward = not locks.held
        if record.kind == INGEST:
            segments = [Segment.from_dict(item) for item in body["segments"]]
            if rolling_forward and segments:
                segments = self._not_yet_published(segments)
            if segments:
                if rolling_forward:
                    locks.lock(segments)
                owned = body.get("consumed_partitions", ())
                self.client.announce(segments, guard=locks.guard(segments, owned))
        elif record.kind == UPDATE:
            add = [Segment.from_dict(item) for item in body["add"]]
            remove = [Segment.from_dict(item) for item in body["remove"]]
            if rolling_forward:
                locks.lock([*remove, *add])
                check_still_current(
                    remove, add, self.table, self.client.announced_segments(self.table.name)
                )
            self.client.replace(add=add, remove=remove, guard=locks.guard([*remove, *add]))

    def _abandon_update(self, record: Record, error: UpdateSuperseded) -> None:
        """Give up an unpublished update whose segments a compaction replaced while this server
        was down: delete its files and make its updates pending again (the next updater run
        applies them to the segments that replaced them)."""
        self.release_transaction_locks()
        pending = record.body.get("pending")
        if pending is None:  # written before updates were recorded in their commit
            raise error
        log.warning("abandoning update %s: %s", record.seq, error)
        self.storage.delete(f"{self.root}/segments/{self.server_id}/u{record.seq:010d}")
        seq = self.state.next_seq
        body = {"kind": ABANDON, "update": record.seq, "pending": pending}
        self.state.apply_commit(self.manifest.write(seq, COMMIT, body))
        self.state.apply_done(
            self.manifest.write(seq, DONE, {"kind": ABANDON, "at_ms": _wall_ms()})
        )

    def _not_yet_published(self, segments: list[Segment]) -> list[Segment]:
        """Of a commit rolled forward, the segments to announce: not those announced before the
        crash, nor those a compaction took in while this server was down (its record names them,
        or, once collected, their files are gone): announcing those again would bring back what
        the compaction replaced, or be refused below a major compaction's version."""
        announced = {segment.id for segment in self.client.announced_segments(self.table.name)}
        compacted = compacted_inputs(self.storage, self.root)
        return [
            segment
            for segment in segments
            if segment.id not in announced
            and segment.id not in compacted
            and all(self.storage.exists(path) for path in segment.location)
        ]

    def transaction_locks(self) -> TransactionLocks:
        """The current transaction's locks (created empty on first use)."""
        if self._locks is None:
            self._locks = TransactionLocks(
                self.client, self.table.name, self.lock_priority, lease_s=self.lock_lease_s
            )
        return self._locks

    def release_transaction_locks(self) -> None:
        locks, self._locks = self._locks, None
        if locks is not None:
            locks.release()

    def _done(self, record: Record) -> None:
        """Finish a transaction, then collect garbage and checkpoint if due (between
        transactions, which is the only time either may run)."""
        done = self.manifest.write(record.seq, DONE, {"kind": record.kind, "at_ms": _wall_ms()})
        self.state.apply_done(done)
        self.release_transaction_locks()
        self._maintain()

    # -- commit log upkeep -------------------------------------------------------------------

    def _maintain(self) -> None:
        self.collect_garbage()
        self.sweep_private_files()
        if self.state.checkpoint_due(self.table.checkpoint_interval):
            self.checkpoint()

    def checkpoint(self) -> Record:
        """Write the commit log's state as a checkpoint, then delete the records it covers."""
        record = self.manifest.write_checkpoint(self.state)
        self.state.checkpointed(record)
        self.manifest.prune(record)
        return record

    def collect_garbage(self, *, now_ms: int | None = None) -> int:
        """Delete the files of replaced segments whose grace period is over; returns how many
        updates' garbage went. Recorded by a ``collect`` transaction after the deletes (which are
        idempotent: a crash in between only makes the next collection delete them again)."""
        now = _wall_ms() if now_ms is None else now_ms
        grace = self.table.gc_grace_ms
        if not garbage.collection_due(self.state.garbage, now, grace):
            return 0
        in_use = [
            location
            for segment in self.client.announced_segments(self.table.name)
            for location in segment.location
        ]
        collection = garbage.collectable(
            self.state.garbage,
            now,
            grace,
            in_use,
            pinned_releases(self.client, self.table.name, grace),
        )
        if not collection.seqs:
            return 0
        garbage.delete_files(self.storage, collection.locations)
        seq = self.state.next_seq
        record = self.manifest.write(seq, COMMIT, {"kind": COLLECT, "collected": collection.seqs})
        self.state.apply_commit(record)
        self.state.apply_done(self.manifest.write(seq, DONE, {"kind": COLLECT, "at_ms": now}))
        return len(collection.seqs)

    def sweep_private_files(self) -> int:
        """Delete this server's batch resolutions (and partitions of them) its state no longer
        names, neither as a key index level nor as pending updates; returns how many paths went.
        Between transactions only: an attempt in flight is named by nothing yet."""
        referenced = [
            level for version in self.state.key_index.values() for level in version.levels
        ]
        referenced += [
            item["updates"] for item in self.state.pending.values() if item.get("updates")
        ]
        return garbage.sweep_unreferenced(
            self.storage, f"{self.root}/_keyindex/{self.server_id}", referenced
        )

    def _report(self) -> None:
        progress = self.state.progress(self.partitions)
        if progress:
            self.client.report(self.table.name, progress)

    # -- the segment updater -----------------------------------------------------------------

    def flush_updates(self) -> int:
        """Apply every pending validUntil update now; returns how many segments were rewritten."""
        self.start()
        return update_run.run_updater(self)

    # -- helpers -----------------------------------------------------------------------------

    def _enrich(self, frame: Any, partitions: Sequence[int]) -> Any:
        """The user columns (typed), key partition, source position; owned partitions only."""
        from pyspark.sql import functions as F

        table = self.table
        columns = [F.col(f"`{c.name}`").cast(c.type).alias(c.name) for c in table.columns]
        position = F.monotonically_increasing_id()
        enriched = frame.select(
            *columns,
            F.input_file_name().alias(SOURCE_FILE),
            position.alias("_position"),
        )
        key = table.primary_key or table.column_names
        enriched = enriched.select(
            "*",
            key_partition(key, table.key_partitions).alias("_kp"),
            F.shiftright(F.col("_position"), _ROW_BITS).cast("int").alias("_pid"),
            (F.col("_position").bitwiseAND(F.lit((1 << _ROW_BITS) - 1))).alias("_row"),
        ).withColumnRenamed("_position", SOURCE_POSITION)
        if len(partitions) < table.key_partitions:
            enriched = enriched.filter(F.col("_kp").isin(list(partitions)))
        return enriched

    def _commit_ts(self) -> Any:
        """Each change's commit timestamp from its source order ``_ord`` (base + position).

        With a transaction column, every change of a transaction takes the position of the
        transaction's first change: one timestamp for all, increasing in first-change order.
        """
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        name = self.table.transaction_column
        if name is None:
            return F.col("_ord")
        first = F.min("_ord").over(Window.partitionBy(F.col(f"`{name}`")))
        return F.when(F.col(f"`{name}`").isNull(), F.col("_ord")).otherwise(first)

    def _time_ms(self) -> Any:
        """Each row's time (epoch ms) for its chunk: the time column, else the commit time."""
        from pyspark.sql import functions as F

        commit_ms = F.shiftright(F.col("_ts"), 16)
        value = self._time_column_ms()
        return commit_ms if value is None else F.coalesce(value, commit_ms)

    def _time_column_ms(self) -> Any | None:
        """The time column as epoch ms (``None`` for tables chunked by commit time)."""
        from pyspark.sql import functions as F

        name = self.table.time_column
        if name is None:
            return None
        kind = next(c.type for c in self.table.columns if c.name == name).lower()
        column = F.col(name)
        if kind.startswith("timestamp") or kind == "date":
            return F.unix_millis(column.cast("timestamp"))
        return column.cast("long")

    def _time_column_chunk(self) -> Any:
        """Each row's chunk by its time column; null where the commit time decides it."""
        from pyspark.sql import functions as F

        value = self._time_column_ms()
        if value is None:
            return F.lit(None).cast("long")
        return F.when(value.isNotNull(), spark_chunk_start(self.table.granularity, value))

    def _resolution_tasks(self, partitions: int) -> int:
        """Spark tasks resolving a batch: one per key partition, at most two per core."""
        cores = max(1, int(self.spark.sparkContext.defaultParallelism))
        return max(1, min(partitions, 2 * cores))

    def _read_index(self, partitions: Sequence[int], like: Any, layout: BucketLayout) -> Any:
        """The key index of ``partitions``, split like the batch: of several levels, each key's
        newest entry (ranked in the split and order the join with the batch needs anyway)."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        stacks = [
            self.state.key_index[kp].levels for kp in partitions if kp in self.state.key_index
        ]
        if not stacks:
            return empty_index(like, self.table).withColumn(BUCKET_COLUMN, bucket_column(layout))
        deepest = max(len(levels) for levels in stacks)
        if deepest == 1:
            index = self._index_entries([levels[0] for levels in stacks])
            return index.withColumn(BUCKET_COLUMN, bucket_column(layout))
        frames = [
            self._index_entries(
                [levels[level] for levels in stacks if len(levels) > level]
            ).withColumn("_level", F.lit(level))
            for level in range(deepest)
        ]
        stacked = frames[0]
        for frame in frames[1:]:
            stacked = stacked.unionByName(frame)
        keys = [*self.table.primary_key, BUCKET_COLUMN]  # key first: see resolve()
        newest_first = Window.partitionBy(*keys).orderBy(F.col("_level").desc())
        return (
            stacked.withColumn(BUCKET_COLUMN, bucket_column(layout))
            .repartition(layout.tasks, BUCKET_COLUMN)
            .withColumn("_rank", F.row_number().over(newest_first))
            .filter(F.col("_rank") == 1)
            .drop("_rank", "_level")
        )

    def _index_entries(self, paths: Sequence[str]) -> Any:
        """The key index entries of levels (partition directories of batches' resolutions)."""
        return index_entries(self._read_resolutions(paths), self.table)

    def _read_resolutions(self, paths: Sequence[str]) -> Any:
        """Batches' resolved frames (whole batch directories or single partitions of them)."""
        unknown = [path for path in paths if not is_resolution(path)]
        if unknown:
            raise Internal(
                f"table {self.table.name!r}: the commit log names files in a layout this version "
                f"does not read (written before key index levels were batches' resolutions): "
                f"{unknown[:3]}"
            )
        # Found recursively: partition discovery refuses several batch directories at once.
        stored = (
            self.spark.read.schema(resolution_schema(self.table))
            .option("recursiveFileLookup", "true")
            .parquet(*paths)
        )
        return with_derived_columns(stored, self.table)

    def _new_key_index(
        self, directory: str, touched: Sequence[int], delta: bool
    ) -> dict[int, tuple[str, ...]]:
        """The key index levels of each touched partition after this batch wrote its resolution
        to ``directory``: its partition directory goes on top of them, or replaces them when the
        batch resolved against the whole index (then it holds every key)."""
        written = {
            info.path.rstrip("/").rsplit(f"/{INDEX_PARTITION_DIR}=", 1)[-1]
            for info in self.storage.list_dir(directory)
            if f"/{INDEX_PARTITION_DIR}=" in info.path
        }
        levels: dict[int, tuple[str, ...]] = {}
        for kp in touched:
            if str(kp) not in written:
                raise Internal(f"the resolution of key partition {kp} wrote no file")
            path = f"{directory}/{INDEX_PARTITION_DIR}={kp}"
            below = self.state.key_index.get(kp)
            levels[kp] = (*below.levels, path) if delta and below is not None else (path,)
        return levels

    def _allocate(
        self, pairs: Sequence[tuple[int, int]]
    ) -> tuple[dict[tuple[int, int], int], dict[int, str]]:
        """A fresh, locked first-generation partition number for every (chunk, key partition),
        in each chunk's current major version (a major compaction's, once one replaced it).

        The versions are read again once the numbers are locked: a major compaction needs a
        time-chunk lock, which the segment locks now block, so a version still unchanged then
        stays current until the batch is published. One that changed meanwhile is allocated
        again in the new version."""
        by_chunk: dict[int, list[int]] = {}
        for chunk, kp in pairs:
            by_chunk.setdefault(chunk, []).append(kp)
        intervals = {chunk: chunk_interval(self.table.granularity, chunk) for chunk in by_chunk}
        name, locks = self.table.name, self.transaction_locks()
        current = self.client.chunk_versions(name, intervals.values(), self.table.version)
        for _ in range(3):
            allocation: dict[tuple[int, int], int] = {}
            versions = {chunk: current[interval] for chunk, interval in intervals.items()}
            for chunk, kps in sorted(by_chunk.items()):
                numbers = self.client.allocate_partitions(
                    name, intervals[chunk], versions[chunk], len(kps)
                )
                locks.lock_partitions(intervals[chunk], versions[chunk], numbers)
                allocation.update({(chunk, kp): n for kp, n in zip(kps, numbers, strict=True)})
            again = self.client.chunk_versions(name, intervals.values(), self.table.version)
            if again == current:
                return allocation, versions
            current = again
        raise LockConflict(
            f"table {name!r}: major compactions kept replacing the batch's time chunks while "
            "it allocated its partitions"
        )

    def _first_generation(
        self, written: WrittenSegment, summary: FooterSummary, version: str
    ) -> Segment:
        return describe_segment(
            written,
            summary,
            table=self.table.name,
            interval=chunk_interval(self.table.granularity, written.chunk_start),
            version=version,
            server=self.server_id,
        )


def segment_slots(
    groups: Iterable[Any], granularity: Granularity, base: int, high: int
) -> list[tuple[int, int]]:
    """The ``(chunk start, key partition)`` pairs a batch may write a segment for.

    ``groups`` have ``_kp`` and ``_tchunk`` (the chunk by the time column; null where the commit
    time decides, and every commit timestamp of the batch lies in ``[base, high]``). A pair whose
    records all lose or are deletes gets no segment: its partition number is simply never used.
    """
    by_commit = chunks_between(granularity, base >> 16, high >> 16)
    slots: set[tuple[int, int]] = set()
    for group in groups:
        chunks = by_commit if group["_tchunk"] is None else [int(group["_tchunk"])]
        slots.update((chunk, int(group["_kp"])) for chunk in chunks)
    return sorted(slots)


def resolution_directory(root: str, server_id: str, seq: int) -> str:
    """Where batch ``seq`` writes its resolved frame (its key index level and pending updates),
    one ``_kpDir=<key partition>`` directory per partition."""
    return f"{root}/_keyindex/{server_id}/r{seq:010d}"


def is_resolution(path: str) -> bool:
    """Whether a key index level or pending updates path is a batch's resolution (the older
    layout wrote key index entries and updates as files of their own)."""
    return _RESOLUTION.search(path) is not None


def _wall_ms() -> int:
    """Wall-clock milliseconds: grace periods of replaced files (never commit timestamps)."""
    return time.time_ns() // 1_000_000
