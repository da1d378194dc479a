"""Subscriptions over Arrow Flight ``DoExchange``: the Subscribe stream for any Flight client.

The descriptor is a command holding a JSON object (:func:`subscribe_request`)::

    {"command": "subscribe", "sql": "SELECT ...", "resume_token": "hzs1....",
     "max_rows_per_message": 10000, "strategy": ""}

The server answers with one Arrow stream whose schema is the query's columns after a
``_change_type`` column. Each Subscribe message is one record batch (a resumed stream's header:
a metadata-only message) whose ``app_metadata`` is a JSON object (:func:`app_metadata`) with the
message's kind, strategy, snapshots, key columns, last_part and resume token; the first result's
rows come as ``insert`` changes, so a client applies every message the same way. A ``progress``
message (the tables' snapshot moved and the answer did not) is metadata only, like a resumed
header: its ``to_snapshot`` and ``resume_token`` are where a quiet stream stands. The broker's
subscription thread (:mod:`horizon_broker.broker.subscribe`) computes the messages, with the
grants, budgets, admission, per-identity limit and lag bound of QueryService.Subscribe; errors
are the Flight errors of every other call, the stream's last resume token in the
``x-horizon-resume-token`` trailer.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl

from horizon_broker._core.errors import InvalidArgument, Unavailable
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker.engine import QueryEngine
from horizon_broker.broker.flight.errors import flight_error
from horizon_broker.broker.grants import Principal
from horizon_broker.broker.subscribe import (
    HandOver,
    OpenSubscriptions,
    produce_subscription,
    subscription_plan,
)
from horizon_broker.broker.subscribe.diff import CHANGE_COLUMN, INSERT, delta_schema
from horizon_broker.broker.subscribe.limits import STOPPING_MESSAGE, HeldPlace
from horizon_broker.broker.subscribe.live import KINDS
from horizon_broker.broker.subscribe.messages import read_ipc
from horizon_broker.broker.subscribe.stream import WAKE_S, ending_trailers

COMMAND = "subscribe"
FIELDS: dict[str, type] = {
    "command": str,
    "sql": str,
    "resume_token": str,
    "max_rows_per_message": int,
    "strategy": str,
}
"""The command's fields and their JSON types."""
PIPE = 2
"""Messages handed over and not yet written (as for Subscribe over gRPC)."""
SOURCE = "DoExchange"


def _command_object(descriptor: fl.FlightDescriptor) -> dict[str, Any]:
    if descriptor.descriptor_type != fl.DescriptorType.CMD:
        raise InvalidArgument(
            "DoExchange takes a command descriptor holding a JSON object, e.g. "
            '{"command": "subscribe", "sql": "SELECT ..."}; a path descriptor was sent'
        )
    try:
        body = json.loads(descriptor.command)
    except (UnicodeDecodeError, ValueError):
        raise InvalidArgument(
            'the DoExchange command is not JSON: send {"command": "subscribe", "sql": "..."}'
        ) from None
    if not isinstance(body, dict):
        raise InvalidArgument("the DoExchange command must be a JSON object")
    return body


def subscribe_request(descriptor: fl.FlightDescriptor) -> pb.SubscribeRequest:
    """The Subscribe request a DoExchange descriptor holds (INVALID_ARGUMENT naming what is
    wrong: not JSON, an unknown command or field, a field of the wrong type)."""
    body = _command_object(descriptor)
    if body.get("command") != COMMAND:
        raise InvalidArgument(
            f"unknown DoExchange command {body.get('command')!r}: Horizon's is "
            f'"{COMMAND}" ({{"command": "subscribe", "sql": "SELECT ..."}})'
        )
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise InvalidArgument(
            f"unknown field(s) {', '.join(unknown)} in the subscribe command; its fields are "
            f"{', '.join(FIELDS)}"
        )
    for name, value in body.items():
        wanted = FIELDS[name]
        if not isinstance(value, wanted) or isinstance(value, bool):
            raise InvalidArgument(
                f"{name} must be a JSON {'string' if wanted is str else 'integer'}, "
                f"got {json.dumps(value)}"
            )
    return pb.SubscribeRequest(**{name: value for name, value in body.items() if name != "command"})


def app_metadata(message: pb.SubscribeResponse) -> bytes:
    """What a Flight message says besides its rows (JSON)."""
    return json.dumps(
        {
            "kind": KINDS.get(message.kind, "unknown"),
            "strategy": message.strategy,
            "from_snapshot": message.from_snapshot,
            "to_snapshot": message.to_snapshot,
            "key_columns": list(message.key_columns),
            "row_count": message.row_count,
            "last_part": message.last_part,
            "resume_token": message.resume_token,
        }
    ).encode()


