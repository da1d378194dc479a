"""Building and running the broker: Spark, the Redis follower, the engine and the gRPC server.

The gRPC server carries Horizon's two services, standard health checking (``grpc.health.v1``) and
server reflection (so ``grpcurl`` works without the .proto files). Plaintext is served only on a
loopback address unless explicitly allowed; with a certificate and key configured it serves TLS.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
from collections.abc import Iterable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from broker._proto.horizon.v1 import horizon_pb2 as pb
from broker._proto.horizon.v1 import horizon_pb2_grpc as rpc
from broker.auth import Authenticator
from broker.config import BrokerConfig, parse_listen
from broker.engine import QueryEngine
from broker.reads.floor import SnapshotFloor
from broker.service import InspectionServicer, QueryServicer
from timeline.errors import FailedPrecondition, InvalidArgument, Unavailable

log = logging.getLogger("horizon.broker.server")

SERVICE_NAMES = tuple(service.full_name for service in pb.DESCRIPTOR.services_by_name.values())
_MAX_MESSAGE_BYTES = 8 * 1024 * 1024


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (``localhost``, 127/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return all(
                ipaddress.ip_address(info[4][0]).is_loopback
                for info in socket.getaddrinfo(host, None)
            )
        except OSError:
            return False


def files_readable(paths: Iterable[str]) -> bool:
    """Whether every file's Parquet footer reads (files off this machine's file system are
    assumed readable: the next query that reads them is the check)."""
    import pyarrow.parquet as pq

    from broker.views import is_local, local_path

    for path in paths:
        if not is_local(path):
            continue
        try:
            pq.read_metadata(local_path(path))
        except (OSError, ValueError):
            return False
    return True


def check_listen_policy(config: BrokerConfig) -> None:
    """Refuse plaintext on a reachable address unless the configuration allows it explicitly."""
    host, _ = parse_listen(config.server.listen)
    if config.server.tls or config.server.allow_insecure_remote or is_loopback(host):
        return
    raise FailedPrecondition(
        f"refusing to serve plaintext on {config.server.listen}: configure [server] tls_cert and "
        "tls_key, listen on a loopback address, or set allow_insecure_remote = true"
    )


class BrokerServer:
    """One running broker. Pass ``spark`` and/or ``follower`` to reuse existing ones (tests);
    brokers sharing one Spark session need distinct ``view_namespace`` values."""

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
        self._spark = spark
        self._owns_spark = spark is None
        self._follower = follower
        self._owns_follower = follower is None
        self._functions = functions
        self._server: grpc.Server | None = None
        self._health: health.HealthServicer | None = None
        self.engine: QueryEngine | None = None
        self.port: int = 0
        self._stopped = threading.Event()
        self._locks: Any = None
        self._pins: Any = None
        self._floor_redis: Any = None
        self.flight: Any = None
        """The Arrow Flight SQL endpoint (:mod:`broker.flight`), when ``[flight]`` enables it."""

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> BrokerServer:
        check_listen_policy(self.config)
        if self._follower is None:
            from watermark.follower import Follower

            state = self.config.state
            self._follower = Follower(
                state.redis_url,
                prefix=state.key_prefix,
                heartbeat_timeout_s=state.heartbeat_timeout_s,
                max_staleness_s=state.max_staleness_s,
                regression_policy=state.regression_policy,
            )
            self._follower.start()
            self._follower.wait_until_synced(state.sync_timeout_s)
        if self._spark is None:
            from broker.spark_session import create_spark_session

            spark_config = self.config.spark
            conf = spark_config.conf_dict
            if not spark_config.remote:
                # Bounds what one query can pull into the driver, before the broker's own
                # row and byte checks run on the collected result.
                limit_mib = max(64, 2 * self.config.limits.max_result_bytes // (1024 * 1024))
                conf.setdefault("spark.driver.maxResultSize", f"{limit_mib}m")
            self._spark = create_spark_session(
                master=spark_config.master,
                remote=spark_config.remote,
                app_name=spark_config.app_name,
                conf=conf,
            )
        self.engine = QueryEngine(
            self._follower,
            self._spark,
            self.config,
            functions=self._functions,
            view_namespace=self._view_namespace,
            pins=self._pin_store(),
            floor=self._floor(),
        )
        self._server = self._build_grpc_server()
        self._server.start()
        if self.config.flight.enabled:
            from broker.flight.server import start_flight_server

            try:
                self.flight = start_flight_server(self.config, self.engine)
            except BaseException:
                self._server.stop(0)
                raise
        threading.Thread(target=self._watch_health, name="horizon-health", daemon=True).start()
        threading.Thread(
            target=self._recheck_unreadable, name="horizon-unreadable", daemon=True
        ).start()
        log.info("horizon broker listening on %s", self.target)
        return self

    def _build_grpc_server(self) -> grpc.Server:
        assert self.engine is not None
        limits = self.config.limits
        workers = limits.max_concurrent + limits.queue_size + 8
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="horizon-rpc"),
            options=[
                ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
            ],
            maximum_concurrent_rpcs=workers * 4,
        )
        auth = Authenticator(self.config.tokens)
        rpc.add_QueryServiceServicer_to_server(QueryServicer(self.engine, auth), server)
        rpc.add_InspectionServiceServicer_to_server(
            InspectionServicer(
                self._follower,
                auth,
                regression_policy=self.config.state.regression_policy,
                locks=self._lock_client(),
                pins=self._pins,
            ),
            server,
        )
        self._health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        for name in ("", *SERVICE_NAMES):
            self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        if self.config.server.reflection:
            reflection.enable_server_reflection(
                (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
            )
        self.port = self._bind(server)
        return server

    def _lock_client(self) -> Any:
        """Reads the lock service for inspection; a short retry so an outage answers quickly."""
        from locks.client import LockClient

        state = self.config.state
        self._locks = LockClient(state.redis_url, prefix=state.key_prefix, retry_timeout_s=1.0)
        return self._locks

    def _pin_store(self) -> Any:
        """Snapshot pins live in the state store beside the locks (:mod:`pins`)."""
        from pins.store import PinStore

        state = self.config.state
        self._pins = PinStore(state.redis_url, prefix=state.key_prefix, retry_timeout_s=1.0)
        return self._pins

    def _floor(self) -> SnapshotFloor:
        state = self.config.state
        if not self.config.reads.persist_floor:
            return SnapshotFloor(None, prefix=state.key_prefix)
        from watermark.server import connect

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

    def _watch_health(self) -> None:
        """Report NOT_SERVING while the state store is stale past the limit (queries would fail)."""
        serving = True
        while not self._stopped.wait(0.5):
            try:
                fresh = self._follower.staleness_s() <= self.config.state.max_staleness_s
            except Exception:
                fresh = False
            if fresh != serving and self._health is not None and not self._stopped.is_set():
                status = (
                    health_pb2.HealthCheckResponse.SERVING
                    if fresh
                    else health_pb2.HealthCheckResponse.NOT_SERVING
                )
                for name in ("", *SERVICE_NAMES):
                    self._health.set(name, status)
                serving = fresh

    def _bind(self, server: grpc.Server) -> int:
        host, port = parse_listen(self.config.server.listen)
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            if self.config.server.tls:
                key = Path(self.config.server.tls_key or "").read_bytes()
                cert = Path(self.config.server.tls_cert or "").read_bytes()
                credentials = grpc.ssl_server_credentials([(key, cert)])
                bound = server.add_secure_port(address, credentials)
            else:
                bound = server.add_insecure_port(address)
        except OSError as error:
            raise InvalidArgument(f"cannot read the TLS certificate or key: {error}") from None
        except RuntimeError as error:
            raise Unavailable(f"cannot listen on {address}: {error}") from None
        if not bound:
            raise Unavailable(f"cannot listen on {address}")
        return bound

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
        return self._spark

    def stop(self, grace: float | None = None) -> None:
        """Stop accepting calls, let running ones finish for ``grace`` seconds, release resources."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._health is not None:
            self._health.enter_graceful_shutdown()
        if self.flight is not None:
            self.flight.stop(self.config.server.grace_s if grace is None else grace)
        if self._server is not None:
            self._server.stop(self.config.server.grace_s if grace is None else grace).wait()
        if self.engine is not None:
            self.engine.views.clear()
        if self._locks is not None:
            self._locks.close()
        if self._pins is not None:
            self._pins.close()
        if self._floor_redis is not None:
            self._floor_redis.close()
        if self._owns_follower and self._follower is not None:
            self._follower.stop()
        if self._owns_spark and self._spark is not None:
            self._spark.stop()

    def wait(self) -> None:
        """Block until the server stops."""
        if self._server is not None:
            self._server.wait_for_termination()

    def __enter__(self) -> BrokerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
