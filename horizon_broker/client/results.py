"""A query's answer and the running call that produces it (started again on the next broker
when the one running it goes away before its last message)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import pyarrow as pa

from horizon_broker._core.errors import Cancelled, Internal
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker.api import arrow_ipc
from horizon_broker.broker.api.status import error_from_rpc

from .targets import Broker, Targets

_T = TypeVar("_T")


def translate(call: Callable[[], _T]) -> _T:
    """``call()`` with a failed RPC raised as its Horizon error type."""
    try:
        return call()
    except grpc.RpcError as error:
        raise error_from_rpc(error) from None


@dataclass(frozen=True, slots=True)
class QueryResult:
    """A query's rows with the broker's metadata (snapshot, tables read) and timings."""

    table: pa.Table
    metadata: pb.QueryMetadata
    trailer: pb.QueryTrailer

    @property
    def snapshot(self) -> int | None:
        return self.metadata.snapshot if self.metadata.HasField("snapshot") else None


class QueryCall:
    """A running ExecuteQuery call: ``result()`` waits for it, ``cancel()`` stops it.

    A query is a read: when its broker goes away before the last message (UNAVAILABLE), the
    whole query runs again on the next broker and the partial answer is dropped."""

    def __init__(
        self,
        start: Callable[[Broker], Any],
        targets: Targets,
        on_metadata: Callable[[pb.QueryMetadata], None],
    ) -> None:
        self._start = start
        self._targets = targets
        self._broker = targets.current
        self._call = start(self._broker)
        self._cancelled = False
        self._lock = threading.Lock()
        self._on_metadata = on_metadata

    @property
    def address(self) -> str:
        """The broker running (or that ran) the query."""
        return self._broker.address

    def cancel(self) -> bool:
        self._cancelled = True
        return bool(self._call.cancel())

    def result(self) -> QueryResult:
        with self._lock:
            messages = self._targets.run(self._messages, first=self._broker)
        header: pb.QueryHeader | None = None
        trailer: pb.QueryTrailer | None = None
        batches: list[bytes] = []
        for message in messages:
            kind = message.WhichOneof("kind")
            if kind == "header":
                header = message.header
            elif kind == "batch":
                batches.append(message.batch.data)
            elif kind == "trailer":
                trailer = message.trailer
        if header is None or trailer is None:
            raise Internal("the broker ended the result stream without a header or trailer")
        self._on_metadata(header.metadata)
        schema = arrow_ipc.decode_schema(header.arrow_schema)
        return QueryResult(arrow_ipc.decode_batches(schema, batches), header.metadata, trailer)

    def _messages(self, broker: Broker) -> list[Any]:
        if broker is not self._broker:  # the first broker went away: start over on this one
            if self._cancelled:
                raise Cancelled("the query was cancelled")
            self._broker, self._call = broker, self._start(broker)
        return translate(lambda: list(self._call))
