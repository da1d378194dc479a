"""The ingestion job: one server's pipeline from a changelog to announced segments and watermarks.

Per batch (see :mod:`horizon_broker.ingest.manifest` for the exactly-once protocol), each stage in its module::

    read (changelog) -> commit timestamps (commit_times) -> PREPARE -> allocate partitions
    (allocation) -> resolve keys, write the key index level and pending updates (batch, key_index)
    -> write segments (batch, segments) -> COMMIT -> announce -> report -> DONE (commit)
    -> [updater (update_run)] -> upkeep: garbage, private files, checkpoint (upkeep)

A restarted job (a new object on the same storage and server id) first cleans up a dead attempt,
rolls an unpublished commit forward and reports (:mod:`horizon_broker.ingest.recovery`), so nothing is lost or
announced twice. Kill points are injectable with ``fail_at`` (one of :data:`STEPS`) for tests.
This module owns the job's life (start, batches, streams, handovers, parking) and what a batch
returns.

Between transactions every owned partition with nothing pending is reported *idle*: its LWM follows
the server's clock (heartbeats), so a table that receives nothing never holds reads back; a batch
resumes its partitions before it takes a commit timestamp. A clean stop *parks* them
(:meth:`IngestJob.park`): their LWM then follows the state store's clock (rule 7 of
``docs/design/contract/watermarks.md``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from horizon_broker._core.errors import HorizonError, InvalidArgument
from horizon_broker._core.hlc import HybridLogicalClock
from horizon_broker.ingest import (
    changelog,
    debezium,
    debezium_files,
    debezium_truncate,
    recovery,
    update_run,
    upkeep,
)
from horizon_broker.ingest.batch import write_batch
from horizon_broker.ingest.commit import CommitProtocol, IngestCommit
from horizon_broker.ingest.locking import TransactionLocks
from horizon_broker.ingest.manifest import Manifest, ManifestState, Record
from horizon_broker.ingest.schema_follow import follow_schema, register_from_file
from horizon_broker.ingest.server_table import ServerTable
from horizon_broker.ingest.steps import STEPS, SimulatedCrash, Steps
from horizon_broker.ingest.storage import Storage
from horizon_broker.ingest.table import TableDefinition
from horizon_broker.locks.client import DEFAULT_LEASE_S, LockRenewer
from horizon_broker.locks.rules import STREAMING_INGESTION_PRIORITY
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark import tokens
from horizon_broker.watermark.server import ServerClient

__all__ = ["STEPS", "BatchResult", "IngestJob", "SimulatedCrash"]

log = logging.getLogger(__name__)
Method = TypeVar("Method", bound=Callable[..., Any])


def _one_transaction(method: Method) -> Method:
    """Run ``method`` holding the job's transaction lock (reentrant: a batch runs the updater)."""

    @functools.wraps(method)
    def serialized(self: IngestJob, *args: Any, **kwargs: Any) -> Any:
        with self._transaction:
            return method(self, *args, **kwargs)

    return serialized  # type: ignore[return-value]


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
    """The snapshot token of this commit (:mod:`horizon_broker.watermark.tokens`): a query sent with it as its
    ``min_snapshot`` sees the batch (read-your-writes)."""
    seconds: float | None = None
    """From the batch's start to its announcement, its updater run included (None: skipped)."""
    stage_seconds: tuple[tuple[str, float], ...] = ()
    """Seconds of each Spark action of the batch and its updater run, in order."""
    pending_updates: int = 0
    """Batches whose validUntil updates are still to apply after this one (the updater's
    backlog; 0 with ``update_cadence = 1``)."""
    event_to_announced_s: float | None = None
    """From the batch's oldest event time (the table's ``time_column``) to its announcement,
    updates applied (None without a time column)."""
    arrival_to_announced_s: float | None = None
    """From the arrival of the batch's oldest changelog file (its modification time) to the
    batch's announcement, updates applied: how long its changes waited to become readable
    (directory sources only; the broker follows an announcement within milliseconds)."""
    dead_letters: int = 0
    """Malformed change events of the batch's files, dead-lettered (format ``debezium``)."""
    stream_lag_events: int | None = None
    """A stream table's entries not ingested yet after the batch (None: not a stream)."""
    stream_lag_s: float | None = None
    """How long the oldest of them has waited in the stream, in seconds."""
    stream_trimmed: int = 0
    """Gaps found in the stream before the batch: entries trimmed before the table read them,
    skipped under ``on_stream_trimmed = "skip"`` (:mod:`horizon_broker.ingest.redis_stream_trim`)."""


