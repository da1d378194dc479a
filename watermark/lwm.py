"""Pure low-watermark arithmetic (no I/O, no clocks: callers pass ``now``).

    LWM(table, server, partition) = min(ingested, applied)
    LWM(table)                    = min over owned, reported partitions

A stale server (no fresh heartbeat) keeps counting with its last values: its contribution is frozen,
so the table LWM cannot pass it, until its partitions are handed over or it is decommissioned (which
leaves them unowned). A partition that is owned but has not reported yet is *pending*: while any is,
the table has no computed LWM, so a served LWM stays where it was (it might be ingesting anything).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from timeline.errors import FailedPrecondition

MAX_REGRESSION_HISTORY = 100


@dataclass(frozen=True, slots=True)
class PartitionProgress:
    """What is known of one (table, partition): its owner and last report."""

    owner: str | None
    ingested: int | None = None
    applied: int | None = None
    reported_at_ms: int | None = None

    @property
    def lwm(self) -> int | None:
        if self.ingested is None or self.applied is None:
            return None
        return min(self.ingested, self.applied)

    @property
    def counts(self) -> bool:
        """True when this partition's value takes part in the table minimum (owned, reported)."""
        return self.owner is not None and self.lwm is not None

    @property
    def pending(self) -> bool:
        """Owned but not reported yet: the table has no computed LWM until it reports."""
        return self.owner is not None and self.lwm is None


@dataclass(frozen=True, slots=True)
class Laggard:
    """The (server, partition) holding a table's LWM back, and its value (None: owned but not
    reported yet, which holds the table's LWM where it is)."""

    server: str
    partition: int
    lwm: int | None


@dataclass(frozen=True, slots=True)
class PartitionWatermark:
    """One row of a table's watermark breakdown."""

    partition: int
    owner: str | None
    ingested: int | None
    applied: int | None
    lwm: int | None
    report_age_s: float | None
    live: bool


@dataclass(frozen=True, slots=True)
class Regression:
    """The computed LWM would have gone from ``from_lwm`` down to ``to_lwm`` at wall time ``at``."""

    table: str
    server: str | None
    partition: int | None
    from_lwm: int
    to_lwm: int
    at: float


@dataclass(frozen=True, slots=True)
class Breakdown:
    """The LWM computation of one table with every partition and the stale servers."""

    computed: int | None
    laggard: Laggard | None
    partitions: tuple[PartitionWatermark, ...]
    stale_servers: tuple[str, ...]


def is_live(
    server: str | None,
    heartbeats_ms: Mapping[str, int],
    decommissioned: Iterable[str] | frozenset[str],
    now_ms: int,
    heartbeat_timeout_ms: int,
) -> bool:
    if server is None or server in decommissioned:
        return False
    last = heartbeats_ms.get(server)
    return last is not None and now_ms - last <= heartbeat_timeout_ms


class TableProgress:
    """Partition progress of one table with its minimum kept incrementally.

    A report costs O(log partitions) (a heap with lazy deletion), so a table of 1,000 servers x 64
    partitions follows thousands of reports a second.
    """

    def __init__(self, progress: Mapping[int, PartitionProgress] | None = None) -> None:
        self._partitions: dict[int, PartitionProgress] = {}
        self._heap: list[tuple[int, int]] = []
        self._pending: set[int] = set()
        for partition, entry in (progress or {}).items():
            self.set(partition, entry)

    def set(self, partition: int, progress: PartitionProgress) -> None:
        self._partitions[partition] = progress
        if progress.pending:
            self._pending.add(partition)
        else:
            self._pending.discard(partition)
        if progress.counts:
            heapq.heappush(self._heap, (progress.lwm, partition))  # type: ignore[arg-type]
        if len(self._heap) > 2 * len(self._partitions) + 64:
            self._rebuild_heap()

    def get(self, partition: int) -> PartitionProgress | None:
        return self._partitions.get(partition)

    def items(self) -> Iterator[tuple[int, PartitionProgress]]:
        return iter(sorted(self._partitions.items()))

    def __len__(self) -> int:
        return len(self._partitions)

    def owned_by(self, server: str) -> list[int]:
        return sorted(p for p, entry in self._partitions.items() if entry.owner == server)

    def minimum(self) -> Laggard | None:
        """The smallest partition LWM among counted partitions (ties: lowest partition); a
        pending partition (lowest first) when there is one."""
        if self._pending:
            partition = min(self._pending)
            return Laggard(self._partitions[partition].owner, partition, None)  # type: ignore[arg-type]
        heap = self._heap
        while heap:
            lwm, partition = heap[0]
            entry = self._partitions.get(partition)
            if entry is not None and entry.counts and entry.lwm == lwm:
                return Laggard(entry.owner, partition, lwm)  # type: ignore[arg-type]
            heapq.heappop(heap)
        return None

    def _rebuild_heap(self) -> None:
        self._heap = [(e.lwm, p) for p, e in self._partitions.items() if e.counts]  # type: ignore[misc]
        heapq.heapify(self._heap)

    def copy(self) -> TableProgress:
        clone = TableProgress()
        clone._partitions = dict(self._partitions)
        clone._heap = list(self._heap)
        clone._pending = set(self._pending)
        return clone


