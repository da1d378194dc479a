"""One log line per change of state an operator must hear about, as it happens.

The broker's parts keep their state and mostly do not announce changes (a server goes stale by
not sending heartbeats; a lock is revoked by another process), so a watcher compares what it sees
every ``interval`` with what it saw last, and logs the differences with ``event`` set: a
low-watermark regression, a server gone stale or back, a segment found unreadable or readable
again, a lock revoked, the Spark session restarted or down, Redis lost or back. What is already
wrong when the broker starts is logged at the first look.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from horizon_broker._core.errors import HorizonError

log = logging.getLogger("horizon.state")


@dataclass
class Seen:
    """What the last look found."""

    regressions: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    stale: set[tuple[str, str]] = field(default_factory=set)
    unreadable: set[str] = field(default_factory=set)
    revoked: set[str] = field(default_factory=set)
    restarts: int = 0
    spark_up: bool = True
    redis_up: bool = True


class StateWatch:
    """Looks at the follower, the lock service and the Spark supervisor; :meth:`look` once, or
    :meth:`start` a daemon thread that looks every ``interval`` seconds until :meth:`stop`."""

    def __init__(
        self,
        follower: Any,
        *,
        locks: Callable[[], Any],
        supervisor: Callable[[], Any],
        interval: float = 1.0,
    ) -> None:
        self.follower = follower
        self.locks = locks
        self.supervisor = supervisor
        self.interval = interval
        self.seen = Seen()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> StateWatch:
        self._thread = threading.Thread(target=self._run, name="horizon-state-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self.look()
            except Exception:  # a look that fails is tried again at the next interval
                log.exception("could not look at the broker's state")
            self._stopped.wait(self.interval)

    def look(self) -> None:
        """Compare the state now with the last look; log every difference."""
        tables = self.follower.tables()
        self._redis()
        self._watermarks(tables)
        self._unreadable()
        self._locks(tables)
        self._spark()

    def _redis(self) -> None:
        up = self.follower.staleness_s() == 0
        if up != self.seen.redis_up:
            if up:
                log.info("the state store is reachable again", extra={"event": "redis_up"})
            else:
                log.warning(
                    "the state store cannot be reached; serving the last state known",
                    extra={"event": "redis_down", "staleness_s": self.follower.staleness_s()},
                )
            self.seen.redis_up = up

    def _watermarks(self, tables: list[str]) -> None:
        regressions: dict[str, tuple[Any, ...]] = {}
        stale: set[tuple[str, str]] = set()
        for table in tables:
            try:
                report = self.follower.watermarks(table)
            except HorizonError:
                continue
            stale.update((table, server) for server in report.stale_servers)
            r = report.active_regression
            if r is None:
                continue
            key = (r.server, r.partition, r.from_lwm, r.to_lwm)
            regressions[table] = key
            if self.seen.regressions.get(table) != key:
                log.warning(
                    "table %s: low-watermark regression reported by %s", table, r.server,
                    extra={
                        "event": "lwm_regression", "table": table, "server": r.server,
                        "partition": r.partition, "from_lwm": r.from_lwm, "to_lwm": r.to_lwm,
                    },
                )  # fmt: skip
        for table, server in sorted(stale - self.seen.stale):
            log.warning(
                "table %s: server %s is stale (heartbeat overdue)", table, server,
                extra={"event": "server_stale", "table": table, "server": server},
            )  # fmt: skip
        for table, server in sorted(self.seen.stale - stale):
            log.info(
                "table %s: server %s is live again", table, server,
                extra={"event": "server_live", "table": table, "server": server},
            )  # fmt: skip
        self.seen.regressions, self.seen.stale = regressions, stale

    def _unreadable(self) -> None:
        marks = {str(segment.id): (segment, mark) for segment, mark in self.follower.unreadable()}
        for key in sorted(marks.keys() - self.seen.unreadable):
            segment, mark = marks[key]
            log.warning(
                "segment %s of %s is unreadable: %s", key, segment.table, mark.reason,
                extra={"event": "segment_unreadable", "table": segment.table, "segment": key},
            )  # fmt: skip
        for key in sorted(self.seen.unreadable - marks.keys()):
            log.info(
                "segment %s is readable again (or no longer announced)", key,
                extra={"event": "segment_readable", "segment": key},
            )  # fmt: skip
        self.seen.unreadable = set(marks)

    def _locks(self, tables: list[str]) -> None:
        client = self.locks()
        if client is None or not tables:
            return
        try:
            listing = client.listing(tables)
        except HorizonError:
            return  # Redis is away: reported by _redis
        revoked = {lock.lock_id: lock for lock in listing.locks if lock.revoked_by}
        for lock_id in sorted(revoked.keys() - self.seen.revoked):
            lock = revoked[lock_id]
            request = lock.request
            log.warning(
                "table %s: lock of job %s revoked by %s", request.table, request.job,
                lock.revoked_by,
                extra={
                    "event": "lock_revoked", "table": request.table, "job": request.job,
                    "revoked_by": lock.revoked_by, "lock_id": lock_id,
                },
            )  # fmt: skip
        self.seen.revoked = set(revoked)

    def _spark(self) -> None:
        supervisor = self.supervisor()
        if supervisor is None:
            return
        if supervisor.restarts > self.seen.restarts:
            log.warning(
                "the Spark session was restarted (%d restarts so far)", supervisor.restarts,
                extra={
                    "event": "spark_restarted", "restarts": supervisor.restarts,
                    "reason": supervisor.last_failure,
                },
            )  # fmt: skip
        if supervisor.up != self.seen.spark_up:
            if supervisor.up:
                log.info("the Spark session answers again", extra={"event": "spark_up"})
            else:
                log.error(
                    "the Spark session is down: %s", supervisor.last_failure,
                    extra={"event": "spark_down", "reason": supervisor.last_failure},
                )  # fmt: skip
        self.seen.restarts, self.seen.spark_up = supervisor.restarts, supervisor.up
