"""The inspection service: tables, timelines, watermarks, locks and queries, as the caller's
grants allow. Every answer is read on a thread of its own (:mod:`broker.api.offload`): the
follower's state is in memory, but locks and pins live in Redis, which may be slow to answer.
"""

from __future__ import annotations

from typing import Any

import grpc

from broker._proto.horizon.v1 import horizon_pb2 as pb
from broker._proto.horizon.v1 import horizon_pb2_grpc as rpc
from broker.api import messages
from broker.api.auth import Authenticator, caller
from broker.api.offload import Offload, loop_deadline
from broker.api.status import unary_errors
from broker.engine import QueryEngine
from broker.grants import Principal, check_inspect, resolve_readable
from core.errors import InvalidArgument, Unavailable
from timeline.interval import Interval


class InspectionServicer(rpc.InspectionServiceServicer):
    def __init__(
        self,
        engine: QueryEngine,
        follower: Any,
        auth: Authenticator,
        offload: Offload,
        *,
        regression_policy: str,
        locks: Any = None,
        pins: Any = None,
    ) -> None:
        self.engine = engine
        self.follower = follower
        self.auth = auth
        self.offload = offload
        self.regression_policy = regression_policy
        self.locks = locks
        self.pins = pins

    async def _answer(self, context: grpc.aio.ServicerContext, method: Any, *args: Any) -> Any:
        principal = caller(self.auth, context)
        return await self.offload.call(
            method, principal, *args, deadline=loop_deadline(context.time_remaining())
        )

    @unary_errors
    async def ListTables(
        self, request: pb.ListTablesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTablesResponse:
        return await self._answer(context, self._list_tables)

    def _list_tables(self, principal: Principal) -> pb.ListTablesResponse:
        tables = [
            messages.table_info_message(self.follower.view(name))
            for name in self.follower.tables()
            if principal.may_read(name)
        ]
        return pb.ListTablesResponse(tables=tables)

    @unary_errors
    async def GetTimeline(
        self, request: pb.GetTimelineRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetTimelineResponse:
        return await self._answer(context, self._timeline, request)

    def _timeline(
        self, principal: Principal, request: pb.GetTimelineRequest
    ) -> pb.GetTimelineResponse:
        check_inspect(principal)
        table = self._table(principal, request.table)
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

    @unary_errors
    async def GetWatermarks(
        self, request: pb.GetWatermarksRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetWatermarksResponse:
        return await self._answer(context, self._watermarks, request)

    def _watermarks(
        self, principal: Principal, request: pb.GetWatermarksRequest
    ) -> pb.GetWatermarksResponse:
        check_inspect(principal)
        table = self._table(principal, request.table)
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

    @unary_errors
    async def ListLocks(
        self, request: pb.ListLocksRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListLocksResponse:
        return await self._answer(context, self._list_locks, request)

    def _list_locks(
        self, principal: Principal, request: pb.ListLocksRequest
    ) -> pb.ListLocksResponse:
        check_inspect(principal)
        if request.table:
            tables = [self._table(principal, request.table)]
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

    @unary_errors
    async def ListQueries(
        self, request: pb.ListQueriesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListQueriesResponse:
        return await self._answer(context, self._list_queries, request)

    def _list_queries(
        self, principal: Principal, request: pb.ListQueriesRequest
    ) -> pb.ListQueriesResponse:
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
                    spark_jobs_running=self.engine.spark_jobs_running(record.query_id),
                )
                for record in records
            ]
        )

    def _table(self, principal: Principal, name: str) -> str:
        """The registered spelling of ``name`` (tables resolve case-insensitively, like SQL),
        if the caller may read it; unknown and ungranted answer alike to a restricted caller."""
        return resolve_readable(principal, self.follower.tables(), name)
