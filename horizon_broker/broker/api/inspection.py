"""The inspection service, transport-neutral: tables, timelines, watermarks, locks and queries as
a caller's grants allow, answered as the API's protobuf messages.

Both doors that inspect call it: the gRPC InspectionService (:mod:`horizon_broker.broker.api.inspection_service`)
and the web console (:mod:`horizon_broker.broker.console`), so grants are applied in one place. Every method is
blocking (locks and pins live in Redis) and takes the caller's :class:`~horizon_broker.broker.grants.Principal`.
"""

from __future__ import annotations

import threading
from typing import Any

from horizon_broker._core.errors import InvalidArgument, Unavailable
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker.api import key_explanation, messages
from horizon_broker.broker.engine import QueryEngine
from horizon_broker.broker.grants import Principal, check_inspect, resolve_readable
from horizon_broker.timeline.interval import Interval


class Inspection:
    """What a broker shows about its state, per caller."""

    def __init__(
        self,
        engine: QueryEngine | None,
        follower: Any,
        *,
        regression_policy: str,
        locks: Any = None,
        pins: Any = None,
    ) -> None:
        """``engine`` None: it comes later (:meth:`attach_engine`, once Spark is up); until then
        the follower's answers (tables, timeline, watermarks, locks) are given at once and the
        engine's (queries, explain_key) wait for it."""
        self._engine = engine
        self._engine_ready = threading.Event()
        if engine is not None:
            self._engine_ready.set()
        self.follower = follower
        self.regression_policy = regression_policy
        self.locks = locks
        self.pins = pins

    @property
    def engine(self) -> QueryEngine:
        """The query engine, waited for while the broker is still starting."""
        self._engine_ready.wait()
        assert self._engine is not None
        return self._engine

    def attach_engine(self, engine: QueryEngine) -> None:
        self._engine = engine
        self._engine_ready.set()

    def tables(self, principal: Principal) -> pb.ListTablesResponse:
        """The tables the caller may read (no inspect right needed)."""
        tables = [
            messages.table_info_message(self.follower.view(name))
            for name in self.follower.tables()
            if principal.may_read(name)
        ]
        return pb.ListTablesResponse(tables=tables)

    def timeline(
        self, principal: Principal, request: pb.GetTimelineRequest
    ) -> pb.GetTimelineResponse:
        check_inspect(principal)
        table = self.table(principal, request.table)
        interval = None
        if request.HasField("interval"):
            interval = Interval(request.interval.start_ms, request.interval.end_ms)
        snapshot = self.follower.timeline_snapshot(table)
        locks, locks_error = [], ""
        try:
            locks = list(self._locks([table]).locks)
        except Unavailable as error:
            locks_error = str(error)
        response = messages.timeline_message(
            snapshot,
            interval=interval,
            include_overshadowed=request.include_overshadowed,
            locks=locks,
        )
        response.locks_error = locks_error
        for segment, mark in self.follower.unreadable():
            if segment.table == table and (interval is None or segment.interval.overlaps(interval)):
                response.unreadable.append(
                    pb.UnreadableSegment(
                        segment=messages.segment_message(segment),
                        reason=mark.reason,
                        since_ms=mark.since_ms,
                        checked_ms=mark.checked_ms,
                    )
                )
        return response

    def watermarks(
        self, principal: Principal, request: pb.GetWatermarksRequest
    ) -> pb.GetWatermarksResponse:
        check_inspect(principal)
        table = self.table(principal, request.table)
        report = self.follower.watermarks(table)
        blocked = self.regression_policy == "fail" and report.active_regression is not None
        response = messages.watermarks_message(report, queries_blocked=blocked)
        if self.pins is not None:
            try:
                now_ms, pins = self.pins.listing([table])
                response.pins.extend(
                    messages.pin_message(pin, now_ms, show_id=pin.owner == principal.name)
                    for pin in pins
                )
            except Unavailable as error:
                response.pins_error = str(error)
        return response

    def locks_held(
        self, principal: Principal, request: pb.ListLocksRequest
    ) -> pb.ListLocksResponse:
        check_inspect(principal)
        if request.table:
            tables = [self.table(principal, request.table)]
        else:
            tables = [name for name in self.follower.tables() if principal.may_read(name)]
        return self._locks(tables)

    def _locks(self, tables: list[str]) -> pb.ListLocksResponse:
        if self.locks is None or not tables:
            return pb.ListLocksResponse()
        listing = self.locks.listing(tables)
        return pb.ListLocksResponse(
            now_ms=listing.now_ms,
            locks=[messages.lock_message(lock, listing.now_ms) for lock in listing.locks],
        )

    def queries(
        self, principal: Principal, request: pb.ListQueriesRequest
    ) -> pb.ListQueriesResponse:
        """Running, then recent queries; another identity's SQL only to a caller who may read
        every table it read."""
        check_inspect(principal)
        if request.limit < 0:
            raise InvalidArgument("limit must not be negative")
        registry = self.engine.queries
        records = registry.running()
        if not request.running_only:
            finished = registry.recent()
            records += finished[: request.limit] if request.limit else finished
        return pb.ListQueriesResponse(
            queries=[
                messages.query_info_message(
                    record,
                    show_sql=record.identity == principal.name
                    or (bool(record.tables) and all(map(principal.may_read, record.tables))),
                    spark_jobs_running=self.engine.spark_jobs_running(record.handle),
                )
                for record in records
            ]
        )

    def explain_key(
        self, principal: Principal, request: pb.ExplainKeyRequest
    ) -> pb.ExplainKeyResponse:
        """Why the request's key is (not) in its table at the snapshot a query would read
        (:mod:`horizon_broker.broker.api.key_explanation`); needs inspect and read."""
        check_inspect(principal)
        table = self.table(principal, request.table)
        return key_explanation.answer(self.engine, self.follower, principal, table, request)

    def table(self, principal: Principal, name: str) -> str:
        """The registered spelling of ``name`` (tables resolve case-insensitively, like SQL),
        if the caller may read it; unknown and ungranted answer alike to a restricted caller."""
        return resolve_readable(principal, self.follower.tables(), name)