class IngestJob:
    """One server's ingestion of one table.

    ``partitions`` are the key partitions this server owns (default: all); rows of other key
    partitions in the input are left to their owners (several servers may read one source).
    ``lock_priority`` is the priority of the locks its transactions take (:mod:`horizon_broker.ingest.locking`);
    ``lock_renewer`` renews them (a server of many tables shares one; None: a thread per
    transaction). The commit clock is the client's (the server's one clock) unless ``clock``.
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
        lock_renewer: LockRenewer | None = None,
    ) -> None:
        steps = Steps(spark, table.name, fail_at)
        storage = Storage(spark)
        root = storage.qualify(table.table_root)
        owned = sorted(set(range(table.key_partitions) if partitions is None else partitions))
        for partition in owned:
            if not 0 <= partition < table.key_partitions:
                raise InvalidArgument(
                    f"key partition {partition} is outside [0, {table.key_partitions}) "
                    f"of table {table.name!r}"
                )
        manifest = Manifest(storage, root, client.server_id)
        clock = clock or client.clock
        self.server = ServerTable(spark, table, client, storage, root, manifest, clock, steps)
        """What every stage of the job's transactions works with."""
        self.protocol = CommitProtocol(
            self.server,
            owned,
            lock_priority=lock_priority,
            lock_lease_s=lock_lease_s,
            lock_renewer=lock_renewer,
        )
        """The commit protocol: the commit log's state, the owned partitions, the locks."""
        # The shared parts under the names the job's callers know (the objects of self.server).
        self.spark = spark
        self.table = table
        self.client = client
        self.server_id = client.server_id
        self.storage = storage
        self.root = root
        self.manifest = manifest
        self.clock = clock
        self.last_result: BatchResult | None = None
        """The last batch's result, with its snapshot token (streaming callers read it here)."""
        self._started = False
        self._transaction = threading.RLock()
        """One transaction at a time, whichever thread asks (a server runs tables at once)."""

    @property
    def state(self) -> ManifestState:
        return self.protocol.state

    @property
    def partitions(self) -> list[int]:
        return self.protocol.partitions

    @property
    def fail_at(self) -> str | None:
        return self.server.steps.fail_at

    @property
    def step_seconds(self) -> dict[str, float]:
        """Seconds spent before each step of the last batch (for benchmarks and logs)."""
        return self.server.steps.step_seconds

    @property
    def action_seconds(self) -> dict[str, float]:
        """Seconds of each Spark action of the last batch (for profiling)."""
        return self.server.steps.action_seconds

    @property
    def lock_priority(self) -> int:
        return self.protocol.lock_priority

    @property
    def lock_lease_s(self) -> float:
        return self.protocol.lock_lease_s

    # -- lifecycle ---------------------------------------------------------------------------

    @_one_transaction
    def start(self) -> IngestJob:
        """Register, claim the partitions, recover from the commit log, report. Idempotent.

        Started, it still finishes a transaction whose publish failed (its announce may have
        run or not) before the next one: the next commit would otherwise take its place as the
        one a restart rolls forward, and its segments would never be announced while the
        updater closes the versions they replace."""
        if self._started:
            if self.state.unpublished is not None or self.state.dangling is not None:
                recovery.recover(self.protocol)
            return self
        self.client.register()
        self._write_under(register_from_file(self.client, self.table))
        self.client.claim_partitions(self.table.name, self.partitions)
        recovery.recover(self.protocol)
        self._started = True
        return self

    @_one_transaction
    def claim(self, partitions: Iterable[int]) -> None:
        """Take over key partitions handed to this server (its clock continues above them)."""
        added = sorted(set(partitions) - set(self.partitions))
        self.client.claim_partitions(self.table.name, added)
        self.protocol.partitions = sorted(set(self.partitions) | set(added))
        recovery.adopt_partition_state(self.protocol)
        recovery.observe_reported_progress(self.protocol, added)
        self.protocol.report()

    @_one_transaction
    def ready_to_park(self) -> bool:
        """Finish what is committed and apply every pending update, then report, so each
        partition is idle and may be parked; False when that failed (they stay as they are:
        frozen, if the server stops). Parking itself is the server's, for all its tables at
        once (:meth:`park`, or :meth:`horizon_broker.ingest.server.IngestServer.park`)."""
        if not self._started:
            return False
        try:
            if self.state.unpublished is not None or self.state.dangling is not None:
                recovery.recover(self.protocol)
            if self.state.pending:
                self.flush_updates()
            self.protocol.report()
            return True
        except HorizonError as error:
            log.warning("table %s cannot be parked: %s", self.table.name, error)
            return False

    @_one_transaction
    def rejoin(self) -> None:
        """The server parked and is back: take this table's partitions again (resumed above
        every snapshot served meanwhile) and report them idle."""
        self.client.claim_partitions(self.table.name, self.partitions)
        recovery.observe_reported_progress(self.protocol, self.partitions)
        self.protocol.report()

    def park(self) -> list[tuple[str, int]]:
        """Stop cleanly: this server's idle partitions are parked in one atomic step (every
        table its client serves) and it stops heart-beating. Returns the partitions that could
        not be parked (an update still pending): they stay frozen, as a dead server's."""
        self.ready_to_park()
        return self.client.park(stop=True)

    @_one_transaction
    def hand_over(self, partition: int, to_server: str) -> None:
        """Give a key partition to another server, after applying every pending update."""
        self.start()
        self.flush_updates()
        self.protocol.report()
        self.client.hand_over(self.table.name, partition, to_server)
        self.protocol.partitions = [p for p in self.partitions if p != partition]

    # -- batches -----------------------------------------------------------------------------

    @_one_transaction
    def run_batch(self, frame: Any, *, sources: Sequence[str] = ()) -> BatchResult:
        """Ingest one batch. ``sources`` name what it consumed: a batch whose sources were all
        committed before is skipped (exactly once across restarts)."""
        self.start()
        self.follow_registered_schema()
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
        self.server.steps.restart()
        try:
            return self._commit(write_batch(self.protocol, frame, seq, sources, needed))
        finally:
            self.release_transaction_locks()

    @_one_transaction
    def tick(self) -> BatchResult:
        """An empty batch: every owned partition's committed progress moves to now. Not needed
        for an idle table (its LWM follows heartbeats); kept to force a commit record."""
        self.start()
        self.server.steps.restart()
        self.protocol.resume()
        base = self.clock.now()
        return self._commit(IngestCommit(self.state.next_seq, (), [], base, base))

    @_one_transaction
    def run_directory(
        self, path: str, fmt: str = "parquet", *, options: dict[str, str] | None = None
    ) -> BatchResult:
        """Ingest the files of a directory not ingested yet, as one batch (in file name order)."""
        self.start()

        def needing(source: str) -> tuple[int, ...]:
            return tuple(p for p in self.partitions if self.state.needs(p, [source]))

        batches = changelog.new_files(self.storage, path, needing)
        if not batches:
            # Nothing new: no transaction. Updates due (a restart rolled a batch forward) are
            # applied, so every partition is idle and its LWM follows the server's clock.
            if self.state.pending and len(self.state.pending) >= self.table.update_cadence:
                self.flush_updates()
            return self._remember(
                BatchResult(seq=0, rows=0, skipped=True, high=self.state.high, sources=())
            )
        result = None
        for infos in batches:
            names = [info.path for info in infos]
            frame, dead_letters = self._read_files(names, fmt, options)
            result = self.run_batch(frame, sources=[changelog.file_source(name) for name in names])
            if not result.skipped:
                arrived = min(info.modified_s for info in infos)
                result = self._remember(
                    dataclasses.replace(
                        result,
                        arrival_to_announced_s=time.time() - arrived,
                        dead_letters=dead_letters,
                    )
                )
        assert result is not None
        return result

    def follow_registered_schema(self) -> None:
        """Take up the table's registered schema (after a ``horizon table alter``): a source
        that builds its batch itself calls this before reading one (batches do too)."""
        self._write_under(follow_schema(self.client, self.table))

    def _write_under(self, table: TableDefinition) -> None:
        """Write from now on under ``table`` (the registered schema, :mod:`.schema_follow`)."""
        if table is not self.table:
            self.table = table
            self.server = dataclasses.replace(self.server, table=table)
            self.protocol.server = self.server

    def _read_files(
        self, paths: Sequence[str], fmt: str, options: dict[str, str] | None
    ) -> tuple[Any, int]:
        """A batch's changelog files as a frame of the table's columns, and how many of their
        events were dead-lettered (Debezium envelopes are flattened first, once, so every road
        of the batch sees the same rows)."""
        self.follow_registered_schema()
        if fmt == debezium.FORMAT:
            current = debezium_truncate.keys_reader(self)
            envelopes = debezium_files.read_envelopes(self.server, paths, current)
            return envelopes.frame, envelopes.dead_letters
        return self.read_changelog(paths, fmt, options), 0

    def read_changelog(
        self, paths: Sequence[str], fmt: str, options: dict[str, str] | None = None
    ) -> Any:
        return changelog.read_files(self.spark, self.table, paths, fmt, options)

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
        stream = changelog.stream_id(self.storage, checkpoint)

        def each(frame: Any, batch_id: int) -> None:
            result = self.run_batch(frame, sources=[changelog.stream_source(stream, batch_id)])
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
        return changelog.stream_files(self.spark, self.table, path, fmt, options)

    def _commit(self, batch: IngestCommit) -> BatchResult:
        """Commit, publish and finish a written batch, then run the updater if it is due."""
        self.protocol.commit_ingest(batch)
        updated = 0
        if self.state.pending and len(self.state.pending) >= self.table.update_cadence:
            updated = self.flush_updates()
        steps = self.server.steps
        return self._remember(
            BatchResult(
                seq=batch.seq,
                rows=batch.rows,
                segments=batch.segments,
                high=batch.high,
                base=batch.base,
                updated_segments=updated,
                sources=batch.sources,
                seconds=steps.elapsed(),
                stage_seconds=tuple(steps.action_seconds.items()),
                pending_updates=len(self.state.pending),
                event_to_announced_s=(
                    None
                    if batch.earliest_event_ms is None
                    else time.time() - batch.earliest_event_ms / 1000
                ),
            )
        )

    def _remember(self, result: BatchResult) -> BatchResult:
        """Stamp ``result`` with its snapshot token and keep it as :attr:`last_result` (what a
        streaming query's caller reads to wait for its writes)."""
        token = tokens.encode({self.table.name: result.high}) if result.high else ""
        self.last_result = dataclasses.replace(result, token=token)
        return self.last_result

    # -- the updater, locks and upkeep ---------------------------------------------------------

    @_one_transaction
    def flush_updates(self) -> int:
        """Apply every pending validUntil update now; returns how many segments were rewritten."""
        self.start()
        return update_run.run_updater(self.protocol)

    def transaction_locks(self) -> TransactionLocks:
        """The current transaction's locks (created empty on first use)."""
        return self.protocol.transaction_locks()

    def release_transaction_locks(self) -> None:
        self.protocol.release_transaction_locks()

    def checkpoint(self) -> Record:
        """Write the commit log's state as a checkpoint, then delete the records it covers."""
        return upkeep.checkpoint(self.server, self.state)

    def collect_garbage(self, *, now_ms: int | None = None) -> int:
        """Delete the files of replaced segments whose grace period is over (see
        :func:`horizon_broker.ingest.upkeep.collect_garbage`); returns how many updates' garbage went."""
        return upkeep.collect_garbage(self.server, self.state, now_ms=now_ms)

    def sweep_private_files(self) -> int:
        """Delete this server's batch resolutions its commit log no longer names (see
        :func:`horizon_broker.ingest.upkeep.sweep_private_files`); returns how many paths went."""
        return upkeep.sweep_private_files(self.server, self.state)
