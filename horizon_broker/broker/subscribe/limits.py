"""How many subscriptions each identity holds open, and the broker's stop that ends them all."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from horizon_broker._core.errors import ResourceExhausted, Unavailable

STOPPING_MESSAGE = (
    "the broker is stopping: subscribe again (to this broker or another) with the last "
    "resume_token received; the stream goes on from there, losing and repeating nothing"
)


class OpenSubscriptions:
    """The open subscriptions by identity (thread-safe), bounded by ``limit()`` each."""

    def __init__(self, limit: Callable[[], int]) -> None:
        self._limit = limit
        self._open: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        """Set when the broker stops: every stream ends with UNAVAILABLE."""

    def count(self, identity: str) -> int:
        with self._lock:
            return self._open[identity]

    @contextmanager
    def open(self, identity: str) -> Iterator[None]:
        """Hold one of ``identity``'s subscriptions for the block (RESOURCE_EXHAUSTED past the
        limit, UNAVAILABLE while the broker stops)."""
        limit = self._limit()
        with self._lock:
            if self.stopping.is_set():
                raise Unavailable(STOPPING_MESSAGE)
            if self._open[identity] >= limit:
                raise ResourceExhausted(
                    f"identity {identity!r} holds {self._open[identity]} open subscriptions, the "
                    f"most it may ([limits] max_subscriptions_per_identity = {limit}); end one "
                    "first"
                )
            self._open[identity] += 1
        try:
            yield
        finally:
            with self._lock:
                self._open[identity] -= 1
                if not self._open[identity]:
                    del self._open[identity]

    async def end_all(self, timeout_s: float) -> None:
        """End every stream (UNAVAILABLE, saying to resume) and wait up to ``timeout_s`` for
        them to go, so the broker's stop does not cut them off without that status."""
        self.stopping.set()
        deadline = time.monotonic() + max(timeout_s, 1.0)
        while time.monotonic() < deadline:
            with self._lock:
                if not self._open:
                    return
            await asyncio.sleep(0.02)


class HeldPlace(OpenSubscriptions):
    """``subscriptions`` for a subscription whose call already holds its identity's place (a
    Flight handler holds it for its whole life, see ``flight.exchange``): opening takes none."""

    def __init__(self, subscriptions: OpenSubscriptions) -> None:
        super().__init__(lambda: 0)
        self.stopping = subscriptions.stopping

    @contextmanager
    def open(self, identity: str) -> Iterator[None]:
        if self.stopping.is_set():
            raise Unavailable(STOPPING_MESSAGE)
        yield
