"""Building and running the broker: Spark, the Redis follower, the engine and the gRPC server.

The gRPC server carries Horizon's two services, standard health checking (``grpc.health.v1``) and
server reflection when ``[server] reflection = true`` (so ``grpcurl`` works without the .proto
files; off by default, as reflection answers without a token). It is an asyncio server on a
thread of its own: health checks are answered on the loop whatever the queries do, and every call
that may wait runs on its own thread (:mod:`horizon_broker.broker.api.offload`). Plaintext is served only on a loopback address unless explicitly
allowed; with a certificate and key configured it serves TLS (and mutual TLS with a client CA).
A broker reachable from other machines needs identities (``[[tokens]]``) unless
``allow_anonymous`` says it may serve anyone. Health says NOT_SERVING while the state store is
stale past its limit or the Spark engine is down (:mod:`horizon_broker.broker.spark.supervisor` restarts it).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from contextlib import ExitStack
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2_grpc as rpc
from horizon_broker.broker.api.auth import Authenticator
from horizon_broker.broker.api.inspection import Inspection
from horizon_broker.broker.api.inspection_service import InspectionServicer
from horizon_broker.broker.api.listen import bind, check_listen_policy
from horizon_broker.broker.api.offload import Offload
from horizon_broker.broker.api.query_service import QueryServicer
from horizon_broker.broker.api.startup import BackgroundStart, StartingDoor, StartupClock
from horizon_broker.broker.api.view_keeper import start_view_keeper
from horizon_broker.broker.api.warm_up import start_warm_up
from horizon_broker.broker.config import BrokerConfig, parse_listen
from horizon_broker.broker.direct_lookup.reading import files_readable
from horizon_broker.broker.engine import QueryEngine
from horizon_broker.broker.engine.floor import SnapshotFloor
from horizon_broker.broker.observe.wiring import BrokerObserver
from horizon_broker.broker.spark.session_conf import spark_conf
from horizon_broker.broker.spark.supervisor import SparkSupervisor

log = logging.getLogger("horizon.broker.api.server")

SERVICE_NAMES = tuple(service.full_name for service in pb.DESCRIPTOR.services_by_name.values())
QUERY_METHODS = [method.name for method in pb.DESCRIPTOR.services_by_name["QueryService"].methods]
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
_MAX_MESSAGE_BYTES = 8 * 1024 * 1024


class BrokerServer:
    """One running broker. Pass ``spark`` and/or ``follower`` to reuse existing ones (tests);
    brokers sharing one Spark session need distinct ``view_namespace`` values. A session the
    broker did not create is never replaced: its death is only reported."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        spark: Any = None,
        follower: Any = None,
        functions: Any = None,
        view_namespace: str = "",
    ) -> None:
        self.config = config
        self._view_namespace = view_namespace
        self._given_spark = spark
        self._owns_spark = spark is None
        self._follower = follower
        self._functions = functions
        self._server: grpc.aio.Server | None = None
        self._health: Any = None
        self._query_door: StartingDoor | None = None
        self.startup = StartupClock()
        """When each part was ready, from the start of :meth:`start`."""
        self._subscriptions: Any = None
        """The query service's open subscriptions, ended (UNAVAILABLE) before the server stops."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self.engine: QueryEngine | None = None
        self.inspection: Inspection | None = None
        self.supervisor: SparkSupervisor | None = None
        self.offload: Offload | None = None
        self.port: int = 0
        self._stopped = threading.Event()
        self._serving = True
        self._locks: Any = None
        self._pins: Any = None
        self._floor_redis: Any = None
        self._parts = ExitStack()
        """What :meth:`start` started, each with how to stop it; :meth:`stop` unwinds it."""
        self._stop_grace_s = config.server.grace_s
        self.flight: Any = None
        """The Arrow Flight SQL endpoint (:mod:`horizon_broker.broker.flight`), when ``[flight]`` enables it."""
        self.observer: BrokerObserver | None = None
        self.console: Any = None
        """The web console (:mod:`horizon_broker.broker.console`), when ``[console]`` turns it on."""
        """Metrics endpoint, query log and state watcher (:mod:`horizon_broker.broker.observe`)."""

    # -- lifecycle -----------------------------------------------------------------------------
    #
    # Each part is entered into one ExitStack as it starts (a callback that stops it), so a
    # failure half-way through stops exactly what was started, in reverse order, and stop()
    # unwinds the same stack: every part is stopped once, the last started first.

    def start(self) -> BrokerServer:
        """Start every part, or none: a part that fails to start stops those before it, then
        its error is raised. Inspection and health answer once the state is loaded (Spark
        starts in the background meanwhile); queries wait for the engine (:mod:`.startup`)."""
        check_listen_policy(self.config)
        self.startup = StartupClock()
        parts = ExitStack()
        try:
            self._start_parts(parts)
        except BaseException:
            self._stopped.set()
            self._stop_grace_s = 0.0
            _unwind_after_failure(parts)
            raise
        self._parts = parts
        log.info("horizon broker listening on %s", self.target)
        log.info("horizon broker started: %s", self.startup.describe())
        return self

    def _start_parts(self, parts: ExitStack) -> None:
        clock = self.startup
        spark = self._start_spark(parts)  # in the background while the state loads
        self._start_follower(parts)
        clock.mark("state loaded")
        self._build_inspection(parts)
        self._start_grpc_server(parts)
        clock.mark("inspection answers")
        self._build_engine(parts, self._spark_ready(spark))
        self._open_queries()
        self._update_health()
        clock.mark("queries answer")
        self._start_flight(parts)
        self._start_supervisor(parts)
        self._start_observer(parts)
        self._start_console(parts)
        self._start_watchers()
        if self._owns_spark:  # a given session is warm already, and its views the caller's
            self._warm_up()
            if self.config.spark.keep_views_s > 0:
                start_view_keeper(self.engine, self.config.spark.keep_views_s, self._stopped)

    def _warm_up(self) -> None:
        """Read a row of every table on a new session of the broker's own, in the background
        (at the start, and after the supervisor replaced a session that died)."""
        if self.config.spark.warm_up and self.engine is not None:
            start_warm_up(self.engine, self._follower.tables(), self._stopped.is_set)

    def _start_follower(self, parts: ExitStack) -> None:
        """The Redis follower, unless one was given (it then stays the caller's to stop)."""
        if self._follower is not None:
            return
        from horizon_broker.watermark.follower import Follower

        state = self.config.state
        self._follower = Follower(
            state.redis_url,
            prefix=state.key_prefix,
            heartbeat_timeout_s=state.heartbeat_timeout_s,
            max_staleness_s=state.max_staleness_s,
            regression_policy=state.regression_policy,
        )
        self._follower.start()
        parts.callback(self._follower.stop)
        self._follower.wait_until_synced(state.sync_timeout_s)

    def _start_spark(self, parts: ExitStack) -> Any:
        """The given Spark session, or a new one started on a thread of its own that the broker
        stops (the one in use by then: the supervisor may have replaced it)."""
        if self._given_spark is not None:
            return self._given_spark
        starting = BackgroundStart(self._create_spark, "horizon-spark-start")

        def stop_spark() -> None:
            if self.engine is not None:
                self.engine.spark.stop()
            else:  # the start failed before the engine: stop the session when it is made
                starting.discard(lambda spark: spark.stop())

        parts.callback(stop_spark)
        return starting

    def _spark_ready(self, spark: Any) -> Any:
        if isinstance(spark, BackgroundStart):
            spark = spark.result()
            self.startup.mark("spark up")
        return spark

    def _build_engine(self, parts: ExitStack, spark: Any) -> None:
        """The query engine with its pin store and read floor, and the supervisor (not yet
        watching) that gives it a new Spark session when one dies. The gRPC server, already
        answering inspection, is stopped again first: running queries finish on the engine."""
        floor = self._floor()
        if self._floor_redis is not None:
            parts.callback(self._floor_redis.close)
        self.engine = QueryEngine(
            self._follower,
            spark,
            self.config,
            functions=self._functions,
            view_namespace=self._view_namespace,
            pins=self._pins,
            floor=floor,
        )
        parts.callback(self._clear_views)
        self.supervisor = SparkSupervisor(
            spark,
            create=self._create_spark if self._owns_spark else None,
            probe_interval_s=self.config.spark.probe_interval_s,
            probe_timeout_s=self.config.spark.probe_timeout_s,
            on_restart=self.engine.use_spark,
            on_answering=self._warm_up,
        )
        self.engine.supervisor = self.supervisor
        self._follower.add_preparer(self.engine.direct.prepare)
        parts.callback(self._follower.remove_preparer, self.engine.direct.prepare)
        parts.callback(self._stop_grpc)

    def _clear_views(self) -> None:
        """Drop this broker's views (those of the session in use: a restart makes new ones)."""
        if self.engine is not None:
            self.engine.views.clear()

    def _build_inspection(self, parts: ExitStack) -> None:
        locks = self._lock_client()
        parts.callback(locks.close)
        parts.callback(self._pin_store().close)
        self.inspection = Inspection(
            self.engine,  # None until Spark is up: attached by _open_queries
            self._follower,
            regression_policy=self.config.state.regression_policy,
            locks=locks,
            pins=self._pins,
        )
        limits = self.config.limits
        self.offload = Offload(limits.max_concurrent + limits.queue_size + limits.max_waiting)

    def _open_queries(self) -> None:
        """The engine is built: the query service and inspection's engine calls go through."""
        assert self.engine is not None and self.inspection is not None
        self.inspection.attach_engine(self.engine)
        queries = QueryServicer(self.engine, Authenticator(self.config.tokens), self.offload)
        self._subscriptions = queries.subscriptions
        assert self._query_door is not None
        self._query_door.open(queries)

    def _start_grpc_server(self, parts: ExitStack) -> None:
        """The gRPC server, on an asyncio loop in a thread of its own."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._loop_thread = threading.Thread(
            target=loop.run_forever, name="horizon-grpc", daemon=True
        )
        self._loop_thread.start()
        parts.callback(self._stop_loop)
        asyncio.run_coroutine_threadsafe(self._start_grpc(), loop).result()
        parts.callback(self._stop_grpc)

    def _stop_grpc(self) -> None:
        """Health says NOT_SERVING, then running calls have the grace period to finish."""
        server, self._server = self._server, None  # once: it is on the stack twice
        if self._loop is None or server is None:
            return
        grace_s = self._stop_grace_s
        asyncio.run_coroutine_threadsafe(self._shutdown(server, grace_s), self._loop).result(
            timeout=grace_s + 30
        )

    def _start_flight(self, parts: ExitStack) -> None:
        if not self.config.flight.enabled:
            return
        from horizon_broker.broker.flight.server import start_flight_server

        assert self.engine is not None
        self.flight = start_flight_server(self.config, self.engine)
        if self._subscriptions is not None:  # one per-identity count for both doors
            self.flight.share_subscriptions(self._subscriptions)
        parts.callback(lambda: self.flight.stop(self._stop_grace_s))

    def _start_supervisor(self, parts: ExitStack) -> None:
        assert self.supervisor is not None
        self.supervisor.start()
        parts.callback(self.supervisor.stop)

    def _start_observer(self, parts: ExitStack) -> None:
        """Metrics endpoint, query log and state watcher; they read the parts when asked."""
        self.observer = BrokerObserver(
            self.config,
            follower=self._follower,
            engine=lambda: self.engine,
            supervisor=lambda: self.supervisor,
            pins=lambda: self._pins,
            locks=lambda: self._locks,
        ).start()
        parts.callback(self.observer.stop)

    def _start_console(self, parts: ExitStack) -> None:
        from horizon_broker.broker.console.server import ConsoleServer, console_wanted

        if not console_wanted(self.config):
            return
        assert self.inspection is not None
        self.console = ConsoleServer(
            self.config, self.inspection, self.engine, self._subscriptions, self.offload
        ).start()
        parts.callback(self.console.stop)

    def _start_watchers(self) -> None:
        """Health and unreadable-segment watchers: they end when ``_stopped`` is set."""
        threading.Thread(target=self._watch_health, name="horizon-health", daemon=True).start()
        threading.Thread(
            target=self._recheck_unreadable, name="horizon-unreadable", daemon=True
        ).start()

    def _create_spark(self) -> Any:
        from horizon_broker._core.spark_session import create_spark_session

        spark_config = self.config.spark
        return create_spark_session(
            master=spark_config.master,
            remote=spark_config.remote,
            app_name=spark_config.app_name,
            conf=spark_conf(self.config),
        )

    async def _start_grpc(self) -> None:
        assert self.offload is not None and self._loop is not None
        server = grpc.aio.server(
            options=[
                ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
            ],
        )
        auth = Authenticator(self.config.tokens)
        self._query_door = StartingDoor(QUERY_METHODS, self._loop)
        rpc.add_QueryServiceServicer_to_server(self._query_door, server)
        rpc.add_InspectionServiceServicer_to_server(
            InspectionServicer(self.inspection, auth, self.offload), server
        )
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        self._serving = self.serving()  # NOT_SERVING until queries can run
        status = health_pb2.HealthCheckResponse.SERVING if self._serving else _NOT_SERVING
        for name in ("", *SERVICE_NAMES):
            await self._health.set(name, status)
        if self.config.server.reflection:
            reflection.enable_server_reflection(
                (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
            )
        self.port = bind(server, self.config)
        await server.start()
        self._server = server

    def _lock_client(self) -> Any:
        """Reads the lock service for inspection; a short retry so an outage answers quickly."""
        from horizon_broker.locks.client import LockClient

        state = self.config.state
        self._locks = LockClient(state.redis_url, prefix=state.key_prefix, retry_timeout_s=1.0)
        return self._locks

    def _pin_store(self) -> Any:
        """Snapshot pins live in the state store beside the locks (:mod:`pins`)."""
        from horizon_broker.pins.store import PinQuota, PinStore

        state = self.config.state
        reads = self.config.reads
        self._pins = PinStore(
            state.redis_url,
            prefix=state.key_prefix,
            retry_timeout_s=1.0,
            quota=PinQuota(
                reads.max_pins_per_identity, reads.max_pin_lease_total_s, reads.min_pin_lease_s
            ),
        )
        return self._pins

    def _floor(self) -> SnapshotFloor:
        state = self.config.state
        if not self.config.reads.persist_floor:
            return SnapshotFloor(None, prefix=state.key_prefix)
        from horizon_broker._core.redis_calls import connect

        # A short timeout: recording the floor is on the query path, and a paused Redis must
        # not hold queries (the floor is recorded again by the next query that moves it).
        self._floor_redis = connect(state.redis_url, socket_timeout=0.5)
        return SnapshotFloor(self._floor_redis, prefix=state.key_prefix)

    def _recheck_unreadable(self) -> None:
        """Give segments found unreadable another chance: one whose files all read again (or,
        off this machine's file system, whose mark is older than the interval) is visible again;
        if it is still bad, the next query that reads it marks it again and falls back."""
        interval = self.config.state.unreadable_recheck_s
        while not self._stopped.wait(interval):
            for segment, mark in self._follower.unreadable():
                if mark.refused:
                    continue
                try:
                    readable = files_readable(segment.location)
                except Exception:  # a check that cannot run leaves the mark as it is
                    log.exception("could not recheck segment %s", segment.id)
                    continue
                if readable:
                    log.info("segment %s is readable again (was: %s)", segment.id, mark.reason)
                    self._follower.clear_unreadable(segment.id)
                else:
                    self._follower.still_unreadable(segment.id)

    def serving(self) -> bool:
        """What health says: the state is fresh enough to serve and the Spark engine is up."""
        try:
            fresh = self._follower.staleness_s() <= self.config.state.max_staleness_s
        except Exception:
            fresh = False
        return fresh and self.engine is not None and (self.supervisor is None or self.supervisor.up)

    def _watch_health(self) -> None:
        """Report NOT_SERVING while queries would fail (stale state, or no Spark engine)."""
        while not self._stopped.wait(0.25):
            self._update_health()

    def _update_health(self) -> None:
        serving = self.serving()
        if serving == self._serving or self._health is None or self._loop is None:
            return
        status = health_pb2.HealthCheckResponse.SERVING if serving else _NOT_SERVING
        try:
            for name in ("", *SERVICE_NAMES):
                asyncio.run_coroutine_threadsafe(self._health.set(name, status), self._loop).result(
                    timeout=5
                )
        except Exception:  # the loop is stopping
            return
        log.warning("health: %s", "SERVING" if serving else "NOT_SERVING")
        self._serving = serving

    @property
    def target(self) -> str:
        host, _ = parse_listen(self.config.server.listen)
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    @property
    def flight_target(self) -> str:
        """``host:port`` of the Flight SQL endpoint ("" when it is off)."""
        if self.flight is None:
            return ""
        host, _ = parse_listen(self.config.flight.address(self.config.server.listen))
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return f"[{host}]:{self.flight.port}" if ":" in host else f"{host}:{self.flight.port}"

    @property
    def follower(self) -> Any:
        return self._follower

    @property
    def spark(self) -> Any:
        """The Spark session queries run on now (a new one after the engine was restarted)."""
        return self.engine.spark if self.engine is not None else self._given_spark

    def stop(self, grace: float | None = None) -> None:
        """Stop accepting calls, let running ones finish for ``grace`` seconds (default
        ``[server] grace_s``), release resources: the parts stop in the reverse of their start."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._stop_grace_s = self.config.server.grace_s if grace is None else grace
        parts, self._parts = self._parts, ExitStack()
        parts.close()

    async def _shutdown(self, server: grpc.aio.Server, grace_s: float) -> None:
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        if self._subscriptions is not None:
            await self._subscriptions.end_all(grace_s)
        await server.stop(grace_s)

    def _stop_loop(self) -> None:
        if self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._loop_thread is not None:
            self._loop_thread.join(timeout=10)
        self._loop = None

    def wait(self) -> None:
        """Block until the server stops."""
        self._stopped.wait()

    def __enter__(self) -> BrokerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _unwind_after_failure(parts: ExitStack) -> None:
    """Stop what a failed start started; an error while stopping is logged, so the start's own
    error is the one raised."""
    try:
        parts.close()
    except Exception:
        log.exception("stopping the parts started before the broker failed to start")