def flight_batch(message: pb.SubscribeResponse, schema: pa.Schema) -> pa.RecordBatch | None:
    """A message's rows in the stream's schema (a first result's as inserts); None: no rows
    (a resumed stream's header)."""
    if not message.arrow_ipc:
        return None
    rows = read_ipc(message.arrow_ipc)
    if CHANGE_COLUMN not in rows.column_names:
        kinds = pa.array([INSERT] * rows.num_rows, pa.string())
        rows = rows.add_column(0, CHANGE_COLUMN, kinds)
    rows = rows.select(schema.names).cast(schema).combine_chunks()
    return rows.to_batches()[0] if rows.num_rows else pa.RecordBatch.from_pylist([], schema)


class SubscriptionExchange:
    """DoExchange's subscriptions: each on a thread of its own, written as the client reads.

    A subscriber that does not read holds its handler thread while a write waits, and this
    cannot be helped: pyarrow's Flight server is synchronous (each call runs on one of gRPC's
    threads, and ``write_with_metadata`` blocks in C++ until the client's flow-control window
    takes the message), with neither a write timeout nor a way for the server to cancel a call.
    What it costs is bounded instead: the subscription itself (its queries, its Spark work) ends
    at the lag bound as over gRPC, and the identity's place in ``max_subscriptions_per_identity``
    is held by the handler (not by the subscription), so an identity holds at most that many
    handler threads, reading or not. The thread is free once the client reads, cancels, its call
    deadline passes or its connection goes."""

    def __init__(self, engine: QueryEngine, subscriptions: OpenSubscriptions) -> None:
        self.engine = engine
        self.subscriptions = subscriptions

    def serve(
        self, context: Any, principal: Principal, descriptor: fl.FlightDescriptor, writer: Any
    ) -> None:
        """One subscription until the client leaves or an error ends it (raised)."""
        plan = subscription_plan(subscribe_request(descriptor))
        prepared = self.engine.prepare(plan.sql, principal)  # grants, and the columns
        schema = delta_schema(self.engine.result_schema(prepared))
        pipe = HandOver(PIPE, self.engine.config.limits.subscription_max_lag_s)
        held = HeldPlace(self.subscriptions)
        args = (self.engine, principal, plan, pipe, held, SOURCE)
        with self.subscriptions.open(principal.name):  # until this handler thread is free
            threading.Thread(
                target=produce_subscription, args=args, name="horizon-flight-subscribe", daemon=True
            ).start()
            try:
                self._relay(context, pipe, writer, schema)
            finally:
                pipe.close()

    def _next(self, context: Any, pipe: HandOver) -> Any:
        """The next item of the subscription (None: the client left)."""
        while not context.is_cancelled():
            found, item = pipe.take(WAKE_S)
            if found:
                return item
            if self.subscriptions.stopping.is_set():
                return Unavailable(STOPPING_MESSAGE)
        return None

    def _relay(self, context: Any, pipe: HandOver, writer: Any, schema: pa.Schema) -> None:
        begun = False
        while True:
            item = self._next(context, pipe)
            if isinstance(item, BaseException):
                for name, value in ending_trailers(item, pipe):
                    context.add_trailer(name, value)
                raise item
            if not isinstance(item, pb.SubscribeResponse):
                return
            if not begun:  # an error before the first message comes without a schema
                writer.begin(schema)
                begun = True
            batch = flight_batch(item, schema)
            if batch is None:
                writer.write_metadata(pa.py_buffer(app_metadata(item)))
            else:
                writer.write_with_metadata(batch, pa.py_buffer(app_metadata(item)))


class SubscribeByExchange:
    """The Flight server's DoExchange (a mixin of
    :class:`~horizon_broker.broker.flight.server.FlightSqlServer`): subscriptions, counted with
    the main API's per identity once :meth:`share_subscriptions` joined them."""

    engine: QueryEngine
    _exchange: SubscriptionExchange | None = None

    def _principal(self, context: Any) -> Principal:
        raise NotImplementedError

    @property
    def exchange(self) -> SubscriptionExchange:
        if self._exchange is None:
            limits = self.engine.config.limits
            own = OpenSubscriptions(lambda: limits.max_subscriptions_per_identity)
            self._exchange = SubscriptionExchange(self.engine, own)
        return self._exchange

    def share_subscriptions(self, subscriptions: OpenSubscriptions) -> None:
        """Count this door's subscriptions with ``subscriptions`` (the gRPC service's)."""
        self._exchange = SubscriptionExchange(self.engine, subscriptions)

    def end_subscriptions(self) -> None:
        """The server stops: every stream ends with UNAVAILABLE saying to resume."""
        self.exchange.subscriptions.stopping.set()

    def do_exchange(
        self, context: Any, descriptor: fl.FlightDescriptor, reader: Any, writer: Any
    ) -> None:
        try:
            self.exchange.serve(context, self._principal(context), descriptor, writer)
        except Exception as error:
            raise flight_error(error, context) from None
