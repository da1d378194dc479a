"""Recovery: what a (re)started server does with its commit log before its next transaction.

:func:`recover` reads the log; deletes the files of a dead attempt (a prepare without a commit);
adopts, for each owned key partition, the newest key index and the consumed sources (and stream
offsets) of any server (a handover moves both, :func:`adopt_partition_state`); moves the clock above every
timestamp handed out for those partitions; reports the retention horizon an update dropped
history below; announces again what the log calls done and a failed-over store lost
(:mod:`.reconcile`); rolls an unpublished commit forward (or abandons an update whose segments a
compaction replaced meanwhile, :func:`abandon_update`); and reports. Nothing is lost or announced
twice, whichever step a crash interrupted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from horizon_broker._core.errors import HorizonError, SegmentIdReused
from horizon_broker.ingest import garbage, upkeep
from horizon_broker.ingest.commit import CommitProtocol
from horizon_broker.ingest.locking import UpdateSuperseded
from horizon_broker.ingest.logged_numbers import logged_segments_of_table
from horizon_broker.ingest.manifest import (
    ABANDON,
    PREPARE,
    UPDATE,
    ManifestState,
    Record,
    manifest_dir,
    read_records,
    wall_ms,
)
from horizon_broker.ingest.reconcile import reconcile
from horizon_broker.ingest.stream_offsets import batch_source
from horizon_broker.timeline.segment import Segment

log = logging.getLogger(__name__)


def recover(protocol: CommitProtocol) -> None:
    """Bring ``protocol`` to where its commit log says the server is, finishing what a crash
    left unfinished."""
    server = protocol.server
    protocol.state = state = ManifestState.from_records(server.manifest.records())
    if state.dangling is not None:
        clean_up(protocol, state.dangling)
        state.dangling = None
    adopt_partition_state(protocol)
    server.clock.observe(state.high)
    observe_reported_progress(protocol, protocol.partitions)
    if state.retention_horizon:
        # Before any roll-forward publishes history dropped below it (and into a Redis that
        # may have lost it).
        server.client.report_retention_horizon(server.table.name, state.retention_horizon)
    reserve_logged_numbers(protocol)
    # A store that failed over may lack batches the log calls done (before the report below).
    reconcile(protocol, unpublished=state.unpublished)
    if state.unpublished is not None:
        try:
            protocol.publish(state.unpublished)  # a collect has nothing to publish
        except UpdateSuperseded as error:
            abandon_update(protocol, state.unpublished, error)
        except SegmentIdReused as error:
            # Its numbers were drawn on a primary that failed over before its commit record
            # existed, and handed out again: never announced, so nobody served it (rule F4).
            if state.unpublished.kind != UPDATE:
                raise
            abandon_update(protocol, state.unpublished, error)
    protocol.report()
    if state.unpublished is not None:
        protocol.done(state.unpublished)
    else:
        upkeep.maintain(server, state)


def reserve_logged_numbers(protocol: CommitProtocol) -> None:
    """Keep the store from handing out again a partition number any server's commit log of the
    table names, now and after every change of primary (a server that is down cannot re-publish
    its own; rule F4)."""
    server = protocol.server

    def logged() -> list[Segment]:
        return logged_segments_of_table(server.storage, server.root)

    server.client.follow_numbers_of(f"table {server.table.name}", logged)


def clean_up(protocol: CommitProtocol, prepare: Record) -> None:
    """Delete a dead attempt's files, then its prepare record (in that order: retryable)."""
    server = protocol.server
    for directory in prepare.body.get("directories", ()):
        log.info("removing files of dead attempt %s: %s", prepare.seq, directory)
        server.storage.delete(directory)
    server.manifest.delete(prepare)


def adopt_partition_state(protocol: CommitProtocol) -> None:
    """For each owned partition: the newest committed key index of any server and the sources
    earlier owners ingested (a handover moves both)."""
    server, state = protocol.server, protocol.state
    for info in server.storage.list_dir(f"{server.root}/_manifest"):
        other_server = info.path.rstrip("/").rsplit("/", 1)[-1]
        if other_server == server.server_id:
            continue
        other = ManifestState.from_records(
            r for r in read_records(server.storage, manifest_dir(server.root, other_server))
            if r.phase != PREPARE
        )  # fmt: skip
        for partition in protocol.partitions:
            theirs = other.key_index.get(partition)
            mine = state.key_index.get(partition)
            if theirs is not None and (mine is None or theirs.high > mine.high):
                state.key_index[partition] = theirs
            consumed = other.consumed.get(partition, set())
            state.consumed.setdefault(partition, set()).update(consumed)
            for stream, offset in other.offsets.get(partition, {}).items():
                state.consume(partition, [batch_source(stream, offset, offset)])
            server.clock.observe(other.ingested.get(partition, 0))


def observe_reported_progress(protocol: CommitProtocol, partitions: Iterable[int]) -> None:
    """Move the clock above what Redis says was ingested or applied for ``partitions`` (by this
    server or an earlier owner), so commit timestamps keep increasing across a handover."""
    server = protocol.server
    progress = server.client.partition_progress(server.table.name)
    for partition in partitions:
        if partition in progress:
            reported = progress[partition]
            ingested, applied = int(reported.ingested or 0), int(reported.applied or 0)
            server.clock.observe(max(ingested, applied))
            protocol.adopted[partition] = (ingested, applied)


def abandon_update(protocol: CommitProtocol, record: Record, error: HorizonError) -> None:
    """Give up an unpublished update whose segments a compaction replaced while this server
    was down (or whose partition numbers a failed-over store handed out again before it was
    announced): delete its files that no announcement names and make its updates pending again
    (the next updater run applies them to the segments that are current then)."""
    protocol.release_transaction_locks()
    pending = record.body.get("pending")
    if pending is None:  # written before updates were recorded in their commit
        raise error
    log.warning("abandoning update %s: %s", record.seq, error)
    server = protocol.server
    # Its replace may have taken effect before the crash (or its reply was lost) and a compaction
    # then taken its rewrites in: those stay announced, overshadowed, until the compaction's
    # collection deletes them. Only what no announcement names goes now.
    garbage.delete_unannounced(
        server.storage, server.client, server.table.name, server.update_directory(record.seq)
    )
    body = {"kind": ABANDON, "update": record.seq, "pending": pending}
    server.manifest.write_transaction(protocol.state, body, at_ms=wall_ms())
