"""The partition numbers a table's durable records name, so a failed-over store hands none out again.

A state store that failed over to a replica can have forgotten the last partition numbers it
handed out. A server that is alive re-publishes its own reservations, but one that was down at the
change of primary (or whose heartbeat timed out meanwhile) cannot: its commit log in storage is
then the only place that still knows them. Every server and compactor therefore reserves, after a
change of primary and at its start, the numbers of every segment any server's commit log or any
compaction record of the table names (rule F4 of ``docs/design/contract/failover.md``). A number
reserved for nothing only costs a gap in the numbering.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from horizon_broker.ingest.compaction_records import compaction_record_dir
from horizon_broker.ingest.manifest import (
    COMMIT,
    INGEST,
    UPDATE,
    Record,
    manifest_dir,
    read_records,
)
from horizon_broker.ingest.storage import Storage
from horizon_broker.timeline.segment import Segment


def record_segments(record: Record) -> Iterator[Segment]:
    """Every segment a commit record names (pure): a batch's, an update's additions and removals
    (an abandoned update's too: its numbers were handed out all the same)."""
    if record.phase != COMMIT:
        return
    if record.kind == INGEST:
        names = record.body.get("segments", ())
    elif record.kind == UPDATE:
        names = [*record.body.get("add", ()), *record.body.get("remove", ())]
    else:
        return
    for raw in names:
        yield Segment.from_dict(raw)


def logged_segments_of_table(storage: Storage, table_root: str) -> list[Segment]:
    """Every segment the commit logs of all servers of a table (from their last checkpoints) and
    its compaction records name, read from storage."""
    found: list[Segment] = []
    for info in storage.list_dir(f"{table_root}/_manifest"):
        server = info.path.rstrip("/").rsplit("/", 1)[-1]
        for record in read_records(storage, manifest_dir(table_root, server)):
            found.extend(record_segments(record))
    for info in storage.list_files(compaction_record_dir(table_root), suffix=".json"):
        try:
            body = json.loads(storage.read_text(info.path))
        except Exception:  # collected meanwhile: its outputs are announced, its inputs gone
            if storage.exists(info.path):
                raise
            continue
        found.extend(Segment.from_dict(raw) for raw in [*body["inputs"], *body["outputs"]])
    return found
