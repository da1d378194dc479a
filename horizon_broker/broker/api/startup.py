"""A broker's start-up: Spark starts in the background while the state is read from Redis and the
gRPC server is bound, so inspection and health answer within the state's load time and the first
query waits only for what is left of Spark's start.

:class:`StartingDoor` stands in for a service's servicer until the real one exists (it needs the
engine, which needs Spark): each call waits for it, then is the real one's. :class:`StartupClock`
records when each part was ready, for the log and ``bench/broker_restart.py``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc


class StartupClock:
    """Seconds from the start of :meth:`BrokerServer.start` to each part being ready."""

    def __init__(self) -> None:
        self.began_at = time.time()
        """Wall-clock time the start began (a launcher compares it with its own clock)."""
        self._began = time.perf_counter()
        self.marks: dict[str, float] = {}

    def mark(self, part: str) -> None:
        self.marks[part] = round(time.perf_counter() - self._began, 3)

    def describe(self) -> str:
        return ", ".join(f"{part} {seconds:.2f} s" for part, seconds in self.marks.items())


class BackgroundStart:
    """``create()`` run on a thread of its own from now; :meth:`result` waits for it."""

    def __init__(self, create: Callable[[], Any], name: str) -> None:
        self._future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, args=(create,), name=name, daemon=True)
        self._thread.start()

    def _run(self, create: Callable[[], Any]) -> None:
        try:
            self._future.set_result(create())
        except BaseException as error:  # handed to whoever waits for the result
            self._future.set_exception(error)

    def result(self) -> Any:
        return self._future.result()

    def discard(self, stop: Callable[[Any], None]) -> None:
        """Stop what it made, once made (a start that failed elsewhere), without waiting."""
        self._future.add_done_callback(
            lambda done: stop(done.result()) if done.exception() is None else None
        )


class StartingDoor:
    """A servicer of ``method_names`` whose calls wait (on the gRPC loop) until :meth:`open`
    hands over the real servicer; a call whose deadline passes first ends DEADLINE_EXCEEDED
    as any other would."""

    def __init__(self, method_names: list[str], loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._opened = asyncio.Event()
        self._real: Any = None
        for name in method_names:
            setattr(self, name, self._forward(name))

    def open(self, real: Any) -> None:
        """Let every waiting call and every later one through to ``real`` (any thread)."""
        self._real = real
        self._loop.call_soon_threadsafe(self._opened.set)

    def _forward(self, name: str) -> Callable[[Any, grpc.aio.ServicerContext], Any]:
        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if not self._opened.is_set():
                await self._opened.wait()
            return await getattr(self._real, name)(request, context)

        call.__name__ = name
        return call
