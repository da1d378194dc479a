"""The query service: authenticate, hand the work to a thread, convert, stream.

They run on the server's asyncio loop and never block it: every call that may wait (a snapshot,
the admission queue, Spark, Redis) runs on a thread of its own (:mod:`horizon_broker.broker.api.offload`), so health
checks and other callers are answered however many queries wait. A query's messages come back
through a bounded pipe; a client that reads too slowly is cut off at the query's deadline and its
admission slot freed. The query pipeline is :mod:`horizon_broker.broker.engine`, conversions are
:mod:`horizon_broker.broker.api.messages`, the status mapping is :mod:`horizon_broker.broker.api.status`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pyarrow as pa

from horizon_broker._core.errors import DeadlineExceeded, InvalidArgument
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2_grpc as rpc
from horizon_broker.broker.api import arrow_ipc, messages
from horizon_broker.broker.api.auth import Authenticator, caller
from horizon_broker.broker.api.offload import END, Offload, ResultPipe, loop_deadline
from horizon_broker.broker.api.status import ended_as, stream_errors, unary_errors
from horizon_broker.broker.engine import Execution, QueryEngine
from horizon_broker.broker.engine.explain import segment_reasons, view_notes
from horizon_broker.broker.engine.pinning import DEFAULT_LEASE_S, find_pin, resolve_tables, take_pin
from horizon_broker.broker.engine.read_options import ReadOptions
from horizon_broker.broker.grants import Principal, check_read
from horizon_broker.broker.spark.executor import CANCELLED, DEADLINE, QueryScope
from horizon_broker.broker.subscribe import (
    HandOver,
    OpenSubscriptions,
    produce_subscription,
    relay_subscription,
    subscription_plan,
)
from horizon_broker.broker.subscribe.strategy import explain_choice
from horizon_broker.watermark import tokens

log = logging.getLogger("horizon.broker.api.query_service")

SUBSCRIPTION_PIPE = 2
"""Subscribe messages handed over and not yet written: a slow subscriber's deltas coalesce."""

_QUERY_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def _query_id(requested: str) -> str:
    if not requested:
        return uuid.uuid4().hex[:16]
    if len(requested) > 64 or not set(requested) <= _QUERY_ID_CHARS:
        raise InvalidArgument("query_id must be at most 64 letters, digits, '-', '_' or '.'")
    return requested


def _read_options(read: pb.ReadOptions) -> ReadOptions:
    return ReadOptions.parse(
        min_snapshot=read.min_snapshot,
        max_staleness_s=read.max_staleness_seconds,
        pin_id=read.pin_id,
        bypass_cache=read.bypass_cache,
    )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _lease_s(requested: float, limit: float, default: float) -> float:
    lease = requested or default
    if not 0 < lease <= limit:
        raise InvalidArgument(
            f"a pin's lease must be more than 0 and at most {limit:g} seconds "
            f"([reads].max_pin_lease_s), {requested:g} asked"
        )
    return lease


def _monotonic_deadline(context: grpc.aio.ServicerContext) -> float | None:
    """The call's deadline on ``time.monotonic()`` (what the engine's waits use)."""
    remaining = context.time_remaining()
    if remaining is None or remaining > 10 * 365 * 86400:
        return None
    return time.monotonic() + remaining


def query_messages(
    execution: Execution, batch_bytes: int, started: float
) -> Iterator[pb.ExecuteQueryResponse]:
    """Header, then each Spark batch re-cut to gRPC-sized messages as it arrives, then the
    trailer; no more of the result is held than what Spark has delivered and not yet sent."""
    serialize_s = 0.0
    encode_started = time.perf_counter()
    schema = execution.schema
    header = pb.QueryHeader(
        arrow_schema=arrow_ipc.encode_schema(schema),
        columns=[pb.Column(name=f.name, type=str(f.type)) for f in schema],
        metadata=messages.metadata_message(
            execution.prepared,
            unreadable=execution.unreadable_segments,
            retried=execution.retried,
            cache=execution.cache,
            execution=execution.route,
        ),
    )
    serialize_s += time.perf_counter() - encode_started
    yield pb.ExecuteQueryResponse(header=header)
    batches = row_count = byte_count = 0
    for batch in execution.batches():
        encode_started = time.perf_counter()
        pieces = list(arrow_ipc.encode_batches(pa.Table.from_batches([batch]), batch_bytes))
        serialize_s += time.perf_counter() - encode_started
        for data, rows in pieces:
            batches += 1
            row_count += rows
            byte_count += len(data)
            yield pb.ExecuteQueryResponse(batch=pb.ArrowBatch(data=data, row_count=rows))
    timings = pb.QueryTimings(
        total_ms=(time.perf_counter() - started) * 1000,
        queued_ms=execution.queued_s * 1000,
        rewrite_ms=execution.rewrite_s * 1000,
        views_ms=execution.views_s * 1000,
        spark_ms=execution.spark_s * 1000,
        serialize_ms=serialize_s * 1000,
    )
    yield pb.ExecuteQueryResponse(
        trailer=pb.QueryTrailer(
            row_count=row_count,
            batch_count=batches,
            byte_count=byte_count,
            timings=timings,
            cache=execution.cache,
        )
    )


