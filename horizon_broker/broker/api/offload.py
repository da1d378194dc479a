"""Blocking work off the gRPC event loop, each call on a thread of its own, in bounded number.

The gRPC server runs on one asyncio loop, so health checks and cheap calls are answered however
many queries wait. Everything that may block (a wait for a snapshot, the admission queue, Spark,
Redis) runs on a thread of its own for that call, never queued behind other calls on a shared pool
that waiting calls could fill. The number of calls in flight is bounded (``[limits]``
``max_concurrent + queue_size + max_waiting``): one more is refused at once with
RESOURCE_EXHAUSTED.

A thread that finished its call waits :data:`IDLE_THREAD_S` for the next one before it ends:
starting a thread costs the loop a wait until the new thread runs (a sixth of a key lookup's time
in the broker, and much more while other processes keep the cores busy), so a call takes an idle
thread when there is one and a new thread only when there is none.

:class:`ResultPipe` carries one query's messages from its thread to the loop with back pressure:
the thread waits while the client is slow to read (holding nothing but its own slot), and stops
when the caller went away.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from horizon_broker._core.errors import Cancelled, DeadlineExceeded, ResourceExhausted

_T = TypeVar("_T")
log = logging.getLogger("horizon.broker.api.offload")
END = object()
"""The last item of a :class:`ResultPipe`: the query ended whole."""


IDLE_THREAD_S = 30.0
"""How long a thread that finished its call waits for another before it ends."""
_IDLE_NAME = "horizon-offload-idle"


class Offload:
    """Runs blocking calls on threads of their own (idle ones reused), at most ``limit`` at once."""

    def __init__(self, limit: int, idle_thread_s: float = IDLE_THREAD_S) -> None:
        self.limit = limit
        self.idle_thread_s = idle_thread_s
        self._running = 0
        self._idle = 0
        """Threads waiting for a call, less the calls handed over and not yet taken."""
        self._handed: deque[tuple[Callable[[], None], str]] = deque()
        self._lock = threading.Lock()
        self._call_handed = threading.Condition(self._lock)
        """Wakes an idle thread (not ``queue.SimpleQueue``: its ``get`` with a timeout stayed
        blocked for seconds past a 1 ms timeout in about one of 100 runs of 2,000 calls, on
        CPython 3.11, leaving an idle thread that never ended)."""

    @property
    def running(self) -> int:
        with self._lock:
            return self._running

    @property
    def idle(self) -> int:
        """Threads waiting for a call (a test probe)."""
        with self._lock:
            return self._idle

    def start(self, target: Callable[[], None], name: str) -> None:
        """Run ``target`` on a thread of its own, named ``name`` while it runs: an idle one, or a
        new one when none is idle (RESOURCE_EXHAUSTED when ``limit`` calls run)."""
        with self._lock:
            if self._running >= self.limit:
                raise ResourceExhausted(
                    f"the broker is busy: {self._running} calls are in flight (running, queued "
                    f"or waiting for a snapshot; limit {self.limit}); retry later"
                )
            self._running += 1
            if self._idle > 0:
                self._idle -= 1
                self._handed.append((target, name))
                self._call_handed.notify()
                return
        threading.Thread(target=self._serve, args=(target, name), name=name, daemon=True).start()

    def _serve(self, target: Callable[[], None], name: str) -> None:
        """Run calls until none came for ``idle_thread_s``."""
        thread = threading.current_thread()
        while True:
            thread.name = name
            try:
                target()
            except BaseException:  # the calls hand their own failures over; this is a bug
                log.exception("an offloaded call %s raised", name)
            finally:
                thread.name = _IDLE_NAME
                with self._lock:
                    self._running -= 1
                    self._idle += 1
            handed = self._next_call()
            if handed is None:
                return
            target, name = handed

    def _next_call(self) -> tuple[Callable[[], None], str] | None:
        """The next call handed to an idle thread; None: this thread is no longer needed."""
        with self._lock:
            deadline = time.monotonic() + self.idle_thread_s
            while not self._handed:
                remaining = deadline - time.monotonic()
                # No call handed over while this thread waited, so there are more idle
                # threads than calls (``_idle`` counts this one): it may end.
                if remaining <= 0 and self._idle > 0:
                    self._idle -= 1
                    return None
                self._call_handed.wait(max(remaining, 0.0) or self.idle_thread_s)
            return self._handed.popleft()

    async def call(
        self, function: Callable[..., _T], *args: Any, deadline: float | None = None
    ) -> _T:
        """``function(*args)`` on its own thread; DEADLINE_EXCEEDED when ``deadline`` (loop
        time, see :func:`loop_deadline`) passes first (the thread finishes on its own)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()

        def settle(outcome: Callable[[], None]) -> None:
            if not future.done():
                outcome()

        def target() -> None:
            try:
                result = function(*args)
            except BaseException as error:  # handed to the awaiting coroutine
                loop.call_soon_threadsafe(settle, functools.partial(future.set_exception, error))
            else:
                loop.call_soon_threadsafe(settle, functools.partial(future.set_result, result))

        self.start(target, f"horizon-call-{getattr(function, '__name__', 'call')}")
        if deadline is None:
            return await future
        try:
            return await asyncio.wait_for(asyncio.shield(future), max(0.0, deadline - loop.time()))
        except TimeoutError:
            raise DeadlineExceeded(
                "the call's deadline passed before the broker answered"
            ) from None


