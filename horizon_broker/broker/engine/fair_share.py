"""Who runs next when several identities want the query slots (pure: no threads, no clock).

One identity sending many queries must not hold every slot while another waits. Each identity
(a ``[[tokens]]`` name) has a queue of its own, served first come first served; a freed slot
goes to the identity with waiting work that runs the fewest queries (ties: the one whose oldest
waiting query came first). So an identity gets more than its share only while nobody else waits,
and no slot stays idle while a query that may run waits. On top of that an identity may have a
cap on its running queries and a rate (a token bucket), set in its ``[[tokens]]`` entry, like
Druid's query lanes and Pinot's query quotas.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

from horizon_broker._core.errors import ResourceExhausted


@dataclass(frozen=True, slots=True)
class IdentityLimits:
    """One identity's own quotas (None: no quota beyond the broker's)."""

    max_concurrent: int | None = None
    """Queries of this identity running at once (more wait in its queue)."""
    queries_per_second: float | None = None
    """Admissions per second, refilled continuously; a burst of ``max(1, rate)`` is allowed."""


NO_LIMITS = IdentityLimits()


@dataclass(slots=True)
class TokenBucket:
    """``rate`` admissions a second, at most ``capacity`` saved up."""

    rate: float
    capacity: float
    tokens: float
    updated: float

    @classmethod
    def full(cls, rate: float, now: float) -> TokenBucket:
        capacity = max(1.0, rate)
        return cls(rate, capacity, capacity, now)

    def take(self, now: float) -> bool:
        elapsed = max(0.0, now - self.updated)
        self.tokens = min(self.capacity, self.tokens + elapsed * self.rate)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@dataclass(slots=True)
class _Identity:
    limits: IdentityLimits
    running: int = 0
    waiting: deque[tuple[int, Hashable]] = field(default_factory=deque)
    """(arrival number, ticket), oldest first."""
    bucket: TokenBucket | None = None

    def may_run_more(self) -> bool:
        cap = self.limits.max_concurrent
        return cap is None or self.running < cap


class FairShares:
    """The slots' state: who runs, who waits, and which waiting tickets are granted a slot.

    A caller :meth:`arrive`\\ s with a ticket (granted at once, or queued, or refused), then
    either :meth:`release`\\ s its slot or, giving up while queued, :meth:`leave`\\ s."""

    def __init__(
        self,
        max_concurrent: int,
        queue_size: int,
        limits: Mapping[str, IdentityLimits] | None = None,
    ) -> None:
        self.max_concurrent = max_concurrent
        self.queue_size = queue_size
        self._limits = dict(limits or {})
        self._identities: dict[str, _Identity] = {}
        self._granted: dict[Hashable, str] = {}
        """Tickets given a slot that their caller has not picked up yet."""
        self._pushed_out: dict[Hashable, ResourceExhausted] = {}
        """Queued tickets pushed out of a full waiting room, with what their caller is told."""
        self._arrivals = 0
        self.running = 0
        self.queued = 0

    def running_of(self, identity: str) -> int:
        state = self._identities.get(identity)
        return state.running if state is not None else 0

    def queued_of(self, identity: str) -> int:
        state = self._identities.get(identity)
        return len(state.waiting) if state is not None else 0

    def _state(self, identity: str, now: float) -> _Identity:
        state = self._identities.get(identity)
        if state is None:
            limits = self._limits.get(identity, NO_LIMITS)
            bucket = None
            if limits.queries_per_second is not None:
                bucket = TokenBucket.full(limits.queries_per_second, now)
            state = self._identities[identity] = _Identity(limits, bucket=bucket)
        return state

    def arrive(self, identity: str, ticket: Hashable, now: float) -> bool:
        """Admit or queue ``ticket`` of ``identity``: True when it holds a slot now, False when
        it waits (:meth:`granted` tells when it got one). Refused with RESOURCE_EXHAUSTED over
        the identity's rate, its queue or the broker's."""
        state = self._state(identity, now)
        if state.bucket is not None and not state.bucket.take(now):
            raise ResourceExhausted(
                f"token {identity!r} is over its rate of {state.limits.queries_per_second:g} "
                "queries a second ([[tokens]] queries_per_second); retry later"
            )
        self._arrivals += 1
        state.waiting.append((self._arrivals, ticket))
        self.queued += 1
        self._dispatch()
        if self._granted.pop(ticket, None) is not None:
            return True
        if self.queued > self.queue_size:
            hog = max(self._identities, key=lambda name: len(self._identities[name].waiting))
            if hog == identity or len(self._identities[hog].waiting) <= len(state.waiting):
                self._drop(identity, ticket)
                raise self._busy(identity, "")
            # The waiting room is full and one identity holds more of it than this one: its
            # newest queued query makes way.
            _, pushed_out = self._identities[hog].waiting.pop()
            self.queued -= 1
            self._pushed_out[pushed_out] = self._busy(
                hog, ", the most of any caller: its newest made way for another caller's query"
            )
        return False

    def _busy(self, identity: str, why: str) -> ResourceExhausted:
        state = self._identities.get(identity)
        queued = len(state.waiting) if state is not None else 0
        return ResourceExhausted(
            f"the broker is busy: {self.running} queries running and {self.queued} queued "
            f"(limits {self.max_concurrent} and {self.queue_size}, [limits] max_concurrent and "
            f"queue_size; token {identity!r} has {queued} queued{why}); retry later"
        )

    def granted(self, ticket: Hashable) -> bool:
        """Whether the queued ``ticket`` was given a slot (it holds it from now on); raises
        RESOURCE_EXHAUSTED when it was pushed out of the waiting room."""
        pushed_out = self._pushed_out.get(ticket)
        if pushed_out is not None:
            raise pushed_out
        return self._granted.pop(ticket, None) is not None

    def leave(self, identity: str, ticket: Hashable) -> None:
        """A queued caller gives up; if its ticket was granted meanwhile, the slot is freed."""
        if self._pushed_out.pop(ticket, None) is not None:
            if identity in self._identities:
                self._forget_if_idle(identity, self._identities[identity])
            return
        if self._granted.pop(ticket, None) is not None:
            self.release(identity)
            return
        self._drop(identity, ticket)
        self._dispatch()  # it may have been what held its identity's queue back

    def release(self, identity: str) -> None:
        """A running query of ``identity`` ended: its slot goes to whoever is next."""
        state = self._identities[identity]
        state.running -= 1
        self.running -= 1
        self._forget_if_idle(identity, state)
        self._dispatch()

    def _drop(self, identity: str, ticket: Hashable) -> None:
        state = self._identities[identity]
        for entry in state.waiting:
            if entry[1] is ticket:
                state.waiting.remove(entry)
                self.queued -= 1
                break
        self._forget_if_idle(identity, state)

    def _forget_if_idle(self, identity: str, state: _Identity) -> None:
        """An identity with nothing running or waiting is dropped (its bucket too, unless it
        is short of tokens: forgetting it would hand it a full bucket)."""
        if state.running or state.waiting:
            return
        if state.bucket is not None and state.bucket.tokens < state.bucket.capacity:
            return
        del self._identities[identity]

    def _dispatch(self) -> None:
        """Give free slots away: each to the waiting identity that may run more and runs the
        fewest, oldest waiting first among equals."""
        while self.running < self.max_concurrent:
            chosen: tuple[int, int, str] | None = None
            for identity, state in self._identities.items():
                if not state.waiting or not state.may_run_more():
                    continue
                rank = (state.running, state.waiting[0][0], identity)
                if chosen is None or rank < chosen:
                    chosen = rank
            if chosen is None:
                return
            state = self._identities[chosen[2]]
            _, ticket = state.waiting.popleft()
            self.queued -= 1
            state.running += 1
            self.running += 1
            self._granted[ticket] = chosen[2]
