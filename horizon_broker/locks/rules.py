"""The lock rules of Druid's task locking (its documentation of task locking and
priority; see ``docs/design/contract/index.md``), pure.

A job that writes segments of a table first locks what it writes or replaces:

- a **time-chunk lock** covers an interval of the table, every version and partition in it (major
  compaction, which writes a new major version over whole chunks);
- a **segment lock** covers some partitions of one time chunk and major version (appending
  ingestion locks the partition numbers it was allocated; the updater and minor compaction lock the
  segments they rewrite and the overwrite partitions they write).

Two locks of different jobs *conflict* when their intervals overlap and:

- one is a time-chunk lock and the other a segment lock (the two kinds are never held on
  overlapping intervals of one table at once), or
- both are time-chunk locks, unless both are shared, or
- both are segment locks of the same chunk and version with a partition in common, unless both
  are shared.

A request that conflicts only with holders of a *lower* priority revokes their locks
(preemption) and is granted; one that conflicts with any holder of an equal or higher priority is
refused (the caller waits and retries, or gives up). Revoked and expired locks hold nothing.

:mod:`horizon_broker.locks.scripts` implements exactly these rules in Lua; the property tests check the two
against each other.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.timeline.interval import Interval

STREAMING_INGESTION_PRIORITY = 75
BATCH_INGESTION_PRIORITY = 50
COMPACTION_PRIORITY = 25
"""Default priorities, Druid's: real-time ingestion 75, batch ingestion 50, compaction 25."""


class Granularity(StrEnum):
    TIME_CHUNK = "time_chunk"
    SEGMENT = "segment"


class Mode(StrEnum):
    EXCLUSIVE = "exclusive"
    SHARED = "shared"


@dataclass(frozen=True, slots=True)
class LockRequest:
    """What a job asks to lock. ``version`` and ``partitions`` only for segment locks."""

    table: str
    job: str
    granularity: Granularity
    interval: Interval
    priority: int
    mode: Mode = Mode.EXCLUSIVE
    version: str = ""
    partitions: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if not self.table or not self.job:
            raise InvalidArgument("a lock needs a table and a job id")
        if self.interval.is_empty:
            raise InvalidArgument(f"cannot lock the empty interval {self.interval}")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise InvalidArgument(f"lock priority must be an integer, got {self.priority!r}")
        if self.granularity == Granularity.SEGMENT:
            if not self.version:
                raise InvalidArgument("a segment lock needs the segments' major version")
            if not self.partitions:
                raise InvalidArgument("a segment lock needs at least one partition")
        elif self.version or self.partitions:
            raise InvalidArgument("a time-chunk lock covers every version and partition")


@dataclass(frozen=True, slots=True)
class HeldLock:
    """A lock as stored: the request, its id, its lease, and whether it was revoked."""

    lock_id: str
    request: LockRequest
    acquired_ms: int
    expires_ms: int
    revoked_by: str | None = None
    revoked_ms: int | None = None

    def holds_at(self, now_ms: int) -> bool:
        """Whether the lock still protects anything at ``now_ms``."""
        return self.revoked_by is None and now_ms < self.expires_ms


def conflicts(a: LockRequest, b: LockRequest) -> bool:
    """Whether two locks cannot be held at once (see the module docstring)."""
    if a.table != b.table or a.job == b.job or not a.interval.overlaps(b.interval):
        return False
    if a.granularity != b.granularity:
        return True
    both_shared = a.mode == Mode.SHARED and b.mode == Mode.SHARED
    if a.granularity == Granularity.TIME_CHUNK:
        return not both_shared
    same_segments = (
        a.interval == b.interval and a.version == b.version and bool(a.partitions & b.partitions)
    )
    return same_segments and not both_shared


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer to a request: granted (revoking ``revoke``) or refused because of ``blockers``."""

    granted: bool
    revoke: tuple[HeldLock, ...] = ()
    blockers: tuple[HeldLock, ...] = ()


def decide(request: LockRequest, held: Iterable[HeldLock], now_ms: int) -> Decision:
    """Grant, preempt or refuse ``request`` against the locks ``held`` at ``now_ms``."""
    conflicting = [
        lock for lock in held if lock.holds_at(now_ms) and conflicts(lock.request, request)
    ]
    blockers = tuple(lock for lock in conflicting if lock.request.priority >= request.priority)
    if blockers:
        return Decision(granted=False, blockers=blockers)
    return Decision(granted=True, revoke=tuple(conflicting))


def covers(lock: LockRequest, table: str, interval: Interval, version: str, partition: int) -> bool:
    """Whether ``lock`` covers the segment ``(table, interval, version, partition)``: what a
    publish must hold for every segment it announces, withdraws or overshadows."""
    if lock.table != table:
        return False
    if lock.granularity == Granularity.TIME_CHUNK:
        return lock.interval.contains(interval)
    return lock.interval == interval and lock.version == version and partition in lock.partitions


@dataclass(frozen=True, slots=True)
class PublishGuard:
    """What a publish must still hold when it takes effect, checked in the same atomic step.

    ``covers``: segments (announced, withdrawn or overshadowed by the publish) each of which one
    of ``job``'s locks must cover; ``owns``: ``(table, key partition)`` pairs the publishing
    server must own.
    """

    job: str
    covers: tuple[tuple[str, Interval, str, int], ...] = ()
    owns: tuple[tuple[str, int], ...] = ()

    def to_json(self) -> str:
        import json

        return json.dumps(
            {
                "job": self.job,
                "covers": [
                    [table, interval.start_ms, interval.end_ms, version, partition]
                    for table, interval, version, partition in self.covers
                ],
                "owns": [[table, partition] for table, partition in self.owns],
            },
            separators=(",", ":"),
        )
