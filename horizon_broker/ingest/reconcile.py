"""Reconciling the state store with the commit log (rule F4 of
``docs/design/contract/failover.md``).

The commit log in storage is the truth for what this server committed. A state store that failed
over to a replica without the last acknowledged writes can lack a batch the log calls done: its
segments were announced, then lost. At every start, after recovery has rolled forward what a
crash left unfinished and before the server reports, :func:`reconcile` folds the commit records
the log still holds (those after its last checkpoint) into the segments they leave announced, and
announces the ones the store lacks, withdrawing in the same atomic step what an update of the log
removed and the store still lists. The segments are the ones the log names (same ids, same commit
timestamps), so a store that lost nothing sees nothing, and one that did sees the batch again.

Not re-announced: a segment a compaction took in (its record names it, or once collected its
files are gone), and anything of an update the log abandoned.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from horizon_broker.ingest.compaction_records import compacted_inputs
from horizon_broker.ingest.manifest import ABANDON, COMMIT, INGEST, UPDATE, Record
from horizon_broker.timeline.segment import Segment, SegmentId

if TYPE_CHECKING:
    from horizon_broker.ingest.commit import CommitProtocol

log = logging.getLogger(__name__)


def logged_segments(
    records: Iterable[Record],
) -> tuple[dict[SegmentId, Segment], dict[SegmentId, Segment]]:
    """What the commits of ``records`` leave announced, and what they withdrew (pure): a batch's
    segments and an update's additions count, an update's removals take them back out, an
    abandoned update counts for nothing."""
    commits = [record for record in records if record.phase == COMMIT]
    abandoned = {int(r.body["update"]) for r in commits if r.kind == ABANDON}
    kept: dict[SegmentId, Segment] = {}
    withdrawn: dict[SegmentId, Segment] = {}
    for record in sorted(commits, key=lambda r: r.seq):
        added: Sequence[Any]
        removed: Sequence[Any]
        if record.kind == INGEST:
            added, removed = record.body.get("segments", ()), ()
        elif record.kind == UPDATE and record.seq not in abandoned:
            added, removed = record.body.get("add", ()), record.body.get("remove", ())
        else:
            continue
        for raw in removed:
            segment = Segment.from_dict(raw)
            kept.pop(segment.id, None)
            withdrawn[segment.id] = segment
        for raw in added:
            segment = Segment.from_dict(raw)
            kept[segment.id] = segment
            withdrawn.pop(segment.id, None)
    return kept, withdrawn


def announced_files(announced: Iterable[Segment]) -> dict[SegmentId, tuple[str, ...]]:
    """Each announced segment's files by id. A segment counts as announced only when the store
    holds *it*, its id with its files: the same id with other files is another server's segment
    that a failover let reuse the number (the announcement then fails loudly, rule F4)."""
    return {segment.id: tuple(segment.location) for segment in announced}


def reconcile(protocol: CommitProtocol, *, unpublished: Record | None) -> int:
    """Announce what the commit log says is announced and the store lacks; returns how many
    segments were announced again. ``unpublished`` (a commit without its ``done``) is left to
    the roll-forward, which checks what a compaction did meanwhile."""
    server = protocol.server
    records = server.manifest.records()
    if unpublished is not None:
        records = [r for r in records if r.seq != unpublished.seq]
    kept, withdrawn = logged_segments(records)
    if not kept and not withdrawn:
        return 0
    announced = announced_files(server.client.announced_segments(server.table.name))
    missing = [
        segment
        for segment_id, segment in kept.items()
        if announced.get(segment_id) != tuple(segment.location)
    ]
    if missing:
        compacted = compacted_inputs(server.storage, server.root)
        missing = [
            segment
            for segment in missing
            if segment.id not in compacted
            and all(server.storage.exists(path) for path in segment.location)
        ]
    stale = [segment for segment_id, segment in withdrawn.items() if segment_id in announced]
    server.client.remember_announced(
        segment
        for segment_id, segment in kept.items()
        if announced.get(segment_id) == tuple(segment.location)
    )
    if not missing:
        return 0  # an update's removal alone lost: its additions are missing too, or compacted
    log.warning(
        "server %s: the state store lacks %d segment(s) of table %s its commit log announced "
        "(a failover lost them?): announcing them again",
        server.server_id,
        len(missing),
        server.table.name,
    )
    locks = protocol.transaction_locks()
    try:
        locks.lock([*stale, *missing])
        server.client.replace(add=missing, remove=stale, guard=locks.guard([*stale, *missing]))
    finally:
        protocol.release_transaction_locks()
    return len(missing)