def trailer_fields(trailer: pb.QueryTrailer | None) -> dict[str, Any]:
    """What the registry keeps of a finished query's trailer."""
    if trailer is None:
        return {}
    timings = trailer.timings
    return {
        "rows": trailer.row_count,
        "bytes": trailer.byte_count,
        "timings": {
            "total": timings.total_ms,
            "queued": timings.queued_ms,
            "rewrite": timings.rewrite_ms,
            "views": timings.views_ms,
            "spark": timings.spark_ms,
            "serialize": timings.serialize_ms,
        },
    }


def explain_query(
    engine: QueryEngine,
    request: pb.ExplainQueryRequest,
    principal: Principal,
    options: ReadOptions,
    deadline: float | None,
) -> pb.ExplainQueryResponse:
    """What a query would read and why, as ExplainQuery answers (the console's explain too)."""
    prepared = engine.prepare(request.sql, principal, options=options, deadline=deadline)
    tables = []
    for read in prepared.tables:
        snapshot = engine.follower.timeline_snapshot(read.table)
        reasons = segment_reasons(snapshot, read.segments)
        for key, note in view_notes(read.layout, read.lwm).items():
            reasons[key] = f"{reasons[key]}; {note}"
        tables.append(
            pb.TableExplain(
                read=messages.table_read_message(read),
                segments=[
                    pb.ChosenSegment(
                        segment=messages.segment_message(segment),
                        reason=reasons[str(segment.id)],
                    )
                    for segment in read.segments
                ],
            )
        )
    response = pb.ExplainQueryResponse(
        original_sql=request.sql,
        rewritten_sql=prepared.sql,
        metadata=messages.metadata_message(prepared, cache=engine.cache_state(prepared, options)),
        tables=tables,
    )
    upsert = [
        engine.follower.descriptor(t.table) for t in prepared.tables if t.snapshot is not None
    ]
    choice = explain_choice(request.sql, upsert)
    response.subscribe_strategy, response.subscribe_strategy_reason = choice.strategy, choice.text
    if request.include_spark_plan:
        response.spark_plan = engine.spark_plan(prepared, deadline=deadline)
    return response


def _execute_options(request: pb.ExecuteQueryRequest) -> ReadOptions:
    """The read controls of an ExecuteQuery request, its row limit checked first."""
    if request.max_rows < 0:
        raise InvalidArgument("max_rows must not be negative")
    return _read_options(request.read)


def query_timeout(limit_s: float, remaining: float | None) -> float:
    """How long a query may take: ``[limits].query_timeout_s``, or less when the call's own
    deadline (``remaining`` seconds, None: none) is sooner."""
    if remaining is not None and remaining < limit_s:
        return remaining
    return limit_s


def produce_query(
    engine: QueryEngine,
    request: pb.ExecuteQueryRequest,
    principal: Principal,
    scope: QueryScope,
    options: ReadOptions,
    pipe: ResultPipe,
    started: float,
) -> None:
    """The query's own thread: run it and put its messages into ``pipe``, which ends with END
    or the error (the loop answers with it); the execution is closed either way."""
    try:
        execution = engine.execute(
            request.sql,
            principal,
            scope,
            max_rows=request.max_rows,
            is_active=lambda: not pipe.closed,
            options=options,
        )
        engine.queries.started(scope.handle, execution)
        try:
            for message in query_messages(execution, engine.config.limits.batch_bytes, started):
                pipe.put(message)
        finally:
            execution.close()
    except BaseException as error:  # handed to the loop, which answers with it
        pipe.finish(error)
    else:
        pipe.finish(END)


