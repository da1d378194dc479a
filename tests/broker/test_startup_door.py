"""A starting broker's query door (horizon_broker/broker/api/startup.py), on a real gRPC server
on loopback without Spark: calls that arrive before the engine exists wait for it and are then
answered by the real servicer; a call whose deadline passes first ends DEADLINE_EXCEEDED; the
other services on the same server answer meanwhile. And Spark's background start hands over its
session, or its failure, to whoever waits."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2_grpc as rpc
from horizon_broker.broker.api.server import QUERY_METHODS
from horizon_broker.broker.api.startup import BackgroundStart, StartingDoor


class _Releases(rpc.QueryServiceServicer):  # type: ignore[misc]
    async def ReleaseSnapshot(self, request: Any, context: Any) -> Any:
        return pb.ReleaseSnapshotResponse(released=request.pin_id == "p1")


class _Server:
    """An asyncio gRPC server on its own loop thread, as the broker runs one."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.door = StartingDoor(QUERY_METHODS, self.loop)
        self.server, self.port = self._run(self._start())

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=30)

    async def _start(self) -> tuple[Any, int]:
        server = grpc.aio.server()
        rpc.add_QueryServiceServicer_to_server(self.door, server)
        servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        await servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, port

    def stop(self) -> None:
        self._run(self.server.stop(0))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)


@pytest.fixture
def starting() -> Iterator[tuple[_Server, grpc.Channel]]:
    server = _Server()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    yield server, channel
    channel.close()
    server.stop()


def test_a_query_call_before_the_engine_waits_and_is_answered_once_the_door_opens(starting):
    server, channel = starting
    release = rpc.QueryServiceStub(channel).ReleaseSnapshot
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(release, pb.ReleaseSnapshotRequest(pin_id="p1"), timeout=60)
        # meanwhile the server answers its other services
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
        assert not waiting.done()
        server.door.open(_Releases())
        assert waiting.result().released is True


def test_a_call_whose_deadline_passes_at_the_door_ends_deadline_exceeded(starting):
    _, channel = starting
    with pytest.raises(grpc.RpcError) as failure:
        rpc.QueryServiceStub(channel).ReleaseSnapshot(pb.ReleaseSnapshotRequest(), timeout=0.3)
    assert failure.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def test_the_background_start_hands_over_its_result_or_its_failure():
    made = BackgroundStart(lambda: "session", "test-start")
    assert made.result() == "session"

    def fails() -> str:
        raise RuntimeError("no JVM")

    with pytest.raises(RuntimeError, match="no JVM"):
        BackgroundStart(fails, "test-start").result()


def test_a_discarded_start_stops_what_it_made_once_made():
    gate, stopped = threading.Event(), threading.Event()

    def slow() -> str:
        gate.wait(10)
        return "session"

    starting = BackgroundStart(slow, "test-start")
    starting.discard(lambda session: stopped.set())
    assert not stopped.is_set()
    gate.set()
    assert stopped.wait(10)
