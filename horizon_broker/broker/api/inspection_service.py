"""The gRPC InspectionService: authenticate, then answer from the inspection service
(:mod:`horizon_broker.broker.api.inspection`, which applies the grants) on a thread of its own
(:mod:`horizon_broker.broker.api.offload`): the follower's state is in memory, but locks and pins live in Redis,
which may be slow to answer.
"""

from __future__ import annotations

from typing import Any

import grpc

from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2_grpc as rpc
from horizon_broker.broker.api.auth import Authenticator, caller
from horizon_broker.broker.api.inspection import Inspection
from horizon_broker.broker.api.offload import Offload, loop_deadline
from horizon_broker.broker.api.status import unary_errors


class InspectionServicer(rpc.InspectionServiceServicer):
    def __init__(self, inspection: Inspection, auth: Authenticator, offload: Offload) -> None:
        self.inspection = inspection
        self.auth = auth
        self.offload = offload

    async def _answer(self, context: grpc.aio.ServicerContext, method: Any, *args: Any) -> Any:
        principal = caller(self.auth, context)
        return await self.offload.call(
            method, principal, *args, deadline=loop_deadline(context.time_remaining())
        )

    @unary_errors
    async def ListTables(
        self, request: pb.ListTablesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTablesResponse:
        return await self._answer(context, self.inspection.tables)

    @unary_errors
    async def GetTimeline(
        self, request: pb.GetTimelineRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetTimelineResponse:
        return await self._answer(context, self.inspection.timeline, request)

    @unary_errors
    async def GetWatermarks(
        self, request: pb.GetWatermarksRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetWatermarksResponse:
        return await self._answer(context, self.inspection.watermarks, request)

    @unary_errors
    async def ListLocks(
        self, request: pb.ListLocksRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListLocksResponse:
        return await self._answer(context, self.inspection.locks_held, request)

    @unary_errors
    async def ListQueries(
        self, request: pb.ListQueriesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListQueriesResponse:
        return await self._answer(context, self.inspection.queries, request)

    @unary_errors
    async def ExplainKey(
        self, request: pb.ExplainKeyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ExplainKeyResponse:
        return await self._answer(context, self.inspection.explain_key, request)
