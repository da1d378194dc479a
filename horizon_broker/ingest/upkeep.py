"""Upkeep between transactions: collecting garbage, sweeping private files, checkpointing.

After every transaction (and once a restart has recovered) a server deletes what its commit log
no longer needs: the files of segments its updates replaced, once their grace period is over and
no snapshot pin holds them (:func:`collect_garbage`, the rules in :mod:`horizon_broker.ingest.garbage`); its batches'
resolutions that are neither a key index level nor pending updates any more
(:func:`sweep_private_files`); and, every ``checkpoint_interval`` transactions, the commit log's
records, folded into a checkpoint (:func:`checkpoint`). Only between transactions: an attempt in
flight is named by nothing yet.
"""

from __future__ import annotations

from horizon_broker.ingest import garbage
from horizon_broker.ingest.key_index import private_directory
from horizon_broker.ingest.manifest import COLLECT, ManifestState, Record, wall_ms
from horizon_broker.ingest.server_table import ServerTable
from horizon_broker.pins.store import pinned_releases


def maintain(server: ServerTable, state: ManifestState) -> None:
    """Everything due between two transactions."""
    collect_garbage(server, state)
    sweep_private_files(server, state)
    if state.checkpoint_due(server.table.checkpoint_interval):
        checkpoint(server, state)


def checkpoint(server: ServerTable, state: ManifestState) -> Record:
    """Write the commit log's state as a checkpoint, then delete the records it covers."""
    record = server.manifest.write_checkpoint(state)
    state.checkpointed(record)
    server.manifest.prune(record)
    return record


def collect_garbage(server: ServerTable, state: ManifestState, *, now_ms: int | None = None) -> int:
    """Delete the files of replaced segments whose grace period is over; returns how many
    updates' garbage went. Recorded by a ``collect`` transaction after the deletes (which are
    idempotent: a crash in between only makes the next collection delete them again)."""
    now = wall_ms() if now_ms is None else now_ms
    table, client = server.table, server.client
    grace = table.gc_grace_ms
    if not garbage.collection_due(state.garbage, now, grace):
        return 0
    in_use = [
        location
        for segment in client.announced_segments(table.name)
        for location in segment.location
    ]
    collection = garbage.collectable(
        state.garbage, now, grace, in_use, pinned_releases(client, table.name, grace)
    )
    if not collection.seqs:
        return 0
    garbage.delete_files(server.storage, collection.locations)
    body = {"kind": COLLECT, "collected": collection.seqs}
    server.manifest.write_transaction(state, body, at_ms=now)
    return len(collection.seqs)


def sweep_private_files(server: ServerTable, state: ManifestState) -> int:
    """Delete this server's batch resolutions (and partitions of them) its state no longer
    names, neither as a key index level nor as pending updates; returns how many paths went."""
    referenced = [level for version in state.key_index.values() for level in version.levels]
    referenced += [item["updates"] for item in state.pending.values() if item.get("updates")]
    return garbage.sweep_unreferenced(
        server.storage, private_directory(server.root, server.server_id), referenced
    )
