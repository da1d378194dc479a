"""Python client of the Horizon broker.

    from broker.client import connect
    with connect("127.0.0.1:50051", token="s3cret") as horizon:
        table = horizon.query("SELECT * FROM accounts WHERE id = 7")   # pyarrow.Table
        horizon.explain("SELECT ...").rewritten_sql
        frame = horizon.passthrough(my_spark, "SELECT ...")            # runs on *your* Spark

Failed calls raise the Horizon error type matching the status code (``NotFound``,
``PermissionDenied``, ...), all subclasses of :class:`timeline.errors.HorizonError`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pyarrow as pa
from grpc_health.v1 import health_pb2, health_pb2_grpc

from broker import arrow_ipc
from broker._proto.horizon.v1 import horizon_pb2 as pb
from broker._proto.horizon.v1 import horizon_pb2_grpc as rpc
from broker.errors import error_from_rpc
from timeline.errors import Internal
from timeline.interval import Interval

_T = TypeVar("_T")
_MAX_MESSAGE_BYTES = 8 * 1024 * 1024


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
    """A running ExecuteQuery call: ``result()`` waits for it, ``cancel()`` stops it."""

    def __init__(self, call: Any) -> None:
        self._call = call
        self._lock = threading.Lock()

    def cancel(self) -> bool:
        return bool(self._call.cancel())

    def result(self) -> QueryResult:
        header: pb.QueryHeader | None = None
        trailer: pb.QueryTrailer | None = None
        batches: list[bytes] = []
        with self._lock:
            for message in _translate(lambda: list(self._call)):
                kind = message.WhichOneof("kind")
                if kind == "header":
                    header = message.header
                elif kind == "batch":
                    batches.append(message.batch.data)
                elif kind == "trailer":
                    trailer = message.trailer
        if header is None or trailer is None:
            raise Internal("the broker ended the result stream without a header or trailer")
        schema = arrow_ipc.decode_schema(header.arrow_schema)
        return QueryResult(arrow_ipc.decode_batches(schema, batches), header.metadata, trailer)


def _translate(call: Callable[[], _T]) -> _T:
    try:
        return call()
    except grpc.RpcError as error:
        raise error_from_rpc(error) from None


class HorizonClient:
    """A connection to one broker. Thread-safe; close it (or use ``with``) when done."""

    def __init__(
        self, channel: grpc.Channel, *, token: str | None = None, timeout: float | None = None
    ) -> None:
        self._channel = channel
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout = timeout
        self._query = rpc.QueryServiceStub(channel)
        self._inspect = rpc.InspectionServiceStub(channel)
        self._health = health_pb2_grpc.HealthStub(channel)

    # -- queries -------------------------------------------------------------------------------

    def start_query(
        self,
        sql: str,
        *,
        max_rows: int = 0,
        query_id: str = "",
        timeout: float | None = None,
    ) -> QueryCall:
        """Send a query and return at once; the broker starts running it."""
        request = pb.ExecuteQueryRequest(sql=sql, max_rows=max_rows, query_id=query_id)
        call = self._query.ExecuteQuery(
            request, timeout=timeout or self._timeout, metadata=self._metadata
        )
        return QueryCall(call)

    def execute(self, sql: str, **options: Any) -> QueryResult:
        """Run ``sql``; the rows with the query's metadata and timings."""
        return self.start_query(sql, **options).result()

    def query(self, sql: str, **options: Any) -> pa.Table:
        """Run ``sql`` and return its rows as a ``pyarrow.Table``."""
        return self.execute(sql, **options).table

    def explain(self, sql: str, *, include_spark_plan: bool = False) -> pb.ExplainQueryResponse:
        request = pb.ExplainQueryRequest(sql=sql, include_spark_plan=include_spark_plan)
        return self._unary(self._query.ExplainQuery, request)

    def rewrite(self, sql: str) -> pb.RewriteQueryResponse:
        return self._unary(self._query.RewriteQuery, pb.RewriteQueryRequest(sql=sql))

    def passthrough(self, spark: Any, sql: str) -> Any:
        """Run ``sql`` on the caller's own Spark session with the broker's rewrite.

        Registers a temp view per entry of the rewrite (one per substituted view: up to four
        for a table whose files are split by ``broker.view_layout``) over the exact segment
        files the broker chose (with the table's explicit schema), then runs the rewritten SQL.
        Returns the DataFrame.
        """
        rewritten = self.rewrite(sql)
        register_passthrough_views(spark, rewritten)
        return spark.sql(rewritten.sql)

    # -- inspection ----------------------------------------------------------------------------

    def tables(self) -> list[pb.TableInfo]:
        return list(self._unary(self._inspect.ListTables, pb.ListTablesRequest()).tables)

    def timeline(
        self,
        table: str,
        *,
        interval: Interval | str | None = None,
        include_overshadowed: bool = False,
    ) -> pb.GetTimelineResponse:
        request = pb.GetTimelineRequest(table=table, include_overshadowed=include_overshadowed)
        if interval is not None:
            value = Interval.parse(interval) if isinstance(interval, str) else interval
            request.interval.start_ms = value.start_ms
            request.interval.end_ms = value.end_ms
        return self._unary(self._inspect.GetTimeline, request)

    def watermarks(self, table: str) -> pb.GetWatermarksResponse:
        return self._unary(self._inspect.GetWatermarks, pb.GetWatermarksRequest(table=table))

    def locks(self, table: str = "") -> pb.ListLocksResponse:
        """The locks held on ``table`` (every table you may inspect when empty)."""
        return self._unary(self._inspect.ListLocks, pb.ListLocksRequest(table=table))

    def health(self, service: str = "") -> str:
        """The broker's health status name (``SERVING``, ``NOT_SERVING``...)."""
        reply = self._unary(
            self._health.Check, health_pb2.HealthCheckRequest(service=service), auth=False
        )
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))

    # -- plumbing ------------------------------------------------------------------------------

    def _unary(self, method: Any, request: Any, *, auth: bool = True) -> Any:
        metadata = self._metadata if auth else ()
        return _translate(lambda: method(request, timeout=self._timeout, metadata=metadata))

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> HorizonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def register_passthrough_views(spark: Any, rewritten: pb.RewriteQueryResponse) -> list[str]:
    """Create the temp views a rewritten query reads, on ``spark``; returns their names.

    Each entry names one view and the files it must read; a table may have two entries."""
    names = []
    for table in rewritten.tables:
        if table.files:
            frame = spark.read.schema(table.schema_ddl).parquet(*table.files)
        else:
            frame = spark.createDataFrame([], table.schema_ddl)
        frame.createOrReplaceTempView(table.view)
        names.append(table.view)
    return names


def connect(
    target: str,
    token: str | None = None,
    *,
    tls: bool = False,
    root_certificates: str | Path | bytes | None = None,
    timeout: float | None = None,
) -> HorizonClient:
    """Open a client to the broker at ``target`` (``host:port``).

    ``tls`` (implied by ``root_certificates``) uses a secure channel; ``root_certificates`` is a
    PEM file or its bytes (system roots when omitted).
    """
    options = [
        ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
    ]
    if tls or root_certificates is not None:
        roots = root_certificates
        if isinstance(roots, (str, Path)):
            roots = Path(roots).read_bytes()
        credentials = grpc.ssl_channel_credentials(root_certificates=roots)
        channel = grpc.secure_channel(target, credentials, options=options)
    else:
        channel = grpc.insecure_channel(target, options=options)
    return HorizonClient(channel, token=token, timeout=timeout)
