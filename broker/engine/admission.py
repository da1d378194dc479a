"""Bounded concurrency for queries: at most N run, at most Q wait, the rest are refused.

Spark shares one driver between all queries; an unbounded number of concurrent queries would only
make every one of them slow. A query that cannot even queue gets RESOURCE_EXHAUSTED at once; a
queued query gives up when its deadline passes or its caller goes away.

Queued queries are admitted in the order they came, and a query that arrives while others wait
queues behind them: a freed slot used to go to whichever thread took the lock first, so a query
just arrived could pass one that had waited, again and again (16 clients of point queries: p99
88 to 107 ms while a query's thread took a while to start, 200 to 320 ms once calls started at
once on idle threads).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from core.errors import Cancelled, DeadlineExceeded, ResourceExhausted

_POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class AdmissionStats:
    running: int
    queued: int
    max_concurrent: int
    queue_size: int


class Admission:
    """A counting gate with a bounded waiting room."""

    def __init__(self, max_concurrent: int, queue_size: int) -> None:
        self.max_concurrent = max_concurrent
        self.queue_size = queue_size
        self._cond = threading.Condition()
        self._running = 0
        self._queued = 0
        self._waiting: deque[object] = deque()
        """A ticket per queued query, oldest first: only the oldest may take a freed slot."""

    def stats(self) -> AdmissionStats:
        with self._cond:
            return AdmissionStats(self._running, self._queued, self.max_concurrent, self.queue_size)

    @contextmanager
    def slot(
        self,
        *,
        deadline: float | None = None,
        is_active: Callable[[], bool] = lambda: True,
    ) -> Iterator[float]:
        """Hold one running slot for the ``with`` body; yields the seconds spent queued.

        ``deadline`` is a ``time.monotonic()`` instant; ``is_active`` tells whether the caller is
        still there (checked while waiting).
        """
        started = time.monotonic()
        with self._cond:
            if self._running >= self.max_concurrent or self._waiting:
                if self._queued >= self.queue_size:
                    raise ResourceExhausted(
                        f"the broker is busy: {self._running} queries running and "
                        f"{self._queued} queued (limits {self.max_concurrent} and "
                        f"{self.queue_size}); retry later"
                    )
                ticket = object()
                self._waiting.append(ticket)
                self._queued += 1
                try:
                    while self._waiting[0] is not ticket or self._running >= self.max_concurrent:
                        if deadline is not None and time.monotonic() >= deadline:
                            raise DeadlineExceeded(
                                "the query's deadline passed while it waited for a free slot"
                            )
                        if not is_active():
                            raise Cancelled("the client went away while the query was queued")
                        timeout = _POLL_S
                        if deadline is not None:
                            timeout = max(0.0, min(timeout, deadline - time.monotonic()))
                        self._cond.wait(timeout)
                finally:
                    self._queued -= 1
                    self._waiting.remove(ticket)
                    self._cond.notify_all()  # the next oldest may go (or take this one's turn)
            self._running += 1
        try:
            yield time.monotonic() - started
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()
