"""Subscriptions in the broker's query registry, so operators see them beside the queries.

A subscription is one record for its whole life, whichever door it came through (``Subscribe``
over gRPC, ``DoExchange`` over Flight): running while it is open, with ``kind`` "subscription",
the caller's identity and SQL, the tables it follows, the snapshot its last message brought the
subscriber to and the rows sent so far; it ends once, with the status that ended it.
InspectionService.ListQueries, the console, the metrics and the query log all read it there.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from horizon_broker._core.errors import Cancelled, HorizonError
from horizon_broker.broker.engine.registry import RUNNING, QueryRegistry

KIND = "subscription"


def ended_as(error: BaseException | None) -> tuple[str, str, str]:
    """(state, status, message) for a subscription that ended with ``error`` (None: the
    subscriber went away)."""
    if error is None or isinstance(error, Cancelled):
        return "cancelled", "CANCELLED", "the subscriber went away"
    if isinstance(error, HorizonError):
        return "failed", error.code.value, str(error)
    return "failed", "INTERNAL", "internal error in the broker"


class RecordedSubscription:
    """One subscription's record in ``registry``."""

    def __init__(self, registry: QueryRegistry, identity: str, sql: str, source: str) -> None:
        self.registry = registry
        self.handle = f"sub-{uuid.uuid4().hex[:12]}"
        self.rows = 0
        registry.begin(self.handle, self.handle, identity, sql, rpc=source)

    def following(self, tables: Sequence[str]) -> None:
        self.registry.update(self.handle, state=RUNNING, kind=KIND, tables=tuple(tables))

    def sent(self, snapshot: int, rows: int) -> None:
        """A step went to the subscriber: its answer is at ``snapshot`` now."""
        self.rows += rows
        self.registry.update(self.handle, snapshot=snapshot, rows=self.rows)

    def ended(self, error: BaseException | None) -> None:
        self.registry.end(self.handle, *ended_as(error), kind=KIND)
