"""A broker that fails to start half-way stops what it had started: nothing is left running."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from horizon_broker._core.errors import InvalidArgument, Unavailable
from horizon_broker.broker.api.server import BrokerServer
from tests.broker.conftest import broker_config


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port a socket of the test holds, listening."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def _settles(condition: Callable[[], bool], within_s: float = 10.0) -> bool:
    """Whether ``condition`` holds, waiting a little for threads and sockets being closed."""
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _broker_threads(before: set[threading.Thread]) -> list[str]:
    return [
        thread.name
        for thread in threading.enumerate()
        if thread not in before and thread.name.startswith("horizon")
    ]


def _port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _clients(redis_client: redis.Redis) -> int:
    return len(redis_client.client_list())


def test_a_console_port_taken_stops_every_part_started_before_it(
    redis_server, redis_client, spark, taken_port
):
    """The console starts last: the follower, Redis clients, gRPC and Flight servers, supervisor
    and observer started before it are all stopped, and the console's error is the one raised."""
    threads, clients = set(threading.enumerate()), _clients(redis_client)
    config = broker_config(redis_server.url, console={"listen": f"127.0.0.1:{taken_port}"})
    broker = BrokerServer(config, spark=spark, view_namespace="unwind_")  # type: ignore[arg-type]
    with pytest.raises(Unavailable, match=f"console on 127.0.0.1:{taken_port}"):
        broker.start()
    assert broker.port != 0 and broker.flight is not None, "gRPC and Flight had started"
    assert _settles(lambda: _port_is_free(broker.port)), "the gRPC port is still bound"
    assert _settles(lambda: _port_is_free(broker.flight.port)), "the Flight port is still bound"
    assert _settles(lambda: not _broker_threads(threads)), _broker_threads(threads)
    assert _settles(lambda: _clients(redis_client) == clients), redis_client.client_list()
    broker.stop()  # nothing left to stop: a no-op


def test_an_unreadable_tls_key_stops_the_follower_and_redis_clients(
    redis_server, redis_client, spark, tmp_path
):
    """gRPC fails to start (the key cannot be read): InvalidArgument naming it, and the
    follower, engine and Redis clients started before it are stopped."""
    threads, clients = set(threading.enumerate()), _clients(redis_client)
    missing = tmp_path / "missing.pem"
    config = broker_config(
        redis_server.url, server={"tls_cert": str(missing), "tls_key": str(missing)}
    )
    broker = BrokerServer(config, spark=spark, view_namespace="unwind_tls_")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=r"missing\.pem"):
        broker.start()
    assert _settles(lambda: not _broker_threads(threads)), _broker_threads(threads)
    assert _settles(lambda: _clients(redis_client) == clients), redis_client.client_list()
