"""The commit protocol of one ingestion server: prepare, commit, publish, report, done.

Every transaction (a batch or an updater run) goes through the same records of the commit log
(:mod:`horizon_broker.ingest.manifest`): :meth:`CommitProtocol.prepare` names the directories an attempt will
write before it writes them; :meth:`~CommitProtocol.commit` records what it wrote (the point of no
return); :meth:`~CommitProtocol.publish` announces it under the transaction's locks;
:meth:`~CommitProtocol.report` tells Redis the owned partitions' progress; and
:meth:`~CommitProtocol.done` finishes it, releases its locks and runs the upkeep due
(:mod:`horizon_broker.ingest.upkeep`). A publish is idempotent, which is what rolling a commit forward after a
crash relies on (:mod:`horizon_broker.ingest.recovery`). The protocol owns what changes while a job lives: the
commit log's state, the key partitions the server owns and the current transaction's locks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from horizon_broker.ingest import upkeep
from horizon_broker.ingest.compaction_records import compacted_inputs
from horizon_broker.ingest.locking import TransactionLocks, check_still_current
from horizon_broker.ingest.manifest import (
    COMMIT,
    DONE,
    INGEST,
    PREPARE,
    UPDATE,
    ManifestState,
    Record,
    wall_ms,
)
from horizon_broker.ingest.reconcile import announced_files
from horizon_broker.ingest.server_table import ServerTable
from horizon_broker.locks.client import LockRenewer
from horizon_broker.timeline.segment import Segment


@dataclass(frozen=True, slots=True)
class ResolvedBatch:
    """A batch's versions to store, and what its resolution left for the key index and the
    updater (nothing, for an append table)."""

    versions: Any
    """The rows to write as segments (lazy), with ``_chunk`` and ``_seg``; None when the driver
    wrote them already."""
    rows: int
    """How many source rows the resolution read (it must be the count the batch began with)."""
    key_index: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    updates: str | None = None
    pending_min: Mapping[int, int] = field(default_factory=dict)
    targets: Sequence[Sequence[int]] = ()


@dataclass(frozen=True, slots=True)
class IngestCommit:
    """What a batch's commit records: the sources it consumed, its commit timestamps, its
    segments, its key index levels and its pending ``validUntil`` updates."""

    seq: int
    sources: tuple[str, ...]
    consumed_partitions: Sequence[int]
    """The owned key partitions that consumed ``sources`` (those that had not yet)."""
    base: int
    """The batch's first commit timestamp."""
    high: int
    """Its last commit timestamp: the owned partitions are ingested through it."""
    rows: int = 0
    segments: tuple[Segment, ...] = ()
    key_index: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    """Key partition -> its key index levels after the batch."""
    updates: str | None = None
    """The resolution directory holding the batch's pending updates (None: it has none)."""
    pending_min: Mapping[int, int] = field(default_factory=dict)
    """Key partition -> the oldest commit timestamp its pending updates hold back."""
    targets: Sequence[Sequence[int]] = ()
    """``[chunk start, root partition, updates]`` of each segment the updates are for."""
    earliest_event_ms: int | None = None
    """The batch's oldest event time (its ``time_column``), for the metrics; not recorded."""

    def body(self, partitions: Sequence[int]) -> dict[str, Any]:
        """The commit record's body; ``partitions`` are the server's key partitions now."""
        return {
            "kind": INGEST,
            "sources": list(self.sources),
            "consumed_partitions": list(self.consumed_partitions),
            "base": self.base,
            "high": self.high,
            "rows": self.rows,
            "partitions": list(partitions),
            "segments": [segment.to_dict() for segment in self.segments],
            "key_index": {str(kp): list(levels) for kp, levels in self.key_index.items()},
            "updates": self.updates,
            "pending_min": {str(kp): value for kp, value in self.pending_min.items()},
            "targets": [list(target) for target in self.targets],
        }


