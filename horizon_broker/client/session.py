"""Python client of the Horizon broker.

    from horizon_broker.client import connect
    with connect("127.0.0.1:50051", token="s3cret") as horizon:
        table = horizon.query("SELECT * FROM accounts WHERE id = 7")   # pyarrow.Table
        horizon.explain("SELECT ...").rewritten_sql
        frame = horizon.passthrough(my_spark, "SELECT ...")            # runs on *your* Spark

Read controls (each optional, on ``execute``/``query``/``explain``/``rewrite``)::

    batch = server.run_batch("orders", frame)                         # ingestion
    horizon.query("SELECT ...", min_snapshot=batch.token)             # read-your-writes
    horizon.query("SELECT ...", min_snapshot=[a.token, b.token])      # several (or server.token())
    horizon.query("SELECT ...", max_staleness=5.0)                    # refuse older than 5 s
    with horizon.pin(["accounts", "orders"], lease=600) as cut:       # one cut for a report
        cut.query("SELECT ..."); cut.query("SELECT ...")
    horizon.query("SELECT ...", cache=False)                          # skip the result cache

Monotonic reads are automatic: the client remembers the highest snapshot of each table it has
been served (:attr:`HorizonClient.session_token`) and sends it with every query, so no broker,
restarted or another one behind a load balancer, serves it an older default snapshot.

Failed calls raise the Horizon error type matching the status code (``NotFound``,
``PermissionDenied``, ...), all subclasses of :class:`horizon_broker._core.errors.HorizonError`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pyarrow as pa
from grpc_health.v1 import health_pb2, health_pb2_grpc

from horizon_broker._core.errors import Internal, ResourceExhausted, Unavailable
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2_grpc as rpc
from horizon_broker.broker.api import arrow_ipc
from horizon_broker.broker.api.status import error_from_rpc
from horizon_broker.broker.subscribe.handover import RESUME_TOKEN_TRAILER
from horizon_broker.broker.subscribe.live import LiveResult, SubscriptionMessage
from horizon_broker.timeline.interval import Interval
from horizon_broker.watermark import tokens

_T = TypeVar("_T")
_MAX_MESSAGE_BYTES = 8 * 1024 * 1024
RECONNECT_PAUSE_S = 1.0
"""How long :meth:`HorizonClient.follow` waits before it subscribes again."""


def _says_resume(error: Exception, live: LiveResult) -> bool:
    """Whether a stream's end asks to subscribe again from its token: the broker stopped or
    went away (UNAVAILABLE), or ended a subscriber that fell behind (a token with it)."""
    if not live.resume_token:
        return False
    return isinstance(error, Unavailable) or bool(getattr(error, "resume_token", ""))


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

    def __init__(self, call: Any, on_metadata: Callable[[pb.QueryMetadata], None]) -> None:
        self._call = call
        self._lock = threading.Lock()
        self._on_metadata = on_metadata

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
        self._on_metadata(header.metadata)
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
        self,
        channel: grpc.Channel,
        *,
        token: str | None = None,
        timeout: float | None = None,
        monotonic: bool = True,
    ) -> None:
        self._channel = channel
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout = timeout
        self._query = rpc.QueryServiceStub(channel)
        self._inspect = rpc.InspectionServiceStub(channel)
        self._health = health_pb2_grpc.HealthStub(channel)
        self.monotonic = monotonic
        """Send :attr:`session_token` with every query (monotonic reads)."""
        self.session_token = ""
        """The highest snapshot of each table this client was served, as a snapshot token;
        hand it to another client (``session_token=``) to carry monotonic reads over."""
        self._token_lock = threading.Lock()

    # -- queries -------------------------------------------------------------------------------

    def start_query(
        self,
        sql: str,
        *,
        max_rows: int = 0,
        query_id: str = "",
        timeout: float | None = None,
        **read: Any,
    ) -> QueryCall:
        """Send a query and return at once; the broker starts running it. ``read`` are the read
        controls: ``min_snapshot`` (a token, or a list of them), ``max_staleness`` (seconds), ``pin`` (a
        :class:`PinnedSnapshot` or pin id), ``cache`` (False skips the result cache)."""
        request = pb.ExecuteQueryRequest(
            sql=sql, max_rows=max_rows, query_id=query_id, read=self._read_options(**read)
        )
        call = self._query.ExecuteQuery(
            request, timeout=timeout or self._timeout, metadata=self._metadata
        )
        return QueryCall(call, self._saw)

    def _read_options(
        self,
        *,
        min_snapshot: str | Sequence[str] = "",
        max_staleness: float | None = None,
        pin: PinnedSnapshot | str | None = None,
        cache: bool = True,
    ) -> pb.ReadOptions:
        given = [min_snapshot] if isinstance(min_snapshot, str) else list(min_snapshot)
        wanted = tokens.merge(*given, self.session_token if self.monotonic else "")
        return pb.ReadOptions(
            min_snapshot=wanted,
            max_staleness_seconds=float(max_staleness or 0.0),
            pin_id=pin.pin_id if isinstance(pin, PinnedSnapshot) else (pin or ""),
            bypass_cache=not cache,
        )

    def _saw(self, metadata: pb.QueryMetadata) -> None:
        if metadata.snapshot_token:
            with self._token_lock:
                self.session_token = tokens.merge(self.session_token, metadata.snapshot_token)

    def execute(self, sql: str, **options: Any) -> QueryResult:
        """Run ``sql``; the rows with the query's metadata and timings."""
        return self.start_query(sql, **options).result()

    def query(self, sql: str, **options: Any) -> pa.Table:
        """Run ``sql`` and return its rows as a ``pyarrow.Table``."""
        return self.execute(sql, **options).table

    def subscribe(
        self,
        sql: str,
        *,
        resume_token: str = "",
        max_rows_per_message: int = 0,
        strategy: str = "",
        timeout: float | None = None,
    ) -> Iterator[SubscriptionMessage]:
        """A standing query: its first result (nothing when resuming from ``resume_token``),
        then its changes each time its tables move, until the iterator is closed.
        ``strategy`` forces how the deltas are computed ("exact_diff", "change_feed",
        "changed_groups"; empty: the broker's choice). An error that ends the stream carries
        ``resume_token``: the last one the broker sent."""
        request = pb.SubscribeRequest(
            sql=sql,
            resume_token=resume_token,
            max_rows_per_message=max_rows_per_message,
            strategy=strategy,
        )
        call = self._query.Subscribe(request, timeout=timeout, metadata=self._metadata)
        try:
            for message in call:
                yield SubscriptionMessage.from_proto(message)
        except grpc.RpcError as error:
            failure = error_from_rpc(error)
            trailers = dict(error.trailing_metadata() or ()) if hasattr(error, "code") else {}
            failure.resume_token = trailers.get(RESUME_TOKEN_TRAILER, "")  # type: ignore[attr-defined]
            raise failure from None
        finally:
            call.cancel()

    def follow(
        self,
        sql: str,
        *,
        live: LiveResult | None = None,
        reconnects: int = 0,
        **options: Any,
    ) -> Iterator[LiveResult]:
        """``sql``'s answer kept up to date: yields ``live`` (a :class:`LiveResult`: ``table``,
        ``to_pandas()``, ``snapshot``, ``token``, ``changes``) after each step; pass the same
        ``live`` again to resume where it stood. With ``reconnects``, a stream the broker ends
        saying to resume (it stopped: UNAVAILABLE; the subscriber fell behind:
        RESOURCE_EXHAUSTED with a resume token) is subscribed again from ``live.token`` up to
        that many times in a row, a second apart."""
        live = live if live is not None else LiveResult()
        left = reconnects
        while True:
            try:
                for message in self.subscribe(sql, resume_token=live.resume_token, **options):
                    if live.apply(message) and message.kind != "resumed":  # a new answer
                        left = reconnects
                        yield live
                return
            except (Unavailable, ResourceExhausted) as error:
                if left <= 0 or not _says_resume(error, live):
                    raise
                left -= 1
                time.sleep(RECONNECT_PAUSE_S)

    def explain(
        self, sql: str, *, include_spark_plan: bool = False, **read: Any
    ) -> pb.ExplainQueryResponse:
        request = pb.ExplainQueryRequest(
            sql=sql, include_spark_plan=include_spark_plan, read=self._read_options(**read)
        )
        response = self._unary(self._query.ExplainQuery, request)
        self._saw(response.metadata)
        return response

    def rewrite(self, sql: str, *, pin_lease: float = 0.0, **read: Any) -> pb.RewriteQueryResponse:
        """The passthrough plan of ``sql``; with ``pin_lease`` (seconds) the broker also pins the
        snapshot it reads, so its files stay readable that long (``response.pin``; release it
        with :meth:`release_pin` when done)."""
        request = pb.RewriteQueryRequest(
            sql=sql, read=self._read_options(**read), pin_lease_seconds=pin_lease
        )
        response = self._unary(self._query.RewriteQuery, request)
        self._saw(response.metadata)
        return response

    # -- snapshot pins -------------------------------------------------------------------------

    def pin(
        self,
        tables: Sequence[str] | str,
        *,
        snapshot: int | None = None,
        lease: float = 300.0,
        min_snapshot: str | Sequence[str] = "",
        renew: bool = True,
    ) -> PinnedSnapshot:
        """Pin one snapshot of ``tables`` for ``lease`` seconds (default: their lowest LWM now).

        Use it as a context manager: queries through it read that one cut of every table, and it
        is released on exit. With ``renew`` a background thread renews the lease at a third of
        its length, so a report may run longer than the lease (a crashed client stops renewing,
        and the pin runs out by itself).
        """
        names = [tables] if isinstance(tables, str) else list(tables)
        request = pb.PinSnapshotRequest(
            tables=names,
            lease_seconds=lease,
            read=self._read_options(min_snapshot=min_snapshot),
        )
        if snapshot is not None:
            request.snapshot = snapshot
        response = self._unary(self._query.PinSnapshot, request)
        return PinnedSnapshot(self, response.pin, lease if renew else None)

    def renew_pin(self, pin_id: str, *, lease: float = 300.0) -> pb.SnapshotPin:
        request = pb.PinSnapshotRequest(renew_pin_id=pin_id, lease_seconds=lease)
        return self._unary(self._query.PinSnapshot, request).pin

    def release_pin(self, pin_id: str) -> bool:
        """Stop holding ``pin_id``; False when it had already expired or been released."""
        request = pb.ReleaseSnapshotRequest(pin_id=pin_id)
        return self._unary(self._query.ReleaseSnapshot, request).released

    def passthrough(self, spark: Any, sql: str) -> Any:
        """Run ``sql`` on the caller's own Spark session with the broker's rewrite.

        Registers a temp view per entry of the rewrite (one per substituted view: up to four
        for a table whose files are split by ``horizon_broker.broker.spark.scan_layout``) over the exact segment
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

    def explain_key(
        self, table: str, key: Any, *, at: str | int | None = None
    ) -> pb.ExplainKeyResponse:
        """Why ``key``'s row is (not) in ``table`` at the snapshot a query reads now, or ``at``
        (an HLC or a snapshot token): every stored version of the key and its verdict. ``key``:
        the value of a one-column key, or a dict by key column or a list in primary-key order
        (sent as JSON)."""
        text = key if isinstance(key, str) else json.dumps(key, default=str)
        request = pb.ExplainKeyRequest(table=table, key=text, at="" if at is None else str(at))
        return self._unary(self._inspect.ExplainKey, request)

    def locks(self, table: str = "") -> pb.ListLocksResponse:
        """The locks held on ``table`` (every table you may inspect when empty)."""
        return self._unary(self._inspect.ListLocks, pb.ListLocksRequest(table=table))

    def queries(self, *, running_only: bool = False, limit: int = 0) -> list[pb.QueryInfo]:
        """The broker's running queries and its last finished ones, newest first."""
        request = pb.ListQueriesRequest(running_only=running_only, limit=limit)
        return list(self._unary(self._inspect.ListQueries, request).queries)

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