def loop_deadline(time_remaining: float | None) -> float | None:
    """A deadline on the running loop's clock from gRPC's ``time_remaining()``."""
    if time_remaining is None or time_remaining > 10 * 365 * 86400:
        return None
    return asyncio.get_running_loop().time() + time_remaining


class ResultPipe:
    """A bounded hand-over of messages from a query's thread to the gRPC loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, capacity: int = 4) -> None:
        self._loop = loop
        self._capacity = capacity
        self._items: deque[Any] = deque()
        self._lock = threading.Condition()
        self._ready = asyncio.Event()
        self.closed = False

    # -- the query's thread ------------------------------------------------------------------

    def put(self, item: Any) -> None:
        """Hand over one message, waiting while the loop holds ``capacity`` unsent ones;
        CANCELLED once the loop side closed (the caller went away or was cut off)."""
        with self._lock:
            while len(self._items) >= self._capacity and not self.closed:
                self._lock.wait(0.25)
            if self.closed:
                raise Cancelled("the caller stopped reading the result")
            wake = self._hand_over(item)
        if wake:
            self._loop.call_soon_threadsafe(self._ready.set)

    def finish(self, outcome: Any) -> None:
        """The last item: :data:`END`, or the error that ended the query (never blocks)."""
        with self._lock:
            if self.closed:
                return
            wake = self._hand_over(outcome)
        if wake:
            self._loop.call_soon_threadsafe(self._ready.set)

    def _hand_over(self, item: Any) -> bool:
        """Queue ``item`` (under the lock); whether the loop must be woken: only when nothing
        was waiting, since the loop takes every queued item before it waits again (waking the
        loop costs a write to its self-pipe, for each of a small result's messages)."""
        wake = not self._items
        self._items.append(item)
        return wake

    # -- the loop ----------------------------------------------------------------------------

    async def get(self, deadline: float | None) -> Any:
        """The next item; DEADLINE_EXCEEDED when ``deadline`` (loop time) passes first."""
        while True:
            with self._lock:
                if self._items:
                    item = self._items.popleft()
                    self._lock.notify_all()
                    return item
                self._ready.clear()
            try:
                # A timeout context, not ``wait_for``: no task per wait (13 against 23 us).
                async with asyncio.timeout_at(deadline):
                    await self._ready.wait()
            except TimeoutError:
                raise DeadlineExceeded("the query ran past its deadline and was stopped") from None

    def close(self) -> None:
        with self._lock:
            self.closed = True
            self._items.clear()
            self._lock.notify_all()
