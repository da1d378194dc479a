"""Started queries waiting for their DoGet: what a ticket names, until it is read or expires.

GetFlightInfo runs the query (admission slot, snapshot, Spark) and reads its whole result
(:mod:`horizon_broker.broker.flight.buffered`) before it frees the slot, so the FlightInfo carries the query's
metadata, exact schema and row count; the result then waits here under a random handle, holding
no query slot. A ticket is single use and only its caller may redeem it. A result nobody fetches
within the TTL is dropped. Each identity may keep a few results here
(``[flight] max_waiting_results_per_identity``), the broker a few more.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from horizon_broker._core.errors import NotFound, PermissionDenied
from horizon_broker._core.lru import Lru
from horizon_broker.broker.engine import Execution
from horizon_broker.broker.flight.buffered import BufferedResult
from horizon_broker.broker.flight.quotas import OwnerCounts, Quota, result_quota
from horizon_broker.broker.spark.executor import CANCELLED, QueryScope


@dataclass
class PendingResult:
    handle: bytes
    owner: str
    execution: Execution
    scope: QueryScope
    schema: pa.Schema
    expires_at: float
    """On :func:`time.monotonic`'s clock."""
    expires_wall: float
    """The same instant on the wall clock (for the endpoint's expiration time)."""
    started: float = 0.0
    """When GetFlightInfo began, on :func:`time.perf_counter`'s clock."""
    streaming: bool = False
    buffered: BufferedResult | None = None
    """The whole result, read before the query's slot was freed (None: stream ``execution``)."""

    def batches(self) -> Iterator[pa.RecordBatch]:
        if self.buffered is not None:
            return self.buffered.batches()
        return self.execution.batches()

    def close(self) -> None:
        """Free what the result holds: its query (if still open) and its buffered batches."""
        self.execution.close()
        if self.buffered is not None:
            self.buffered.discard()


UnreadEnd = Callable[[PendingResult, str, str, str], None]
"""Told of a result closed before anyone read it: (result, state, status code, message)."""


class ResultStore:
    def __init__(
        self,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        on_unread_end: UnreadEnd | None = None,
        quota: Quota | None = None,
    ) -> None:
        self.ttl_s = ttl_s
        self._owners = OwnerCounts(quota or result_quota())
        self._clock = clock
        self._on_unread_end = on_unread_end
        self._results: dict[bytes, PendingResult] = {}
        self._lock = threading.Lock()

    def add(
        self,
        execution: Execution,
        scope: QueryScope,
        owner: str,
        schema: pa.Schema,
        started: float = 0.0,
        buffered: BufferedResult | None = None,
    ) -> PendingResult:
        result = PendingResult(
            handle=secrets.token_bytes(16),
            owner=owner,
            execution=execution,
            scope=scope,
            schema=schema,
            expires_at=self._clock() + self.ttl_s,
            expires_wall=time.time() + self.ttl_s,
            started=started,
            buffered=buffered,
        )
        with self._lock:
            self._owners.add(owner)
            self._results[result.handle] = result
        return result

    def check_room(self, owner: str) -> None:
        """Refuse now what :meth:`add` would refuse (before the query runs)."""
        with self._lock:
            self._owners.check(owner)

    def take(self, handle: bytes, owner: str) -> PendingResult:
        """The result ``handle`` names, now being read (a ticket is good for one DoGet)."""
        with self._lock:
            result = self._results.get(handle)
            if result is None or result.streaming:
                raise NotFound(
                    "this ticket names no waiting result: it was already read, cancelled, or "
                    f"not fetched within {self.ttl_s:g} s ([flight].result_ttl_s); run the "
                    "query again"
                )
            if result.owner != owner:
                raise PermissionDenied("this ticket belongs to another caller's query")
            result.streaming = True
            return result

    def finish(self, handle: bytes) -> None:
        with self._lock:
            result = self._results.pop(handle, None)
            if result is not None:
                self._owners.remove(result.owner)

    def cancel(self, handle: bytes, owner: str) -> bool:
        """Cancel the query ``handle`` names (waiting or streaming); False if it is unknown."""
        with self._lock:
            result = self._results.get(handle)
            if result is None:
                return False
            if result.owner != owner:
                raise PermissionDenied("this ticket belongs to another caller's query")
            if not result.streaming:
                del self._results[handle]
                self._owners.remove(owner)
        result.scope.cancel(CANCELLED)
        if not result.streaming:
            result.close()
            self._unread_end(result, "cancelled", "CANCELLED", "cancelled before it was read")
        return True

    def expire(self) -> int:
        """Close results not fetched within the TTL; how many."""
        now = self._clock()
        with self._lock:
            stale = [r for r in self._results.values() if not r.streaming and r.expires_at < now]
            for result in stale:
                del self._results[result.handle]
                self._owners.remove(result.owner)
        for result in stale:
            result.close()
            self._unread_end(
                result,
                "cancelled",
                "CANCELLED",
                f"its result was not fetched within {self.ttl_s:g} s ([flight].result_ttl_s)",
            )
        return len(stale)

    def close(self) -> None:
        """Cancel every query: waiting ones are closed here, streaming ones end their stream."""
        with self._lock:
            results = list(self._results.values())
            self._results.clear()
            self._owners.counts.clear()
        for result in results:
            result.scope.cancel(CANCELLED)
            if not result.streaming:
                result.close()
                self._unread_end(result, "cancelled", "CANCELLED", "the broker stopped")

    def _unread_end(self, result: PendingResult, state: str, status: str, message: str) -> None:
        if self._on_unread_end is not None:
            self._on_unread_end(result, state, status, message)

    def __len__(self) -> int:
        return len(self._results)


class SchemaCache(Lru[Hashable, pa.Schema]):
    """A small LRU of result schemas by query (thread-safe): ``SchemaCache(capacity)``."""


def batch_slices(batch: pa.RecordBatch, target_bytes: int) -> Iterator[pa.RecordBatch]:
    """``batch`` cut into slices of about ``target_bytes`` (zero-copy), so no Flight message
    comes near gRPC's message size limits."""
    if batch.num_rows <= 1 or batch.nbytes <= target_bytes:
        yield batch
        return
    rows = max(1, batch.num_rows * target_bytes // batch.nbytes)
    for start in range(0, batch.num_rows, rows):
        yield batch.slice(start, rows)
