"""The client of one or several brokers: queries, subscriptions, pins and inspection."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import grpc
import pyarrow as pa
from grpc_health.v1 import health_pb2

from horizon_broker._core.errors import HorizonError, ResourceExhausted, Unavailable
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker.api.status import error_from_rpc
from horizon_broker.broker.subscribe.handover import RESUME_TOKEN_TRAILER
from horizon_broker.broker.subscribe.live import LiveResult, SubscriptionMessage
from horizon_broker.timeline.interval import Interval
from horizon_broker.watermark import tokens

from .pinned import PinnedSnapshot, register_passthrough_views
from .results import QueryCall, QueryResult, translate
from .targets import CONNECT_TIMEOUT_S, Broker, Targets, says_broker_gone

RECONNECT_PAUSE_S = 1.0
"""How long :meth:`HorizonClient.follow` waits before it subscribes again."""


def _says_resume(error: Exception, live: LiveResult) -> bool:
    """Whether a stream's end asks to subscribe again from its token: the broker stopped or
    went away (UNAVAILABLE), or ended a subscriber that fell behind (a token with it)."""
    if not live.resume_token:
        return False
    return isinstance(error, Unavailable) or bool(getattr(error, "resume_token", ""))


class HorizonClient:
    """A connection to one broker or several (see the package's docstring). Thread-safe; close
    it (or use ``with``) when done."""

    def __init__(
        self,
        channels: grpc.Channel | Sequence[grpc.Channel],
        *,
        token: str | None = None,
        timeout: float | None = None,
        monotonic: bool = True,
        addresses: Sequence[str] = (),
        connect_timeout: float = CONNECT_TIMEOUT_S,
    ) -> None:
        given = [channels] if isinstance(channels, grpc.Channel) else list(channels)
        names = list(addresses) or [f"broker {number + 1}" for number in range(len(given))]
        self._targets = Targets(
            [Broker(name, channel) for name, channel in zip(names, given, strict=True)],
            connect_timeout_s=connect_timeout,
        )
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout = timeout
        self.monotonic = monotonic
        """Send :attr:`session_token` with every query (monotonic reads)."""
        self.session_token = ""
        """The highest snapshot of each table this client was served, as a snapshot token;
        hand it to another client (``session_token=``) to carry monotonic reads over."""
        self._token_lock = threading.Lock()

    @property
    def addresses(self) -> list[str]:
        """The brokers this client may call, in the order it tries them."""
        return [broker.address for broker in self._targets.brokers]

    @property
    def current(self) -> str:
        """The broker the next call goes to first (it moves when one goes away)."""
        return self._targets.current.address

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

        def start(broker: Broker) -> Any:
            # The read options are built once: a query run again elsewhere asks for the same.
            return broker.query.ExecuteQuery(
                request, timeout=timeout or self._timeout, metadata=self._metadata
            )

        return QueryCall(start, self._targets, self._saw)

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
        ``resume_token``: the last one the broker sent. A broker that goes away before the
        first message is replaced by the next one; later, the error ends the stream (``follow``
        with ``reconnects`` subscribes again, on the next broker, from the last token)."""
        request = pb.SubscribeRequest(
            sql=sql,
            resume_token=resume_token,
            max_rows_per_message=max_rows_per_message,
            strategy=strategy,
        )
        brokers = self._targets.in_order()
        for number, broker in enumerate(brokers):
            delivered = 0
            try:
                for message in self._subscription(broker, request, timeout):
                    delivered += 1
                    yield message
                return
            except HorizonError as failure:
                gone = says_broker_gone(failure, broker)
                if gone:
                    self._targets.leave(broker)
                if not (gone and delivered == 0 and number + 1 < len(brokers)):
                    raise
                # nothing arrived from a broker that is gone: the same request to the next one

    def _subscription(
        self, broker: Broker, request: pb.SubscribeRequest, timeout: float | None
    ) -> Iterator[SubscriptionMessage]:
        call = broker.query.Subscribe(request, timeout=timeout, metadata=self._metadata)
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
        response = self._unary(lambda broker: broker.query.ExplainQuery, request)
        self._saw(response.metadata)
        return response

    def rewrite(self, sql: str, *, pin_lease: float = 0.0, **read: Any) -> pb.RewriteQueryResponse:
        """The passthrough plan of ``sql``; with ``pin_lease`` (seconds) the broker also pins the
        snapshot it reads, so its files stay readable that long (``response.pin``; release it
        with :meth:`release_pin` when done)."""
        request = pb.RewriteQueryRequest(
            sql=sql, read=self._read_options(**read), pin_lease_seconds=pin_lease
        )
        response = self._unary(
            lambda broker: broker.query.RewriteQuery, request, once=pin_lease > 0
        )
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
        response = self._unary(lambda broker: broker.query.PinSnapshot, request, once=True)
        return PinnedSnapshot(self, response.pin, lease if renew else None)

    def renew_pin(self, pin_id: str, *, lease: float = 300.0) -> pb.SnapshotPin:
        request = pb.PinSnapshotRequest(renew_pin_id=pin_id, lease_seconds=lease)
        return self._unary(lambda broker: broker.query.PinSnapshot, request).pin

    def release_pin(self, pin_id: str) -> bool:
        """Stop holding ``pin_id``; False when it had already expired or been released (also
        when a broker released it and went away before answering, and the next one answered)."""
        request = pb.ReleaseSnapshotRequest(pin_id=pin_id)
        return self._unary(lambda broker: broker.query.ReleaseSnapshot, request).released

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
        return list(
            self._unary(lambda broker: broker.inspect.ListTables, pb.ListTablesRequest()).tables
        )

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
        return self._unary(lambda broker: broker.inspect.GetTimeline, request)

    def watermarks(self, table: str) -> pb.GetWatermarksResponse:
        return self._unary(
            lambda broker: broker.inspect.GetWatermarks, pb.GetWatermarksRequest(table=table)
        )

    def explain_key(
        self, table: str, key: Any, *, at: str | int | None = None
    ) -> pb.ExplainKeyResponse:
        """Why ``key``'s row is (not) in ``table`` at the snapshot a query reads now, or ``at``
        (an HLC or a snapshot token): every stored version of the key and its verdict. ``key``:
        the value of a one-column key, or a dict by key column or a list in primary-key order
        (sent as JSON)."""
        text = key if isinstance(key, str) else json.dumps(key, default=str)
        request = pb.ExplainKeyRequest(table=table, key=text, at="" if at is None else str(at))
        return self._unary(lambda broker: broker.inspect.ExplainKey, request)

    def locks(self, table: str = "") -> pb.ListLocksResponse:
        """The locks held on ``table`` (every table you may inspect when empty)."""
        return self._unary(
            lambda broker: broker.inspect.ListLocks, pb.ListLocksRequest(table=table)
        )

    def queries(self, *, running_only: bool = False, limit: int = 0) -> list[pb.QueryInfo]:
        """The broker's running queries and its last finished ones, newest first."""
        request = pb.ListQueriesRequest(running_only=running_only, limit=limit)
        return list(self._unary(lambda broker: broker.inspect.ListQueries, request).queries)

    def health(self, service: str = "") -> str:
        """The broker's health status name (``SERVING``, ``NOT_SERVING``...)."""
        reply = self._unary(
            lambda broker: broker.health.Check,
            health_pb2.HealthCheckRequest(service=service),
            auth=False,
        )
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))

    # -- plumbing ------------------------------------------------------------------------------

    def _unary(
        self,
        method: Callable[[Broker], Any],
        request: Any,
        *,
        auth: bool = True,
        once: bool = False,
    ) -> Any:
        """One unary call: a read fails over to the next broker; with ``once`` (a call that
        creates something) it is sent to one broker at most once."""
        metadata = self._metadata if auth else ()

        def attempt(broker: Broker) -> Any:
            call = method(broker)
            return translate(lambda: call(request, timeout=self._timeout, metadata=metadata))

        return self._targets.run_once(attempt) if once else self._targets.run(attempt)

    def close(self) -> None:
        self._targets.close()

    def __enter__(self) -> HorizonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
