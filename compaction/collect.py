"""Withdrawing and deleting the segments compactions replaced, once their grace period is over.

A compaction leaves its inputs announced (overshadowed), so that a query planned before it
finishes and a timeline that loses an output can still read them. Each run records what it
replaced under ``<table root>/_compaction/<run>.json``; once ``gc_grace`` has passed since the
publish, the inputs that are overshadowed are withdrawn and their files deleted (unless an
announced segment still uses them). An input that is visible again (its output went missing) is
kept, and so is its record, until it is overshadowed again. Every step is idempotent: the record
goes last, so a collection cut short is simply redone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ingest import garbage
from ingest.compaction_records import compaction_record_dir
from ingest.storage import Storage
from pins.store import pinned_releases
from timeline.segment import Segment
from timeline.timeline import Timeline
from watermark.server import ServerClient


@dataclass(frozen=True, slots=True)
class Collected:
    runs: int
    withdrawn: int
    deleted_files: int
    bytes_freed: int


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
    return Collected(runs, withdrawn, deleted, freed)
