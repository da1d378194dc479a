"""Flight SQL queries in the broker's query registry, as ExecuteQuery's are.

An operator watching a shared broker must see every query that holds its cores, whichever door it
came through: a Flight SQL query is registered when GetFlightInfo starts it, shows as running
while its result waits for DoGet and streams, and ends once (read whole, failed, cancelled, left
unread past its TTL, or dropped when the broker stops). ListQueries, the console, the metrics and
the query log all hear of it from the registry, with ``rpc = "FlightSQL"``.
"""

from __future__ import annotations

import time
from typing import Any

from horizon_broker.broker.api.status import ended_as
from horizon_broker.broker.engine.registry import QueryRegistry
from horizon_broker.broker.spark.executor import QueryScope

RPC = "FlightSQL"


class FlightQueries:
    """Records the life of Flight SQL queries in ``registry``, by their scopes' handles; ending
    twice is harmless (the registry keeps the first end)."""

    def __init__(self, registry: QueryRegistry) -> None:
        self.registry = registry

    def begin(self, scope: QueryScope, identity: str, sql: str) -> None:
        self.registry.begin(scope.handle, scope.query_id, identity, sql, rpc=RPC)

    def started(self, query_id: str, execution: Any) -> None:
        self.registry.started(query_id, execution)

    def failed(self, query_id: str, error: BaseException) -> None:
        self.registry.end(query_id, *ended_as(error))

    def ended(self, query_id: str, state: str, status: str, message: str) -> None:
        self.registry.end(query_id, state, status, message)

    def streamed(
        self, query_id: str, execution: Any, started: float, rows: int, nbytes: int
    ) -> None:
        """The result was read to its end: rows, bytes (the batches' Arrow buffers, which
        pyarrow's server frames as IPC) and where the time went (``started`` on
        :func:`time.perf_counter`'s clock, when GetFlightInfo began)."""
        self.registry.end(
            query_id,
            "done",
            "OK",
            rows=rows,
            bytes=nbytes,
            timings={
                "total": (time.perf_counter() - started) * 1000,
                "queued": execution.queued_s * 1000,
                "rewrite": execution.rewrite_s * 1000,
                "views": execution.views_s * 1000,
                "spark": execution.spark_s * 1000,
            },  # no "serialize": pyarrow's Flight server encodes the batches, out of sight
        )
