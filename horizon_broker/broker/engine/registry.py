"""Running and recent queries: who asked what, in which state, where the time went.

Operators need to see what a shared broker is doing (which query holds the cores, whether a
cancelled query's Spark jobs are really gone); the registry keeps every running query and the
last ``keep`` finished ones, in memory, thread-safe. It records; it decides nothing. Listeners
(the broker's metrics and query log, :mod:`horizon_broker.broker.observe`) hear of every query that ends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from horizon_broker._core.errors import AlreadyExists

log = logging.getLogger(__name__)

PREPARING = "preparing"
"""Rewriting, waiting for a snapshot, or queued for an admission slot."""
RUNNING = "running"
"""Spark is producing the result; batches are streaming to the client."""
FINISHED_STATES = ("done", "failed", "cancelled", "deadline")


@dataclass(frozen=True, slots=True)
class QueryRecord:
    query_id: str
    identity: str
    sql: str
    state: str
    started_ms: int
    ended_ms: int = 0
    status: str = ""
    """The status code it ended with (``OK``, ``INVALID_ARGUMENT``...)."""
    message: str = ""
    tables: tuple[str, ...] = ()
    rows: int = 0
    bytes: int = 0
    cache: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    """Milliseconds per stage: queued, rewrite, views, spark, serialize, total."""
    rpc: str = ""
    """The door it came through: ``ExecuteQuery``, ``FlightSQL`` or ``console``."""
    kind: str = ""
    """How its snapshot was chosen (``lwm``, ``version``, ``timestamp``, ``changes``, ``pin``,
    ``none``); empty when it ended before it was prepared."""
    snapshot: int | None = None
    handle: str = ""
    """The broker's own handle of the query (its Spark job group), never the caller's id."""
    condition: str = ""
    """The engine's error condition it failed with ("" if none, or not the engine's error)."""


QueryListener = Callable[[QueryRecord], None]


class QueryRegistry:
    """Every running query and the last ``keep`` finished ones, keyed by the broker's handle of
    each (a caller's id is a label: unique per identity among its running queries)."""

    def __init__(self, keep: int = 200, sql_chars: int = 2_000) -> None:
        self._running: OrderedDict[str, QueryRecord] = OrderedDict()
        self._recent: deque[QueryRecord] = deque(maxlen=keep)
        self._sql_chars = sql_chars
        self._lock = threading.Lock()
        self._listeners: list[QueryListener] = []

    def add_listener(self, listener: QueryListener) -> None:
        """``listener(record)`` runs on the ending thread with each finished query's record."""
        with self._lock:
            self._listeners.append(listener)

    def begin(self, handle: str, query_id: str, identity: str, sql: str, *, rpc: str = "") -> None:
        """Record a query as preparing; ALREADY_EXISTS if ``identity`` runs one labelled
        ``query_id`` already (another identity's label is no concern of this one's)."""
        record = QueryRecord(
            query_id,
            identity,
            sql[: self._sql_chars],
            PREPARING,
            int(time.time() * 1000),
            rpc=rpc,
            handle=handle,
        )
        with self._lock:
            for running in self._running.values():
                if running.identity == identity and running.query_id == query_id:
                    raise AlreadyExists(
                        f"a query with id {query_id!r} is already running for this identity: "
                        "give each running query its own id, or none (the broker then chooses)"
                    )
            self._running[handle] = record

    def started(self, handle: str, execution: Any) -> None:
        """The query's result is coming (an :class:`~horizon_broker.broker.engine.Execution`): what it reads."""
        prepared = execution.prepared
        self.update(
            handle,
            state=RUNNING,
            tables=tuple(read.table for read in prepared.tables),
            cache=execution.cache,
            kind=prepared.snapshot_source,
            snapshot=prepared.plan.snapshot,
        )

    def update(self, handle: str, **changes: object) -> None:
        with self._lock:
            record = self._running.get(handle)
            if record is not None:
                self._running[handle] = replace(record, **changes)  # type: ignore[arg-type]

    def end(
        self,
        handle: str,
        state: str,
        status: str,
        message: str = "",
        condition: str = "",
        **changes: object,
    ) -> None:
        with self._lock:
            record = self._running.pop(handle, None)
            if record is None:
                return
            finished = replace(
                record,
                state=state,
                status=status,
                message=message[:500],
                condition=condition,
                ended_ms=int(time.time() * 1000),
                **changes,  # type: ignore[arg-type]
            )
            self._recent.append(finished)
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(finished)
            except Exception:  # watching a query must never fail it
                log.exception("a query listener failed on %s", finished.query_id)

    def running(self) -> list[QueryRecord]:
        with self._lock:
            return list(self._running.values())

    def recent(self) -> list[QueryRecord]:
        """Finished queries, newest first."""
        with self._lock:
            return list(reversed(self._recent))
