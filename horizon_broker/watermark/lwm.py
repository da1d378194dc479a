"""Pure low-watermark arithmetic (no I/O, no clocks: callers pass ``now`` and the clocks).

    LWM(table, server, partition) = min(ingested, applied)             an active partition
                                  = max(that, the owner's clock)       an idle one
                                  = max(that, the state store's clock) a parked one
    LWM(table)                    = min over owned, reported partitions

A partition is *idle* when its live server has nothing pending for it (every change it read is
ingested and applied): its LWM follows the server's clock, carried by heartbeats. A server that
stops cleanly *parks* its partitions: their LWM follows the state store's clock (rule 7 of
``docs/design/contract/watermarks.md``). Whoever writes to a quiet partition next first makes it
active again above every snapshot that may have been served for it
(:mod:`horizon_broker.watermark.partition_states`).

A stale server (no fresh heartbeat) keeps counting with its last values: its contribution is frozen
(an idle partition at its last heartbeat's clock), so the table LWM cannot pass it, until its
partitions are handed over, parked, or it is decommissioned (which leaves them unowned). A
partition that is owned but has not reported yet is *pending*: while any is, the table has no
computed LWM, so a served LWM stays where it was (it might be ingesting anything).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from horizon_broker._core.errors import FailedPrecondition
from horizon_broker._core.hlc import last_hlc_of_ms

MAX_REGRESSION_HISTORY = 100
ACTIVE = "active"
IDLE = "idle"
PARKED = "parked"
PARTITION_STATES = (ACTIVE, IDLE, PARKED)


@dataclass(frozen=True, slots=True)
class Clocks:
    """The clocks quiet partitions follow: each server's last heartbeat clock (an HLC) and the
    state store's clock (Redis time in ms, as far as the caller has seen it)."""

    servers: Mapping[str, int] = field(default_factory=dict)
    store_ms: int = 0

    def server(self, name: str | None) -> int:
        return self.servers.get(name, 0) if name is not None else 0

    @property
    def store_hlc(self) -> int:
        """The highest HLC of the store's current millisecond: a resumed partition's next
        commit is stamped above it, so a parked partition may be read up to it."""
        return last_hlc_of_ms(self.store_ms) if self.store_ms > 0 else 0


NO_CLOCKS = Clocks()


@dataclass(frozen=True, slots=True)
class PartitionProgress:
    """What is known of one (table, partition): its owner, last report and state."""

    owner: str | None
    ingested: int | None = None
    applied: int | None = None
    reported_at_ms: int | None = None
    state: str = ACTIVE
    since_ms: int | None = None
    """When it became idle or parked (None while active)."""
    floor: int | None = None
    """Where it was last resumed: reports are raised to at least this (nothing was committed
    between its last commit and it, and everything later is stamped above it)."""

    @property
    def lwm(self) -> int | None:
        """min(ingested, applied): the partition's own progress, whatever its state."""
        if self.ingested is None or self.applied is None:
            return None
        return min(self.ingested, self.applied)

    @property
    def counts(self) -> bool:
        """True when this partition's value takes part in the table minimum (owned, reported)."""
        return self.owner is not None and self.lwm is not None

    @property
    def counted(self) -> tuple[str, int] | None:
        """``(owner, lwm)`` when the partition :attr:`counts`, else None."""
        owner, lwm = self.owner, self.lwm
        if owner is None or lwm is None:
            return None
        return owner, lwm

    @property
    def pending(self) -> bool:
        """Owned but not reported yet: the table has no computed LWM until it reports."""
        return self.owner is not None and self.lwm is None

    @property
    def quiet(self) -> bool:
        return self.state != ACTIVE

    def effective(self, clocks: Clocks = NO_CLOCKS) -> int | None:
        """The partition's LWM now: its progress, raised to the clock it follows when quiet."""
        lwm = self.lwm
        if lwm is None or self.state == ACTIVE:
            return lwm
        if self.state == IDLE:
            return max(lwm, clocks.server(self.owner))
        return max(lwm, clocks.store_hlc)


@dataclass(frozen=True, slots=True)
class Laggard:
    """The (server, partition) holding a table's LWM back, and its value (None: owned but not
    reported yet, which holds the table's LWM where it is)."""

    server: str
    partition: int
    lwm: int | None
    state: str = ACTIVE


@dataclass(frozen=True, slots=True)
class PartitionWatermark:
    """One row of a table's watermark breakdown (``lwm`` is the effective value)."""

    partition: int
    owner: str | None
    ingested: int | None
    applied: int | None
    lwm: int | None
    report_age_s: float | None
    live: bool
    state: str = ACTIVE
    since_ms: int | None = None


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
    """Heart-beating and neither decommissioned nor parked (``decommissioned`` names both)."""
    if server is None or server in decommissioned:
        return False
    last = heartbeats_ms.get(server)
    return last is not None and now_ms - last <= heartbeat_timeout_ms


_Heap = list[tuple[int, int]]


