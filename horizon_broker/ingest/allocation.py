"""Allocating a batch's segments: a fresh, locked partition number per (time chunk, key partition).

Key partition ``kp`` of a table with ``K`` key partitions draws only numbers congruent to ``kp``
modulo ``K``, so servers owning different key partitions can never be handed the same number, not
even by a state store that failed over and forgot the last numbers it gave out.

A batch may write one first-generation segment per time chunk and key partition it touches
(:func:`segment_slots`). Their numbers are reserved in Redis and locked (segment locks, see
:mod:`horizon_broker.ingest.locking`) before the keys are resolved, in each chunk's current major version: a major
compaction's, once one replaced the chunk (:func:`allocate_partitions`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from horizon_broker._core.errors import LockConflict
from horizon_broker.ingest.granularity import Granularity, chunk_interval, chunks_between
from horizon_broker.ingest.locking import TransactionLocks
from horizon_broker.ingest.table import TableDefinition
from horizon_broker.watermark.server import ServerClient

_ALLOCATION_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class Allocation:
    """The partition numbers a batch may write its segments under."""

    numbers: dict[tuple[int, int], int]
    """(chunk start, key partition) -> its segment's partition number."""
    versions: dict[int, str]
    """Chunk start -> the major version the numbers were allocated in."""


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


def allocate_partitions(
    client: ServerClient,
    table: TableDefinition,
    locks: TransactionLocks,
    slots: Sequence[tuple[int, int]],
) -> Allocation:
    """A fresh, locked first-generation partition number for every (chunk, key partition),
    in each chunk's current major version (a major compaction's, once one replaced it).

    The versions are read again once the numbers are locked: a major compaction needs a
    time-chunk lock, which the segment locks now block, so a version still unchanged then
    stays current until the batch is published. One that changed meanwhile is allocated
    again in the new version."""
    by_chunk: dict[int, list[int]] = {}
    for chunk, kp in slots:
        by_chunk.setdefault(chunk, []).append(kp)
    intervals = {chunk: chunk_interval(table.granularity, chunk) for chunk in by_chunk}
    name = table.name
    current = client.chunk_versions(name, intervals.values(), table.version)
    for _ in range(_ALLOCATION_ATTEMPTS):
        numbers: dict[tuple[int, int], int] = {}
        versions = {chunk: current[interval] for chunk, interval in intervals.items()}
        for chunk, kps in sorted(by_chunk.items()):
            allocated = client.allocate_partitions(
                name, intervals[chunk], versions[chunk], kps, table.key_partitions
            )
            locks.lock_partitions(intervals[chunk], versions[chunk], allocated)
            numbers.update({(chunk, kp): n for kp, n in zip(kps, allocated, strict=True)})
        again = client.chunk_versions(name, intervals.values(), table.version)
        if again == current:
            return Allocation(numbers, versions)
        current = again
    raise LockConflict(
        f"table {name!r}: major compactions kept replacing the batch's time chunks while "
        "it allocated its partitions"
    )
