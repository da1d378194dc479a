"""A job's handle on its locks in Redis: acquire (waiting or not), renew, release, inspect.

Every call is one script of :mod:`horizon_broker.locks.scripts`. :class:`JobLocks` keeps one job's locks on one
table alive with a daemon thread that renews their leases (or, for a server of many tables, one
:class:`LockRenewer` thread renews them all); a job that dies stops renewing, so its locks run out
and what it wrote is never published (the announce script checks the locks).
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from horizon_broker._core.errors import InvalidArgument, LockConflict, LockLost
from horizon_broker._core.keys import DEFAULT_PREFIX, Keys, check_server_id
from horizon_broker._core.redis_calls import ScriptClient
from horizon_broker.locks import scripts
from horizon_broker.locks.rules import (
    Granularity,
    HeldLock,
    LockRequest,
    Mode,
    PublishGuard,
)
from horizon_broker.locks.stats import STATS
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment

log = logging.getLogger(__name__)

DEFAULT_LEASE_S = 30.0
"""How long a lock outlives its holder's last renewal."""


def request_json(request: LockRequest) -> str:
    """The request as stored in Redis and read by the Lua rules."""
    return json.dumps(
        {
            "table": request.table,
            "job": request.job,
            "granularity": request.granularity.value,
            "mode": request.mode.value,
            "start": request.interval.start_ms,
            "end": request.interval.end_ms,
            "priority": request.priority,
            "version": request.version,
            "partitions": sorted(request.partitions),
        },
        separators=(",", ":"),
    )


def parse_entry(lock_id: str, value: str) -> HeldLock:
    """A ``{p}:t:{table}:locks`` hash entry as a :class:`HeldLock`."""
    acquired, expires, revoked_by, revoked_ms, body = value.split("|", 4)
    data = json.loads(body)
    partitions = data.get("partitions") or []
    request = LockRequest(
        table=data["table"],
        job=data["job"],
        granularity=Granularity(data["granularity"]),
        interval=Interval(int(data["start"]), int(data["end"])),
        priority=int(data["priority"]),
        mode=Mode(data["mode"]),
        version=data.get("version", ""),
        partitions=frozenset(int(p) for p in partitions),
    )
    return HeldLock(
        lock_id=lock_id,
        request=request,
        acquired_ms=int(acquired),
        expires_ms=int(expires),
        revoked_by=revoked_by or None,
        revoked_ms=int(revoked_ms) if revoked_ms else None,
    )


def describe(lock: HeldLock) -> str:
    """One line naming a lock, for error messages."""
    request = lock.request
    return (
        f"{request.mode.value} lock {lock.lock_id} of job {request.job} (priority "
        f"{request.priority}) on {_request_text(request)}"
    )


@dataclass(frozen=True, slots=True)
class LockListing:
    """Every lock of some tables, read in one step, with Redis's clock at that moment."""

    now_ms: int
    locks: tuple[HeldLock, ...]


