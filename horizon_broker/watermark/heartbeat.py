"""A server's heartbeat thread: one per server process, however many tables it serves.

Each beat keeps the server live and carries its clock, which its idle partitions' LWM follows (rule
7 of ``docs/design/contract/watermarks.md``); a beat is also how a server notices a Redis that lost
its data (the call re-publishes first).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from horizon_broker._core.errors import HorizonError

log = logging.getLogger(__name__)


class Heartbeats:
    """Calls ``beat`` every ``interval_s`` from a daemon thread until stopped."""

    def __init__(self, beat: Callable[[], None], name: str) -> None:
        self._beat = beat
        self._name = name
        self._lock = threading.Lock()
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        with self._lock:
            return self._thread is not None

    def start(self, interval_s: float) -> None:
        with self._lock:
            if self._thread is not None:
                return
            stop = threading.Event()
            thread = threading.Thread(
                target=self._loop, args=(stop, interval_s), name=self._name, daemon=True
            )
            self._stop, self._thread = stop, thread
            thread.start()

    def stop(self) -> None:
        with self._lock:
            stop, thread = self._stop, self._thread
            self._stop = self._thread = None
        if stop is not None and thread is not None:
            stop.set()
            if thread is not threading.current_thread():
                thread.join(timeout=30)

    def _loop(self, stop: threading.Event, interval_s: float) -> None:
        while not stop.wait(interval_s):
            try:
                self._beat()
            except HorizonError as error:
                log.warning("%s: heartbeat failed: %s", self._name, error)
