"""Withdrawing and deleting the segments compactions replaced, once their grace period is over.

A compaction leaves its inputs announced (overshadowed), so that a query planned before it
finishes and a timeline that loses an output can still read them. Each run records what it
replaced under ``<table root>/_compaction/<run>.json``; once ``gc_grace`` has passed since the
publish, the inputs that are overshadowed are withdrawn and their files deleted (unless an
announced segment still uses them). An input that is visible again (its output went missing) is
kept, and so is its record, until it is overshadowed again. Every step is idempotent: the record
goes last, so a collection cut short is simply redone.

The directories of runs that never published (killed, or whose publish could not be read back,
:func:`horizon_broker.ingest.garbage.delete_unannounced`) are swept too (:func:`sweep_unpublished_runs`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from horizon_broker.ingest import garbage
from horizon_broker.ingest.compaction_records import compaction_record_dir
from horizon_broker.ingest.segments import CHUNK_DIR_COLUMN
from horizon_broker.ingest.storage import Storage
from horizon_broker.locks.client import LockClient
from horizon_broker.pins.store import pinned_releases
from horizon_broker.timeline.segment import Segment
from horizon_broker.timeline.timeline import Timeline
from horizon_broker.watermark.server import ServerClient


@dataclass(frozen=True, slots=True)
class Collected:
    runs: int
    withdrawn: int
    deleted_files: int
    bytes_freed: int
    unpublished_runs: int = 0
    """Directories of runs that never published, deleted."""


def collect_replaced(
    storage: Storage,
    client: ServerClient,
    table: str,
    table_root: str,
    *,
    grace_ms: int,
    now_ms: int,
) -> Collected:
    """Withdraw and delete the overshadowed inputs of compactions published ``grace_ms`` ago
    that no snapshot pin taken before then (or within the grace period) still holds."""
    directory = compaction_record_dir(table_root)
    records = [info for info in storage.list_files(directory, suffix=".json")]
    runs = withdrawn = deleted = freed = 0
    held = pinned_releases(client, table, grace_ms) if records else (lambda released_ms: False)
    for info in sorted(records, key=lambda item: item.path):
        body = json.loads(storage.read_text(info.path))
        published = int(body["published_ms"])
        if published + grace_ms > now_ms or held(published):
            continue
        announced = client.announced_segments(table)
        timeline = Timeline(table)
        timeline.add_all(announced)
        announced_ids = {segment.id for segment in announced}
        inputs = [Segment.from_dict(item) for item in body["inputs"]]
        still_needed = [
            s for s in inputs if s.id in announced_ids and not timeline.is_overshadowed(s)
        ]
        doomed = [s for s in inputs if s.id in announced_ids and s not in still_needed]
        if doomed:
            client.unannounce(doomed)
            withdrawn += len(doomed)
        in_use = {
            garbage.segment_directory(path)
            for segment in client.announced_segments(table)
            for path in segment.location
        }
        gone = [s for s in inputs if s not in still_needed]
        files = [
            path
            for segment in gone
            for path in segment.location
            if garbage.segment_directory(path) not in in_use
        ]
        freed += sum(segment.size_bytes for segment in gone)
        garbage.delete_files(storage, files)
        deleted += len(files)
        if not still_needed:
            storage.delete(info.path)
            runs += 1
    swept = sweep_unpublished_runs(storage, client, table, table_root)
    return Collected(runs, withdrawn, deleted, freed, swept)


def sweep_unpublished_runs(
    storage: Storage, client: ServerClient, table: str, table_root: str
) -> int:
    """Delete the directories of compaction runs that are not published and never can be;
    returns how many went. A run writes only under its locks and its publish is guarded by them,
    so once its job holds no lock (read first: a publish racing the sweep then shows in the
    announcements read after), a directory no announcement and no record names is garbage."""
    chunk_prefix = f"{CHUNK_DIR_COLUMN}="
    runs = [
        info.path.rstrip("/")
        for info in storage.list_dir(f"{table_root}/segments")
        if any(  # a run's directory holds chunks; an ingestion server's holds its batches
            child.path.rstrip("/").rsplit("/", 1)[-1].startswith(chunk_prefix)
            for child in storage.list_dir(info.path)
        )
    ]
    if not runs:
        return 0
    locks = LockClient(client.redis, prefix=client.prefix)
    locking = {lock.request.job for lock in locks.listing([table]).locks}
    named = set(garbage.announced_paths(client, table))
    for info in storage.list_files(compaction_record_dir(table_root), suffix=".json"):
        body = json.loads(storage.read_text(info.path))
        for item in [*body["inputs"], *body["outputs"]]:
            named.update(garbage.segment_directory(path) for path in item.get("location", ()))
    swept = 0
    for directory in runs:
        if directory.rsplit("/", 1)[-1] in locking:
            continue
        if any(path.startswith(directory + "/") for path in named):
            continue
        storage.delete(directory)
        swept += 1
    return swept
