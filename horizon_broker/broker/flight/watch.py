"""Cancelled Flight calls cancel their Spark jobs.

pyarrow.flight tells a handler nothing when its call is cancelled (a client cancel, a passed
deadline, a dropped connection); it can only ask ``context.is_cancelled()``. One thread asks it
for every call that runs a query, and cancels the query's scope, which stops its Spark job group
exactly as the main API's cancel callback does.

A call's context is valid only while the call runs, so a call is asked only between
:meth:`CancelWatcher.watching` and the end of the call (the call's middleware reports its end,
which may come before a suspended result stream is finalised).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from horizon_broker.broker.spark.executor import CANCELLED, QueryScope

log = logging.getLogger("horizon.broker.flight")

POLL_S = 0.05


class CancelWatcher:
    def __init__(self, poll_s: float = POLL_S) -> None:
        self.poll_s = poll_s
        self._calls: dict[int, tuple[Any, QueryScope]] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    @contextmanager
    def watching(self, context: Any, scope: QueryScope, call: Any = None) -> Iterator[None]:
        """Cancel ``scope`` if the call of ``context`` is cancelled while the block runs; ``call``
        (the call's :class:`horizon_broker.broker.flight.auth.CallHeaders`) stops the watch when the call ends."""
        key = id(scope)
        with self._lock:
            self._calls[key] = (context, scope)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="horizon-flight-cancel", daemon=True
                )
                self._thread.start()
        if call is not None:
            call.on_complete.append(lambda: self._forget(key))
        try:
            yield
        finally:
            self._forget(key)

    def _forget(self, key: int) -> None:
        with self._lock:
            self._calls.pop(key, None)

    def _run(self) -> None:
        while not self._stopped.wait(self.poll_s):
            with self._lock:
                for context, scope in list(self._calls.values()):
                    try:
                        cancelled = context.is_cancelled()
                    except Exception:  # pragma: no cover - defensive: never kill the watcher
                        log.debug("could not ask a call whether it was cancelled", exc_info=True)
                        continue
                    if cancelled:
                        scope.cancel(CANCELLED)

    def stop(self) -> None:
        self._stopped.set()
