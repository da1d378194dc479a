"""The bounded hand-over between a subscription's thread and the call that writes its messages.

A few messages fit (``capacity``); while they are not taken the subscription's thread waits, and
its next delta covers every snapshot since (:mod:`.coalesce`): a subscriber that does not read
costs a bounded buffer. Past a bound it costs nothing at all: a message that found no room for
``max_lag_s`` seconds ends the subscription with :class:`SubscriberBehind`, which names the
last token handed over, so the subscriber, once it has read what it was handed, subscribes again
from there. The call takes messages on the gRPC loop (:meth:`HandOver.get`) or on a Flight
handler's thread (:meth:`HandOver.take`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from typing import Any

from horizon_broker._core.errors import Cancelled, DeadlineExceeded, ResourceExhausted

TAKE_WAIT_S = 0.25
"""How often a waiting side looks whether the other one went away."""
RESUME_TOKEN_TRAILER = "x-horizon-resume-token"
"""The trailer naming the last resume token a stream sent, when it ends with an error."""


class SubscriberBehind(ResourceExhausted):
    """The subscriber left a message untaken past ``[limits] subscription_max_lag_s``."""

    def __init__(self, waited_s: float, limit_s: float, token: str, snapshot: int | None) -> None:
        self.resume_token = token
        where = f" (snapshot {snapshot})" if snapshot is not None else ""
        super().__init__(
            f"the subscriber fell behind: a message waited {waited_s:.1f} s for it to read "
            f"([limits] subscription_max_lag_s = {limit_s:g}); the stream is ended, subscribe "
            f"again with resume_token {token or '(none yet: subscribe afresh)'}{where}, the "
            "last one this stream sent, to go on from there, losing and repeating nothing"
        )


class HandOver:
    """Messages from a subscription's thread to its call, at most ``capacity`` waiting."""

    def __init__(self, capacity: int, max_lag_s: float, loop: Any = None) -> None:
        self._capacity = capacity
        self._max_lag_s = max_lag_s
        self._loop: asyncio.AbstractEventLoop | None = loop
        self._items: deque[Any] = deque()
        self._lock = threading.Condition()
        self._ready = asyncio.Event() if loop is not None else None
        self.closed = False
        self.last_token = ""
        self.last_snapshot: int | None = None

    # -- the subscription's thread -----------------------------------------------------------

    def put(self, message: Any) -> None:
        """Hand one message over, waiting while ``capacity`` are untaken: CANCELLED once the
        call went away, :class:`SubscriberBehind` once the wait passed ``max_lag_s``."""
        started = time.monotonic()
        with self._lock:
            while len(self._items) >= self._capacity and not self.closed:
                waited = time.monotonic() - started
                if 0 < self._max_lag_s <= waited:
                    raise SubscriberBehind(
                        waited, self._max_lag_s, self.last_token, self.last_snapshot
                    )
                self._lock.wait(TAKE_WAIT_S)
            if self.closed:
                raise Cancelled("the subscriber went away")
            self._items.append(message)
            token = getattr(message, "resume_token", "")
            if token:
                self.last_token, self.last_snapshot = token, message.to_snapshot
        self._wake()

    def offer(self, message: Any) -> bool:
        """Hand one message over only if there is room now (never waits): False when the
        subscriber has not taken what it was handed, or went away."""
        with self._lock:
            if self.closed or len(self._items) >= self._capacity:
                return False
            self._items.append(message)
            token = getattr(message, "resume_token", "")
            if token:
                self.last_token, self.last_snapshot = token, message.to_snapshot
        self._wake()
        return True

    def finish(self, outcome: Any) -> None:
        """The last item: the error that ended the subscription, or None (never blocks)."""
        with self._lock:
            if self.closed:
                return
            self._items.append(outcome)
        self._wake()

    def _wake(self) -> None:
        if self._loop is not None and self._ready is not None:
            self._loop.call_soon_threadsafe(self._ready.set)

    # -- the call ----------------------------------------------------------------------------

    def _pop(self) -> tuple[bool, Any]:
        with self._lock:
            if not self._items:
                return False, None
            item = self._items.popleft()
            self._lock.notify_all()
            return True, item

    async def get(self, deadline: float) -> Any:
        """The next item, on the gRPC loop; DEADLINE_EXCEEDED when ``deadline`` (loop time)
        passes first."""
        assert self._ready is not None, "made without a loop"
        while True:
            self._ready.clear()
            found, item = self._pop()
            if found:
                return item
            try:
                async with asyncio.timeout_at(deadline):
                    await self._ready.wait()
            except TimeoutError:
                raise DeadlineExceeded("no message yet") from None

    def take(self, timeout_s: float) -> tuple[bool, Any]:
        """The next item on a thread: (True, item), or (False, None) after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not self._items:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False, None
                self._lock.wait(min(left, TAKE_WAIT_S))
        return self._pop()

    def close(self) -> None:
        """The call ended: the thread's next hand-over is CANCELLED."""
        with self._lock:
            self.closed = True
            self._items.clear()
            self._lock.notify_all()
