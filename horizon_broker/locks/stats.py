"""What this process's jobs went through with their locks, for its metrics endpoint.

An operator whose ingestion stalls or whose compactions keep failing needs to see lock trouble:
time spent waiting for other jobs' locks, requests refused after waiting, locks this process
took from lower-priority jobs (preemption), and locks it lost (revoked by a higher-priority job,
or run out). The counters are process-wide (an ingestion server or a compactor is one process)
and only ever grow; :class:`LockCollector` serves them as Prometheus counters.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any


class LockStats:
    """Thread-safe counters of one process's lock activity."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.acquired = 0
        self.waited_s = 0.0
        """Seconds spent in :meth:`~horizon_broker.locks.client.LockClient.acquire`, waits for other jobs'
        locks included (an uncontended lock adds a round trip)."""
        self.conflicts = 0
        """Requests refused (after waiting, when the job waits)."""
        self.preempted = 0
        """Locks of lower-priority jobs revoked to grant this process's requests."""
        self.lost = 0
        """Locks of this process found revoked or expired at a renewal."""

    def record_acquired(self, waited_s: float) -> None:
        with self._lock:
            self.acquired += 1
            self.waited_s += waited_s

    def record_preempted(self, count: int) -> None:
        with self._lock:
            self.preempted += count

    def record_conflict(self, waited_s: float) -> None:
        with self._lock:
            self.conflicts += 1
            self.waited_s += waited_s

    def record_lost(self, count: int) -> None:
        with self._lock:
            self.lost += count

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return {
                "acquired": self.acquired,
                "waited_s": self.waited_s,
                "conflicts": self.conflicts,
                "preempted": self.preempted,
                "lost": self.lost,
            }


STATS = LockStats()
"""This process's lock activity (every :class:`horizon_broker.locks.client.LockClient` records here)."""


class LockCollector:
    """Serves :data:`STATS` (or ``stats``) as ``horizon_locks_*`` counters at each scrape."""

    def __init__(self, stats: LockStats = STATS) -> None:
        self.stats = stats

    def describe(self) -> list[Any]:
        return list(self.collect())

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        now = self.stats.snapshot()
        for name, key, text in (
            ("horizon_locks_acquired", "acquired", "Locks this process acquired"),
            ("horizon_locks_wait_seconds", "waited_s",
             "Seconds this process's jobs spent acquiring locks, waits for other jobs included"),
            ("horizon_locks_conflicts", "conflicts",
             "Lock requests refused because other jobs held the locks"),
            ("horizon_locks_preempted", "preempted",
             "Locks of lower-priority jobs revoked to grant this process's requests"),
            ("horizon_locks_lost", "lost",
             "Locks of this process revoked by a higher-priority job or run out"),
        ):  # fmt: skip
            yield CounterMetricFamily(name, text, value=now[key])