class LockClient:
    """Lock calls against one Redis (a prefix's key space)."""

    def __init__(
        self,
        redis_: str | redis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        retry_timeout_s: float = 10.0,
    ) -> None:
        self._keys = Keys(prefix)
        self._scripts = ScriptClient(
            redis_,
            {name: getattr(scripts, name) for name in ("ACQUIRE", "RENEW", "RELEASE", "LIST")},
            prefix=self._keys.prefix,
            retry_timeout_s=retry_timeout_s,
            unreachable="Redis is unreachable for the lock service",
            acknowledged=frozenset({"ACQUIRE"}),
        )

    def try_acquire(
        self, request: LockRequest, lock_id: str, lease_ms: int
    ) -> tuple[HeldLock | None, tuple[HeldLock, ...]]:
        """One attempt: ``(lock, revoked ids)`` when granted, ``(None, blockers)`` when not."""
        reply = self._call(
            "ACQUIRE", [request.table, lock_id, request_json(request), str(lease_ms)]
        )
        if reply[0] == "CONFLICT":
            pairs = reply[2:]
            return None, tuple(parse_entry(pairs[i], pairs[i + 1]) for i in range(0, len(pairs), 2))
        acquired, expires = int(reply[1]), int(reply[2])
        for victim in reply[3:]:
            log.warning("job %s revoked lock %s (preemption)", request.job, victim)
        lock = HeldLock(lock_id, request, acquired_ms=acquired, expires_ms=expires)
        STATS.record_preempted(len(reply) - 3)
        return lock, ()

    def acquire(
        self,
        request: LockRequest,
        lock_id: str,
        *,
        lease_s: float = DEFAULT_LEASE_S,
        wait_s: float = 0.0,
        poll_s: float = 0.1,
    ) -> HeldLock:
        """Acquire, preempting lower-priority holders; wait up to ``wait_s`` for holders of equal
        or higher priority to release, then fail with :class:`LockConflict` naming them."""
        started = time.monotonic()
        deadline = started + wait_s
        while True:
            lock, blockers = self.try_acquire(request, lock_id, int(lease_s * 1000))
            if lock is not None:
                STATS.record_acquired(time.monotonic() - started)
                return lock
            if time.monotonic() + poll_s > deadline:
                STATS.record_conflict(time.monotonic() - started)
                waited = f" after waiting {wait_s:g} s" if wait_s > 0 else ""
                raise LockConflict(
                    f"job {request.job} (priority {request.priority}) cannot lock "
                    f"{_request_text(request)} of table {request.table}{waited}: held by "
                    + "; ".join(describe(lock) for lock in blockers)
                )
            time.sleep(poll_s)

    def renew(
        self, table: str, job: str, lock_ids: Sequence[str], lease_s: float
    ) -> dict[str, str]:
        """Extend the leases; returns each id's status (``OK``, ``REVOKED by ...``, ``EXPIRED``,
        ``MISSING``)."""
        if not lock_ids:
            return {}
        reply = self._call("RENEW", [table, job, str(int(lease_s * 1000)), *lock_ids])
        statuses = {}
        for lock_id, status in zip(lock_ids, reply[1:], strict=True):
            kind, *rest = status.split("|")
            if kind == "REVOKED":
                status = f"REVOKED by job {rest[0]}"
            statuses[lock_id] = kind if kind != "REVOKED" else status
        return statuses

    def release(self, table: str, job: str, lock_ids: Sequence[str]) -> int:
        if not lock_ids:
            return 0
        return int(self._call("RELEASE", [table, job, *lock_ids]))

    def listing(self, tables: Iterable[str]) -> LockListing:
        """Every lock of ``tables`` that has not run out, read in one step."""
        reply = self._call("LIST", list(tables))
        now = int(reply[0])
        locks: list[HeldLock] = []
        for i in range(1, len(reply), 2):
            flat = reply[i + 1]
            for j in range(0, len(flat), 2):
                lock = parse_entry(flat[j], flat[j + 1])
                if now < lock.expires_ms:
                    locks.append(lock)
        locks.sort(key=lambda lock: (lock.request.table, lock.request.interval, lock.lock_id))
        return LockListing(now, tuple(locks))

    def close(self) -> None:
        self._scripts.close()

    def _call(self, name: str, args: list[str]) -> Any:
        return self._scripts.call(name, args)