async def relay(
    pipe: ResultPipe, context: grpc.aio.ServicerContext, deadline: float, query_id: str
) -> pb.QueryTrailer | None:
    """Write the query's messages to the call as they come until END (returns the trailer);
    the query's error is raised, and so is DEADLINE_EXCEEDED for a client that does not read
    its result before ``deadline`` (the loop's clock)."""
    trailer: pb.QueryTrailer | None = None
    while True:
        item = await pipe.get(deadline)
        if item is END:
            return trailer
        if isinstance(item, BaseException):
            raise item
        if item.WhichOneof("kind") == "trailer":
            trailer = item.trailer
        try:
            # A timeout context, not ``wait_for``: no task per message.
            async with asyncio.timeout_at(deadline):
                await context.write(item)
        except TimeoutError:
            raise DeadlineExceeded(
                f"query {query_id}: the client did not read the result before the query's "
                "deadline; the query was stopped"
            ) from None


def stopped_as(error: BaseException, *, deadline_passed: bool) -> tuple[str, tuple[str, ...]]:
    """How a query whose relay ended with ``error`` is stopped: the reason its scope is
    cancelled with, and what the registry records (state, status, message...). An error of
    the query's, or its deadline, is its own; anything else is gRPC ending the call, because
    the client cancelled or (``deadline_passed``) its deadline passed."""
    if isinstance(error, DeadlineExceeded):
        return DEADLINE, ("deadline", "DEADLINE_EXCEEDED", str(error))
    if isinstance(error, Exception):
        return CANCELLED, ended_as(error)
    if deadline_passed:
        return DEADLINE, ("deadline", "DEADLINE_EXCEEDED", "the deadline passed")
    return CANCELLED, ("cancelled", "CANCELLED", "the client cancelled")


