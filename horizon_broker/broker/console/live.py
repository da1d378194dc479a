"""The console's live table: a SELECT's answer kept up to date in the page, over server-sent events.

The page (``/live``) asks for the SQL; its script opens ``/live/events``, whose response is one
real subscription (:mod:`horizon_broker.broker.subscribe`) run as the signed-in principal, as
``QueryService.Subscribe`` runs it: the same per-identity bound (the broker's
:class:`~horizon_broker.broker.subscribe.OpenSubscriptions`, so a page and a gRPC stream count
together), its thread on the broker's offload, grants, budgets and admission through the engine.
Each Subscribe message becomes one event whose JSON the script applies to the table it shows.
The subscription ends when the page goes (the browser closes the connection), when the broker
or the console stops (an event saying to resume), or on an error (an event naming it).

An ``EventSource`` cannot send headers, so the events URL carries the page's CSRF token, checked
here as the guard checks a form's (a script with a bearer token needs none, as for POSTs).
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
from collections.abc import Callable
from typing import Any

import anyio
import pyarrow as pa
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from horizon_broker._core.errors import FailedPrecondition
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker.api.offload import Offload
from horizon_broker.broker.api.status import http_status_of
from horizon_broker.broker.console.guard import CSRF_FIELD, CsrfTokens
from horizon_broker.broker.grants import Principal
from horizon_broker.broker.subscribe import (
    HandOver,
    OpenSubscriptions,
    produce_subscription,
    relay_subscription,
    subscription_plan,
)
from horizon_broker.broker.subscribe.diff import DELETE, INSERT, UPDATE_AFTER, UPDATE_BEFORE
from horizon_broker.broker.subscribe.live import SubscriptionMessage

PIPE_CAPACITY = 2
"""Messages handed over and not yet sent, as for Subscribe: a slow page's deltas coalesce."""
RPC = "console"
"""The subscription's door in the query registry (ListQueries), as for the query box."""
GROWTH = {INSERT: 1, UPDATE_AFTER: 1, DELETE: -1, UPDATE_BEFORE: -1}


def cell(value: Any) -> str | None:
    """A value as the page shows it (a string: HLCs and int64 do not fit a JavaScript number)."""
    return None if value is None else str(value)


def message_event(message: SubscriptionMessage) -> dict[str, Any]:
    """One Subscribe message as the page's JSON: snapshots as strings, rows as lists of cells
    (a delta's change kind first)."""
    columns = message.rows.column_names
    rows = [[cell(v) for v in row] for row in zip(*message.rows.to_pydict().values(), strict=True)]
    return {
        "kind": message.kind,
        "strategy": message.strategy,
        "from_snapshot": str(message.from_snapshot),
        "to_snapshot": str(message.to_snapshot),
        "key": list(message.key),
        "columns": columns,
        "rows": rows,
        "resume_token": message.resume_token,
        "last_part": message.last_part,
    }


def grown_by(rows: pa.Table) -> int:
    """How many rows a message adds to the page's table (a delta's deletes count down)."""
    if "_change_type" not in rows.column_names:
        return rows.num_rows
    return sum(GROWTH.get(kind, 0) for kind in rows.column("_change_type").to_pylist())