class PinnedSnapshot:
    """A held snapshot pin: ``query``/``execute``/``explain``/``rewrite`` read at it."""

    def __init__(self, client: HorizonClient, pin: pb.SnapshotPin, renew_lease: float | None):
        self.client = client
        self.pin = pin
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self.renew_error: Exception | None = None
        """Why the background renewal stopped, if it failed (the pin may have run out)."""
        if renew_lease is not None:
            self._renewer = threading.Thread(
                target=self._keep_alive, args=(renew_lease,), name="horizon-pin", daemon=True
            )
            self._renewer.start()

    @property
    def pin_id(self) -> str:
        return self.pin.pin_id

    @property
    def snapshot(self) -> int:
        return self.pin.snapshot

    def execute(self, sql: str, **options: Any) -> QueryResult:
        return self.client.execute(sql, pin=self, **options)

    def query(self, sql: str, **options: Any) -> pa.Table:
        return self.client.query(sql, pin=self, **options)

    def explain(self, sql: str, **options: Any) -> pb.ExplainQueryResponse:
        return self.client.explain(sql, pin=self, **options)

    def rewrite(self, sql: str, **options: Any) -> pb.RewriteQueryResponse:
        return self.client.rewrite(sql, pin=self, **options)

    def renew(self, lease: float = 300.0) -> None:
        self.pin = self.client.renew_pin(self.pin_id, lease=lease)

    def release(self) -> bool:
        self._stop.set()
        if self._renewer is not None and self._renewer is not threading.current_thread():
            self._renewer.join(timeout=5)
        return self.client.release_pin(self.pin_id)

    def _keep_alive(self, lease: float) -> None:
        while not self._stop.wait(lease / 3):
            try:
                self.renew(lease)
            except Exception as error:  # reported through renew_error; the pin may be gone
                self.renew_error = error
                return

    def __enter__(self) -> PinnedSnapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


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
    client_certificate: tuple[str | Path | bytes, str | Path | bytes] | None = None,
    timeout: float | None = None,
    monotonic: bool = True,
    session_token: str = "",
) -> HorizonClient:
    """Open a client to the broker at ``target`` (``host:port``).

    ``tls`` (implied by ``root_certificates`` or ``client_certificate``) uses a secure channel;
    ``root_certificates`` is a PEM file or its bytes (system roots when omitted);
    ``client_certificate`` is ``(private key, certificate chain)`` for a broker that identifies
    callers by certificate (mutual TLS). ``session_token`` carries another client's monotonic
    reads over (its :attr:`HorizonClient.session_token`).
    """
    options = [
        ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
    ]
    if tls or root_certificates is not None or client_certificate is not None:
        key, chain = (
            (_pem(client_certificate[0]), _pem(client_certificate[1]))
            if client_certificate is not None
            else (None, None)
        )
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_pem(root_certificates), private_key=key, certificate_chain=chain
        )
        channel = grpc.secure_channel(target, credentials, options=options)
    else:
        channel = grpc.insecure_channel(target, options=options)
    client = HorizonClient(channel, token=token, timeout=timeout, monotonic=monotonic)
    client.session_token = tokens.merge(session_token)
    return client


def _pem(source: str | Path | bytes | None) -> bytes | None:
    """PEM bytes from a file path or the bytes themselves."""
    if source is None or isinstance(source, bytes):
        return source
    return Path(source).read_bytes()
