"""Announcing again the outputs of compactions a failed-over state store lost (rule F4 of
``docs/design/contract/failover.md``).

A compaction's publish adds its outputs; its inputs stay announced, overshadowed, until they are
collected. A store that failed over to a replica without that publish has the inputs and not the
outputs, and a broker that served the outputs holds them (F5) until the store has them again.
Nobody else would announce them: the compaction's record under ``_compaction/`` is the only
trace. So the compactor, before each pass, announces again the outputs of every record whose
inputs the store still shows *as they were* (same ids, same files, all visible) and whose
outputs it lacks, under segment locks on both, as the compaction itself published them. Once an
input moved on (rewritten by an update, compacted again, collected) the record is stale and is
left to collection.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from horizon_broker._core.errors import FailedPrecondition
from horizon_broker.compaction.plan import visible_by_chunk
from horizon_broker.ingest.compaction_records import compaction_record_dir
from horizon_broker.ingest.reconcile import announced_files
from horizon_broker.ingest.storage import Storage
from horizon_broker.locks.client import JobLocks
from horizon_broker.timeline.segment import Segment, SegmentId
from horizon_broker.watermark.server import ServerClient

log = logging.getLogger(__name__)


def lost_outputs(
    record: Mapping[str, Any], stored: Mapping[SegmentId, tuple[str, ...]]
) -> list[Segment]:
    """The outputs of a compaction record to announce again (pure): those the store lacks, when
    every input is still stored with its files and no output's id names other files; else none.

    >>> from horizon_broker.timeline.interval import Interval
    >>> def seg(n, file, **roots):
    ...     return Segment(table="t", interval=Interval(0, 10), version="v1", partition=n,
    ...                    location=(file,), **roots)
    >>> a, out = seg(0, "a"), seg(32768, "c", root_start=0, root_end=1, minor_version=1)
    >>> record = {"inputs": [a.to_dict()], "outputs": [out.to_dict()]}
    >>> [s.partition for s in lost_outputs(record, {a.id: ("a",)})]
    [32768]
    >>> lost_outputs(record, {a.id: ("a",), out.id: ("c",)})  # announced: nothing lost
    []
    """
    inputs = [Segment.from_dict(raw) for raw in record["inputs"]]
    outputs = [Segment.from_dict(raw) for raw in record["outputs"]]
    missing = [s for s in outputs if stored.get(s.id) != tuple(s.location)]
    if not missing or any(s.id in stored for s in missing):
        return []
    if any(stored.get(s.id) != tuple(s.location) for s in inputs):
        return []
    return missing


def restore_lost_outputs(
    storage: Storage,
    client: ServerClient,
    table: str,
    table_root: str,
    job_locks: Callable[[str], JobLocks],
) -> int:
    """Announce again what :func:`lost_outputs` finds in each compaction record of ``table``;
    returns how many segments were announced again."""
    restored = 0
    stored = None
    for info in sorted(storage.list_files(compaction_record_dir(table_root), suffix=".json"),
                       key=lambda item: item.path):  # fmt: skip
        try:
            record = json.loads(storage.read_text(info.path))
        except Exception:  # collected meanwhile
            if storage.exists(info.path):
                raise
            continue
        if stored is None:  # once a pass, and again after each announcement
            stored = announced_files(client.announced_segments(table))
        missing = lost_outputs(record, stored)
        if not missing or not all(storage.exists(p) for s in missing for p in s.location):
            continue
        inputs = [Segment.from_dict(raw) for raw in record["inputs"]]
        try:
            restored += _announce_again(
                client, table, inputs, missing, job_locks(f"{record['run']}-restore")
            )
            stored = None
        except FailedPrecondition as error:  # a lock held elsewhere, or a chunk superseded
            log.warning("not announcing again the outputs of %s now: %s", info.path, error)
    return restored


def _announce_again(
    client: ServerClient,
    table: str,
    inputs: Sequence[Segment],
    outputs: Sequence[Segment],
    locks: JobLocks,
) -> int:
    """Under locks on the inputs and outputs, announce ``outputs`` if the inputs are all still
    visible (nothing replaced them meanwhile); returns how many were announced."""
    try:
        locks.lock_covering([*inputs, *outputs])
        announced = client.announced_segments(table)
        visible = {s.id for chunk in visible_by_chunk(table, announced).values() for s in chunk}
        if not all(s.id in visible for s in inputs):
            return 0
        log.warning(
            "the state store lacks %d segment(s) of table %s a compaction published (a failover "
            "lost them?): announcing them again: %s",
            len(outputs),
            table,
            ", ".join(str(s.id) for s in outputs),
        )
        client.replace(add=outputs, remove=(), guard=locks.guard([*inputs, *outputs]))
        return len(outputs)
    finally:
        locks.release()