class JobLocks:
    """One job's locks on one table, kept alive by a renewal thread until released.

    A lock that is revoked or runs out is noted by the next renewal; :meth:`check` raises
    :class:`LockLost` from then on. Publishing does not rely on that: the announce script checks
    the locks itself (:meth:`guard`).
    """

    def __init__(
        self,
        client: LockClient,
        table: str,
        job: str,
        priority: int,
        *,
        lease_s: float = DEFAULT_LEASE_S,
        wait_s: float = 0.0,
        renewer: LockRenewer | None = None,
    ) -> None:
        check_server_id(job)
        if lease_s <= 0:
            raise InvalidArgument(f"a lock lease must be positive, got {lease_s} s")
        self.client = client
        self.table = table
        self.job = job
        self.priority = priority
        self.lease_s = lease_s
        self.wait_s = wait_s
        self._ids = itertools.count(1)
        self._held: dict[str, HeldLock] = {}
        self._lost: dict[str, str] = {}
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._renewer = renewer

    @property
    def held(self) -> tuple[HeldLock, ...]:
        with self._guard:
            return tuple(self._held.values())

    def lock_segments(
        self,
        interval: Interval,
        version: str,
        partitions: Iterable[int],
        *,
        mode: Mode = Mode.EXCLUSIVE,
    ) -> HeldLock:
        """Lock partitions of one time chunk and major version."""
        return self._acquire(
            LockRequest(
                table=self.table,
                job=self.job,
                granularity=Granularity.SEGMENT,
                interval=interval,
                priority=self.priority,
                mode=mode,
                version=version,
                partitions=frozenset(partitions),
            )
        )

    def lock_time_chunk(self, interval: Interval, *, mode: Mode = Mode.EXCLUSIVE) -> HeldLock:
        """Lock every segment of an interval, whatever its version."""
        return self._acquire(
            LockRequest(
                table=self.table,
                job=self.job,
                granularity=Granularity.TIME_CHUNK,
                interval=interval,
                priority=self.priority,
                mode=mode,
            )
        )

    def lock_covering(self, segments: Iterable[Segment]) -> list[HeldLock]:
        """Segment locks on ``segments``, one per time chunk and version."""
        by_chunk: dict[tuple[Interval, str], set[int]] = {}
        for segment in segments:
            by_chunk.setdefault((segment.interval, segment.version), set()).add(segment.partition)
        return [
            self.lock_segments(interval, version, partitions)
            for (interval, version), partitions in sorted(by_chunk.items())
        ]

    def guard(
        self, covers: Iterable[Segment], owns: Iterable[tuple[str, int]] = ()
    ) -> PublishGuard:
        """What the announce script must find still held when the publish takes effect."""
        return PublishGuard(
            job=self.job,
            covers=tuple(
                (segment.table, segment.interval, segment.version, segment.partition)
                for segment in covers
            ),
            owns=tuple(owns),
        )

    def check(self) -> None:
        """Renew now; raise :class:`LockLost` if any lock was revoked or ran out."""
        self._renew()
        with self._guard:
            lost = dict(self._lost)
        if lost:
            raise LockLost(
                f"job {self.job} lost its locks on table {self.table}: "
                + "; ".join(f"{lock_id} {status}" for lock_id, status in sorted(lost.items()))
            )

    def release(self) -> None:
        """Release every lock (revoked ones too) and stop renewing."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.remove(self)
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=10)
        with self._guard:
            ids = [*self._held, *self._lost]
            self._held.clear()
        self.client.release(self.table, self.job, ids)

    def abandon(self) -> None:
        """Stop renewing without releasing: the locks run out as a dead job's do (tests)."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.remove(self)
        self._thread = None

    def __enter__(self) -> JobLocks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _acquire(self, request: LockRequest) -> HeldLock:
        lock_id = f"{self.job}#{next(self._ids)}"
        lock = self.client.acquire(request, lock_id, lease_s=self.lease_s, wait_s=self.wait_s)
        with self._guard:
            self._held[lock_id] = lock
        self._start_renewing()
        return lock

    def _start_renewing(self) -> None:
        if self._renewer is not None:
            self._renewer.add(self)
            return
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._renew_loop, name=f"horizon-locks-{self.job}", daemon=True
        )
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            self.renew()

    def renew(self) -> None:
        """Extend every held lock's lease now; a lost one is noted (:meth:`check` raises)."""
        try:
            self._renew()
        except Exception as error:  # the next round retries
            log.warning("renewing the locks of job %s failed: %s", self.job, error)

    def _renew(self) -> None:
        with self._guard:
            ids = list(self._held)
        statuses = self.client.renew(self.table, self.job, ids, self.lease_s)
        with self._guard:
            for lock_id, status in statuses.items():
                if status != "OK" and lock_id in self._held:
                    del self._held[lock_id]
                    self._lost[lock_id] = status
                    STATS.record_lost(1)
                    log.warning("job %s lost lock %s: %s", self.job, lock_id, status)


class LockRenewer:
    """One daemon thread renewing the locks of many :class:`JobLocks` (one ingestion server's
    tables), each a third of its lease after the last round, instead of a thread per table."""

    def __init__(self, name: str = "horizon-locks") -> None:
        self._name = name
        self._jobs: list[JobLocks] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def add(self, locks: JobLocks) -> None:
        with self._lock:
            if locks not in self._jobs:
                self._jobs.append(locks)
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()

    def remove(self, locks: JobLocks) -> None:
        with self._lock:
            if locks in self._jobs:
                self._jobs.remove(locks)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            thread, self._thread = self._thread, None
        self._wake.set()
        if thread is not None:
            thread.join(timeout=10)

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._stopped:
                    return
                jobs = list(self._jobs)
            interval = min((job.lease_s / 3 for job in jobs), default=DEFAULT_LEASE_S / 3)
            self._wake.wait(interval)
            self._wake.clear()
            with self._lock:
                if self._stopped:
                    return
                jobs = list(self._jobs)
            for job in jobs:
                job.renew()


def _request_text(request: LockRequest) -> str:
    if request.granularity == Granularity.TIME_CHUNK:
        return f"time chunk {request.interval}"
    partitions = ",".join(map(str, sorted(request.partitions)))
    return f"segments {request.interval} version {request.version} partitions {partitions}"