class CommitProtocol:
    """One server's transactions on one table (one at a time)."""

    def __init__(
        self,
        server: ServerTable,
        partitions: Iterable[int],
        *,
        lock_priority: int,
        lock_lease_s: float,
        lock_renewer: LockRenewer | None = None,
    ) -> None:
        self.server = server
        self.partitions = sorted(set(partitions))
        """The key partitions this server owns."""
        self.state = ManifestState()
        """What the commit log says (replaced when a restart reads it again)."""
        self.lock_priority = lock_priority
        self.lock_lease_s = lock_lease_s
        self.lock_renewer = lock_renewer
        """The server's one renewal thread for every table's locks (None: one per transaction)."""
        self.adopted: dict[int, tuple[int, int]] = {}
        """Owned partitions' progress as the state store had it when this server started or
        claimed them: its reports never go below it (the commit log's value of a partition
        that was handed away and back is stale; one never ingested has none)."""
        self._locks: TransactionLocks | None = None

    # -- locks -------------------------------------------------------------------------------

    def transaction_locks(self) -> TransactionLocks:
        """The current transaction's locks (created empty on first use)."""
        if self._locks is None:
            server = self.server
            self._locks = TransactionLocks(
                server.client,
                server.table.name,
                self.lock_priority,
                lease_s=self.lock_lease_s,
                renewer=self.lock_renewer,
            )
        return self._locks

    def release_transaction_locks(self) -> None:
        locks, self._locks = self._locks, None
        if locks is not None:
            locks.release()

    # -- the records -------------------------------------------------------------------------

    def prepare(self, seq: int, kind: str, directories: Sequence[str]) -> Record:
        """Before an attempt writes any file: the directories it will write (a restart deletes
        them if the attempt never committed)."""
        return self.server.manifest.write(
            seq, PREPARE, {"kind": kind, "directories": list(directories)}
        )

    def commit(self, seq: int, body: dict[str, Any]) -> Record:
        """Record a transaction whose files are all written; from here on it is rolled forward."""
        record = self.server.manifest.write(seq, COMMIT, body)
        self.state.apply_commit(record)
        return record

    def commit_ingest(self, batch: IngestCommit) -> Record:
        """Commit a batch, publish it, report, finish it (passing its kill points)."""
        steps = self.server.steps
        record = self.commit(batch.seq, batch.body(self.partitions))
        steps.step("after_commit")
        self.publish(record)
        steps.step("after_announce")
        self.report()
        steps.step("after_report")
        self.done(record)
        return record

    def publish(self, record: Record) -> None:
        """Announce a commit under its transaction's locks (taken again when rolling forward)."""
        server, body = self.server, record.body
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
                server.client.announce(segments, guard=locks.guard(segments, owned))
        elif record.kind == UPDATE:
            add = [Segment.from_dict(item) for item in body["add"]]
            remove = [Segment.from_dict(item) for item in body["remove"]]
            if rolling_forward:
                locks.lock([*remove, *add])
                announced = server.client.announced_segments(server.table.name)
                check_still_current(remove, add, server.table, announced)
            server.client.replace(add=add, remove=remove, guard=locks.guard([*remove, *add]))

    def report(self) -> None:
        """Tell Redis how far the owned partitions are ingested and their updates applied.

        Between transactions every partition with no update pending is *idle* (rule 7 of
        ``docs/design/contract/watermarks.md``): this server has read nothing it has not committed,
        so its LWM may follow the server's clock until :meth:`resume`.
        """
        own = self.state.progress(self.partitions)
        progress = {}
        for partition in self.partitions:
            ingested, applied = own.get(partition, (0, 0))
            adopted = self.adopted.get(partition, (0, 0))
            progress[partition] = (max(ingested, adopted[0]), max(applied, adopted[1]))
        pending = self.state.pending_min()
        idle = [p for p in progress if p not in pending]
        if progress:
            self.server.client.report(self.server.table.name, progress, idle=idle)

    def resume(self) -> int | None:
        """Before taking commit timestamps: the owned partitions stop following the clock,
        and the job's clock moves above every snapshot that may have been served for them
        (returned; None when none was idle)."""
        server = self.server
        floor = server.client.resume(server.table.name, self.partitions)
        if floor is not None:
            server.clock.observe(floor)
        return floor

    def done(self, record: Record) -> None:
        """Finish a transaction, then collect garbage and checkpoint if due (between
        transactions, which is the only time either may run)."""
        manifest = self.server.manifest
        self.state.apply_done(
            manifest.write(record.seq, DONE, {"kind": record.kind, "at_ms": wall_ms()})
        )
        self.release_transaction_locks()
        upkeep.maintain(self.server, self.state)

    def _not_yet_published(self, segments: list[Segment]) -> list[Segment]:
        """Of a commit rolled forward, the segments to announce: not those announced before the
        crash, nor those a compaction took in while this server was down (its record names them,
        or, once collected, their files are gone): announcing those again would bring back what
        the compaction replaced, or be refused below a major compaction's version."""
        server = self.server
        announced = announced_files(server.client.announced_segments(server.table.name))
        server.client.remember_announced(
            s for s in segments if announced.get(s.id) == tuple(s.location)
        )
        compacted = compacted_inputs(server.storage, server.root)
        return [
            segment
            for segment in segments
            if announced.get(segment.id) != tuple(segment.location)
            and segment.id not in compacted
            and all(server.storage.exists(path) for path in segment.location)
        ]