class TableProgress:
    """Partition progress of one table with its minimum kept incrementally.

    Active partitions sit in one heap, parked ones in another and idle ones in a heap per owner
    (an owner's idle partitions all follow its one clock), each with lazy deletion: a report
    costs O(log partitions) and the minimum looks at one entry per heap, so a table of 1,000
    servers x 64 partitions follows thousands of reports a second.
    """

    def __init__(self, progress: Mapping[int, PartitionProgress] | None = None) -> None:
        self._partitions: dict[int, PartitionProgress] = {}
        self._active: _Heap = []
        self._idle: dict[str, _Heap] = {}
        self._parked: _Heap = []
        self._pushed = 0
        self._pending: set[int] = set()
        for partition, entry in (progress or {}).items():
            self.set(partition, entry)

    def set(self, partition: int, progress: PartitionProgress) -> None:
        self._partitions[partition] = progress
        if progress.pending:
            self._pending.add(partition)
        else:
            self._pending.discard(partition)
        counted = progress.counted
        if counted is not None:
            owner, lwm = counted
            heapq.heappush(self._heap_of(progress.state, owner), (lwm, partition))
            self._pushed += 1
        if self._pushed > 2 * len(self._partitions) + 64:
            self._rebuild_heaps()

    def get(self, partition: int) -> PartitionProgress | None:
        return self._partitions.get(partition)

    def items(self) -> Iterator[tuple[int, PartitionProgress]]:
        return iter(sorted(self._partitions.items()))

    def __len__(self) -> int:
        return len(self._partitions)

    def owned_by(self, server: str) -> list[int]:
        return sorted(p for p, entry in self._partitions.items() if entry.owner == server)

    def follows(self, server: str) -> bool:
        """Whether an idle partition of ``server`` counts (its heartbeats move this table)."""
        return self._top(self._idle.get(server, []), IDLE, server) is not None

    @property
    def has_parked(self) -> bool:
        """Whether a parked partition counts (the store's clock moves this table)."""
        return self._top(self._parked, PARKED) is not None

    def minimum(self, clocks: Clocks = NO_CLOCKS) -> Laggard | None:
        """The smallest effective partition LWM among counted partitions; a pending partition
        (lowest first) when there is one. Ties between heaps go to the lowest partition."""
        if self._pending:
            partition = min(self._pending)
            return Laggard(self._partitions[partition].owner, partition, None)  # type: ignore[arg-type]
        best: tuple[int, int] | None = None
        candidates = [(self._top(self._active, ACTIVE), 0)]
        candidates.append((self._top(self._parked, PARKED), clocks.store_hlc))
        for owner in list(self._idle):
            top = self._top(self._idle[owner], IDLE, owner)
            if top is None:
                del self._idle[owner]
            candidates.append((top, clocks.server(owner)))
        for top, clock in candidates:
            if top is not None:
                value = (max(top[0], clock), top[1])
                best = value if best is None or value < best else best
        if best is None:
            return None
        entry = self._partitions[best[1]]
        return Laggard(entry.owner, best[1], best[0], entry.state)  # type: ignore[arg-type]

    def _heap_of(self, state: str, owner: str) -> _Heap:
        if state == IDLE:
            return self._idle.setdefault(owner, [])
        return self._parked if state == PARKED else self._active

    def _top(self, heap: _Heap, state: str, owner: str | None = None) -> tuple[int, int] | None:
        """The heap's smallest entry that is still current (stale ones are dropped)."""
        while heap:
            lwm, partition = heap[0]
            entry = self._partitions.get(partition)
            if (
                entry is not None
                and entry.counts
                and entry.lwm == lwm
                and entry.state == state
                and (owner is None or entry.owner == owner)
            ):
                return lwm, partition
            heapq.heappop(heap)
        return None

    def _rebuild_heaps(self) -> None:
        self._active, self._parked, self._idle = [], [], {}
        for partition, entry in self._partitions.items():
            counted = entry.counted
            if counted is not None:
                owner, lwm = counted
                self._heap_of(entry.state, owner).append((lwm, partition))
        for heap in (self._active, self._parked, *self._idle.values()):
            heapq.heapify(heap)
        self._pushed = len(self._partitions)

    def copy(self) -> TableProgress:
        clone = TableProgress()
        clone._partitions = dict(self._partitions)
        clone._active = list(self._active)
        clone._parked = list(self._parked)
        clone._idle = {owner: list(heap) for owner, heap in self._idle.items()}
        clone._pushed = self._pushed
        clone._pending = set(self._pending)
        return clone


def compute_lwm(
    progress: Mapping[int, PartitionProgress], clocks: Clocks = NO_CLOCKS
) -> Laggard | None:
    """The table LWM and who holds it back, by a plain scan (the reference for TableProgress)."""
    best: Laggard | None = None
    for partition, entry in sorted(progress.items()):
        if entry.pending:
            return Laggard(entry.owner, partition, None)  # type: ignore[arg-type]
        value = entry.effective(clocks)
        if entry.counts and (best is None or value < best.lwm):  # type: ignore[operator]
            best = Laggard(entry.owner, partition, value, entry.state)  # type: ignore[arg-type]
    return best


def breakdown(
    progress: TableProgress,
    heartbeats_ms: Mapping[str, int],
    decommissioned: frozenset[str],
    now_ms: int,
    heartbeat_timeout_ms: int,
    clocks: Clocks = NO_CLOCKS,
) -> Breakdown:
    """Every partition with its effective LWM, state and liveness. A server is *stale* when it
    owns a partition it neither heart-beats for nor parked."""
    rows: list[PartitionWatermark] = []
    stale: set[str] = set()
    for partition, entry in progress.items():
        live = is_live(entry.owner, heartbeats_ms, decommissioned, now_ms, heartbeat_timeout_ms)
        if entry.owner is not None and not live and entry.state != PARKED:
            stale.add(entry.owner)
        age = (
            None
            if entry.reported_at_ms is None
            else max(0.0, (now_ms - entry.reported_at_ms) / 1000)
        )
        rows.append(
            PartitionWatermark(
                partition,
                entry.owner,
                entry.ingested,
                entry.applied,
                entry.effective(clocks),
                age,
                live,
                entry.state,
                entry.since_ms,
            )
        )
    laggard = progress.minimum(clocks)
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