def sse(event: str, data: dict[str, Any]) -> bytes:
    """One server-sent event (the JSON holds no newline, so one ``data:`` line)."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class EitherSet:
    """Set when any of its events is: the broker's stop of every stream, or the console's."""

    def __init__(self, *events: threading.Event) -> None:
        self._events = events

    def is_set(self) -> bool:
        return any(event.is_set() for event in self._events)


class PageWriter:
    """What :func:`relay_subscription` writes to: each message as an event of the response,
    the page's table bounded by ``[console] max_rows``."""

    def __init__(self, send: Callable[[dict[str, Any]], Any], max_rows: int) -> None:
        self._send = send
        self._max_rows = max_rows
        self._rows = 0
        self.trailers: dict[str, str] = {}

    def set_trailing_metadata(self, trailers: tuple[tuple[str, str], ...]) -> None:
        """What a gRPC stream would end with (the last resume token): the failure names it."""
        self.trailers = dict(trailers)

    async def event(self, name: str, data: dict[str, Any]) -> None:
        await self._send({"type": "http.response.body", "body": sse(name, data), "more_body": True})

    async def write(self, response: pb.SubscribeResponse) -> None:
        message = SubscriptionMessage.from_proto(response)
        self._rows += grown_by(message.rows)
        if self._rows > self._max_rows:
            raise FailedPrecondition(
                f"the live table would hold {self._rows} rows, more than [console] max_rows = "
                f"{self._max_rows}: narrow the query (a WHERE, an aggregate), or follow it with "
                "horizon subscribe"
            )
        await self.event("message", message_event(message))

    async def failure(self, error: BaseException) -> None:
        _, code, text = http_status_of(error)
        await self.event("failure", {"code": code, "message": text, "trailers": self.trailers})


class LiveTables:
    """The live table's event streams of one console."""

    def __init__(
        self,
        engine: Any,
        subscriptions: OpenSubscriptions | None,
        offload: Offload | None,
        max_rows: int,
    ) -> None:
        self.engine = engine
        self.subscriptions = subscriptions or OpenSubscriptions(
            lambda: engine.config.limits.max_subscriptions_per_identity
        )
        self.offload = offload
        self.max_rows = max_rows
        self.closing = threading.Event()
        """Set when the console stops: its streams end (saying to resume) so it can."""
        self.stopping = EitherSet(self.subscriptions.stopping, self.closing)

    def events(self, request: Request, principal: Principal, csrf: CsrfTokens) -> Response:
        """The event stream of ``sql`` (and ``resume_token``) in the URL, as ``principal``."""
        if "authorization" not in request.headers:
            refusal = csrf.check(request.cookies, request.query_params.get(CSRF_FIELD))
            if refusal is not None:
                return PlainTextResponse(refusal.text + "\n", status_code=refusal.status)
        subscribe = pb.SubscribeRequest(
            sql=request.query_params.get("sql", ""),
            resume_token=request.query_params.get("resume_token", ""),
        )
        return LiveStream(self, principal, subscribe)

    def start(self, target: Callable[[], None]) -> None:
        """The subscription's thread: on the broker's offload (its bound), else its own."""
        if self.offload is not None:
            self.offload.start(target, "horizon-console-live")
        else:
            threading.Thread(target=target, name="horizon-console-live", daemon=True).start()


class LiveStream(Response):
    """One page's subscription as ``text/event-stream``, until the page or the broker goes."""

    def __init__(
        self, live: LiveTables, principal: Principal, request: pb.SubscribeRequest
    ) -> None:
        super().__init__(media_type="text/event-stream")
        self.live = live
        self.principal = principal
        self.request = request

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-store"),
            (b"x-accel-buffering", b"no"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        writer = PageWriter(send, self.live.max_rows)
        async with anyio.create_task_group() as group:
            group.start_soon(_until_disconnected, receive, group.cancel_scope)
            try:
                await self._relay(writer)
            except Exception as error:  # every failure is the page's to show
                await writer.failure(error)
            group.cancel_scope.cancel()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _relay(self, writer: PageWriter) -> None:
        """The subscription's messages to the page; its thread (and with it the identity's
        slot) ends soon after this does: the hand-over is closed."""
        live = self.live
        plan = subscription_plan(self.request)
        max_lag_s = live.engine.config.limits.subscription_max_lag_s
        pipe = HandOver(PIPE_CAPACITY, max_lag_s, asyncio.get_running_loop())
        produce = functools.partial(
            produce_subscription, live.engine, self.principal, plan, pipe, live.subscriptions, RPC
        )
        try:
            live.start(produce)
            await relay_subscription(pipe, writer, live.stopping)
            await writer.event("end", {})
        finally:
            pipe.close()


async def _until_disconnected(receive: Any, scope: anyio.CancelScope) -> None:
    """Cancel the stream when the browser closes the connection (the page went away)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()
