"""Bounded, fair concurrency for queries: at most N run, at most Q wait, the rest are refused.

Spark shares one driver between all queries; an unbounded number of concurrent queries would only
make every one of them slow. A query that cannot even queue gets RESOURCE_EXHAUSTED at once; a
queued query gives up when its deadline passes or its caller goes away.

Who goes next is :class:`~horizon_broker.broker.engine.fair_share.FairShares`' decision: each identity's queries
are admitted in the order they came, a query that arrives while others of its identity wait
queues behind them, and a freed slot goes to the waiting identity running the fewest queries, so
one caller cannot keep every slot while another waits. (A freed slot once went to whichever
thread took the lock first, so a query just arrived could pass one that had waited, again and
again: 16 clients of point queries, p99 88 to 107 ms while a query's thread took a while to
start, 200 to 320 ms once calls started at once on idle threads.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from horizon_broker._core.errors import Cancelled, DeadlineExceeded
from horizon_broker.broker.config import BrokerConfig
from horizon_broker.broker.engine.fair_share import FairShares, IdentityLimits

_POLL_S = 0.05

SHARED_IDENTITY = ""
"""The identity of work no caller is named for (it shares like any other identity)."""


@dataclass(frozen=True, slots=True)
class AdmissionStats:
    running: int
    queued: int
    max_concurrent: int
    queue_size: int


class Admission:
    """A counting gate with a bounded waiting room, shared fairly between identities."""

    def __init__(
        self,
        max_concurrent: int,
        queue_size: int,
        *,
        identities: Mapping[str, IdentityLimits] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_concurrent = max_concurrent
        self.queue_size = queue_size
        self._clock = clock
        self._cond = threading.Condition()
        self._shares = FairShares(max_concurrent, queue_size, identities)

    def stats(self) -> AdmissionStats:
        with self._cond:
            shares = self._shares
            return AdmissionStats(
                shares.running, shares.queued, self.max_concurrent, self.queue_size
            )

    def running_of(self, identity: str) -> int:
        """Queries of ``identity`` holding a slot now."""
        with self._cond:
            return self._shares.running_of(identity)

    @contextmanager
    def slot(
        self,
        *,
        deadline: float | None = None,
        is_active: Callable[[], bool] = lambda: True,
        identity: str = SHARED_IDENTITY,
    ) -> Iterator[float]:
        """Hold one running slot for the ``with`` body; yields the seconds spent queued.

        ``deadline`` is a ``time.monotonic()`` instant; ``is_active`` tells whether the caller is
        still there (checked while waiting); ``identity`` is whose share the slot counts in.
        """
        started = time.monotonic()
        ticket = object()
        with self._cond:
            if not self._shares.arrive(identity, ticket, self._clock()):
                self._wait(identity, ticket, deadline, is_active)
        try:
            yield time.monotonic() - started
        finally:
            with self._cond:
                self._shares.release(identity)
                self._cond.notify_all()

    def _wait(
        self,
        identity: str,
        ticket: object,
        deadline: float | None,
        is_active: Callable[[], bool],
    ) -> None:
        """Wait (holding the condition's lock between waits) until ``ticket`` is granted."""
        try:
            while not self._shares.granted(ticket):
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
        except BaseException:
            self._shares.leave(identity, ticket)  # frees the slot if it was granted meanwhile
            self._cond.notify_all()
            raise


def admission_of(config: BrokerConfig) -> Admission:
    """The broker's gate: ``[limits]``' slots and waiting room, each ``[[tokens]]`` entry's
    ``max_concurrent`` and ``queries_per_second``."""
    identities = {
        grant.name: IdentityLimits(grant.max_concurrent, grant.queries_per_second)
        for grant in config.tokens
        if grant.max_concurrent is not None or grant.queries_per_second is not None
    }
    limits = config.limits
    return Admission(limits.max_concurrent, limits.queue_size, identities=identities)