def compute_lwm(progress: Mapping[int, PartitionProgress]) -> Laggard | None:
    """The table LWM and who holds it back, by a plain scan (the reference for TableProgress)."""
    best: Laggard | None = None
    for partition, entry in sorted(progress.items()):
        if entry.pending:
            return Laggard(entry.owner, partition, None)  # type: ignore[arg-type]
        if entry.counts and (best is None or entry.lwm < best.lwm):  # type: ignore[operator]
            best = Laggard(entry.owner, partition, entry.lwm)  # type: ignore[arg-type]
    return best


def breakdown(
    progress: TableProgress,
    heartbeats_ms: Mapping[str, int],
    decommissioned: frozenset[str],
    now_ms: int,
    heartbeat_timeout_ms: int,
) -> Breakdown:
    rows: list[PartitionWatermark] = []
    stale: set[str] = set()
    for partition, entry in progress.items():
        live = is_live(entry.owner, heartbeats_ms, decommissioned, now_ms, heartbeat_timeout_ms)
        if entry.owner is not None and not live:
            stale.add(entry.owner)
        age = (
            None
            if entry.reported_at_ms is None
            else max(0.0, (now_ms - entry.reported_at_ms) / 1000)
        )
        rows.append(
            PartitionWatermark(
                partition, entry.owner, entry.ingested, entry.applied, entry.lwm, age, live
            )
        )
    laggard = progress.minimum()
    return Breakdown(
        computed=None if laggard is None else laggard.lwm,
        laggard=laggard,
        partitions=tuple(rows),
        stale_servers=tuple(sorted(stale)),
    )


def no_lwm_error(table: str) -> FailedPrecondition:
    return FailedPrecondition(
        f"table {table!r} has no low-watermark yet: no server has reported progress"
    )


class MonotonicLwm:
    """The LWM a broker serves for one table: it follows the computed value but never decreases.

    A computed value below the served one is a *regression*: recorded once per distinct (laggard,
    value) and *active* until the computed value catches up again.
    """

    def __init__(self, table: str, floor: int | None = None) -> None:
        self.table = table
        self.served: int | None = floor
        self.computed: int | None = None
        self.active: Regression | None = None
        self.history: list[Regression] = []

    def observe(self, laggard: Laggard | None, now_s: float) -> int | None:
        self.computed = None if laggard is None else laggard.lwm
        if laggard is None or laggard.lwm is None:
            return self.served
        if self.served is None or laggard.lwm >= self.served:
            self.served = laggard.lwm
            self.active = None
            return self.served
        if (
            self.active is None
            or self.active.to_lwm != laggard.lwm
            or (self.active.server, self.active.partition) != (laggard.server, laggard.partition)
        ):
            self.active = Regression(
                self.table, laggard.server, laggard.partition, self.served, laggard.lwm, now_s
            )
            self.history.append(self.active)
            del self.history[:-MAX_REGRESSION_HISTORY]
        return self.served

    def copy(self) -> MonotonicLwm:
        clone = MonotonicLwm(self.table, self.served)
        clone.computed = self.computed
        clone.active = self.active
        clone.history = list(self.history)
        return clone