class QueryServicer(rpc.QueryServiceServicer):
    def __init__(self, engine: QueryEngine, auth: Authenticator, offload: Offload) -> None:
        self.engine = engine
        self.auth = auth
        self.offload = offload
        self.subscriptions = OpenSubscriptions(
            lambda: engine.config.limits.max_subscriptions_per_identity
        )

    @stream_errors
    async def ExecuteQuery(
        self, request: pb.ExecuteQueryRequest, context: grpc.aio.ServicerContext
    ) -> None:
        """Run the query on a thread of its own; relay its messages as the client reads them."""
        started = time.perf_counter()
        principal = caller(self.auth, context)
        options = _execute_options(request)
        limits = self.engine.config.limits
        timeout = query_timeout(limits.query_timeout_s, context.time_remaining())
        scope = QueryScope(_query_id(request.query_id), deadline=time.monotonic() + timeout)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        pipe = ResultPipe(loop)
        registry = self.engine.queries
        registry.begin(
            scope.handle, scope.query_id, principal.name, request.sql, rpc="ExecuteQuery"
        )
        produce = functools.partial(
            produce_query, self.engine, request, principal, scope, options, pipe, started
        )
        try:
            self.offload.start(produce, f"horizon-query-{scope.handle}")
        except BaseException as error:
            registry.end(scope.handle, *ended_as(error))
            raise
        try:
            trailer = await relay(pipe, context, deadline, scope.query_id)
        except BaseException as error:
            reason, ended = stopped_as(error, deadline_passed=loop.time() >= deadline - 0.05)
            scope.cancel(reason)
            registry.end(scope.handle, *ended)
            raise
        else:
            registry.end(scope.handle, "done", "OK", **trailer_fields(trailer))
        finally:
            pipe.close()

    @unary_errors
    async def ExplainQuery(
        self, request: pb.ExplainQueryRequest, context: grpc.aio.ServicerContext
    ) -> pb.ExplainQueryResponse:
        principal = caller(self.auth, context)
        options = _read_options(request.read)
        return await self.offload.call(
            self._explain,
            request,
            principal,
            options,
            _monotonic_deadline(context),
            deadline=loop_deadline(context.time_remaining()),
        )

    def _explain(
        self,
        request: pb.ExplainQueryRequest,
        principal: Principal,
        options: ReadOptions,
        deadline: float | None,
    ) -> pb.ExplainQueryResponse:
        return explain_query(self.engine, request, principal, options, deadline)

    @unary_errors
    async def RewriteQuery(
        self, request: pb.RewriteQueryRequest, context: grpc.aio.ServicerContext
    ) -> pb.RewriteQueryResponse:
        principal = caller(self.auth, context)
        reads = self.engine.config.reads
        lease = None
        if request.pin_lease_seconds:
            lease = _lease_s(request.pin_lease_seconds, reads.max_pin_lease_s, DEFAULT_LEASE_S)
        options = _read_options(request.read)
        return await self.offload.call(
            self._rewrite,
            request,
            principal,
            options,
            lease,
            _monotonic_deadline(context),
            deadline=loop_deadline(context.time_remaining()),
        )

    def _rewrite(
        self,
        request: pb.RewriteQueryRequest,
        principal: Principal,
        options: ReadOptions,
        lease: float | None,
        deadline: float | None,
    ) -> pb.RewriteQueryResponse:
        prepared = self.engine.prepare(request.sql, principal, options=options, deadline=deadline)
        response = pb.RewriteQueryResponse(
            sql=prepared.sql,
            metadata=messages.metadata_message(prepared),
            tables=[
                entry
                for read in prepared.tables
                for entry in messages.substituted_table_messages(read, prepared.sql)
            ],
        )
        if lease is not None:
            pin = self.engine.pin_plan(prepared, lease, owner=principal.name)
            if pin is not None:
                response.pin.CopyFrom(messages.pin_message(pin, _now_ms()))
        return response

    @unary_errors
    async def PinSnapshot(
        self, request: pb.PinSnapshotRequest, context: grpc.aio.ServicerContext
    ) -> pb.PinSnapshotResponse:
        principal = caller(self.auth, context)
        reads = self.engine.config.reads
        lease = _lease_s(request.lease_seconds, reads.max_pin_lease_s, DEFAULT_LEASE_S)
        options = _read_options(request.read)
        return await self.offload.call(
            self._pin,
            request,
            principal,
            lease,
            options,
            _monotonic_deadline(context),
            deadline=loop_deadline(context.time_remaining()),
        )

    def _pin(
        self,
        request: pb.PinSnapshotRequest,
        principal: Principal,
        lease: float,
        options: ReadOptions,
        deadline: float | None,
    ) -> pb.PinSnapshotResponse:
        store = self.engine.pin_store()
        if request.renew_pin_id:
            check_read(principal, store.pin_tables(request.renew_pin_id))
            store.renew(request.renew_pin_id, lease_s=lease, owner=principal.name)
            pin = find_pin(store, request.renew_pin_id)
        else:
            tables = resolve_tables(self.engine.follower, request.tables, principal)
            pin = take_pin(
                store,
                self.engine.follower,
                tables,
                snapshot=request.snapshot if request.HasField("snapshot") else None,
                lease_s=lease,
                owner=principal.name,
                min_snapshot=options.min_snapshot,
                deadline=self.engine.wait_deadline(deadline),
            )
        return pb.PinSnapshotResponse(
            pin=messages.pin_message(pin, _now_ms()),
            snapshot_token=tokens.encode({table: pin.snapshot for table in pin.tables}),
        )

    @unary_errors
    async def ReleaseSnapshot(
        self, request: pb.ReleaseSnapshotRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReleaseSnapshotResponse:
        principal = caller(self.auth, context)
        if not request.pin_id:
            raise InvalidArgument("pin_id is required")
        return await self.offload.call(
            self._release,
            request.pin_id,
            principal,
            deadline=loop_deadline(context.time_remaining()),
        )

    def _release(self, pin_id: str, principal: Principal) -> pb.ReleaseSnapshotResponse:
        store = self.engine.pin_store()
        check_read(principal, store.pin_tables(pin_id))
        return pb.ReleaseSnapshotResponse(released=store.release(pin_id, owner=principal.name))

    @stream_errors
    async def Subscribe(
        self, request: pb.SubscribeRequest, context: grpc.aio.ServicerContext
    ) -> None:
        """A standing query on a thread of its own (:mod:`horizon_broker.broker.subscribe`)."""
        principal = caller(self.auth, context)
        plan = subscription_plan(request)
        subscriptions = self.subscriptions
        max_lag_s = self.engine.config.limits.subscription_max_lag_s
        pipe = HandOver(SUBSCRIPTION_PIPE, max_lag_s, asyncio.get_running_loop())
        produce = functools.partial(
            produce_subscription, self.engine, principal, plan, pipe, subscriptions, "Subscribe"
        )
        self.offload.start(produce, "horizon-subscribe")
        try:
            await relay_subscription(pipe, context, subscriptions.stopping)
        finally:
            pipe.close()
