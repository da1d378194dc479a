"""No starvation: queries waiting for a snapshot, queued or streaming to a slow reader never hold
a server thread that health checks or other callers need, and a slow reader is cut off at the
query's deadline with its admission slot freed."""

from __future__ import annotations

import time

import grpc
import pytest

from horizon_broker._core.errors import DeadlineExceeded
from horizon_broker.client import HorizonClient
from horizon_broker.watermark import tokens
from tests.broker.conftest import ADMIN, LWM, broker_config
from tests.broker.spark_jobs import ExtraBroker

WAITERS = 50


def _wait_until(condition, timeout: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return bool(condition())


def test_fifty_callers_waiting_for_a_far_snapshot_leave_health_and_other_callers_answered(
    broker_env,
):
    far = tokens.encode({"accounts": LWM + 10**12})
    clients = [broker_env.client(monotonic=False) for _ in range(WAITERS)]
    calls = [
        c.start_query("SELECT count(*) FROM accounts", min_snapshot=far, timeout=60, cache=False)
        for c in clients
    ]
    offload = broker_env.broker.offload
    try:
        assert _wait_until(lambda: offload.running >= WAITERS), offload.running
        with broker_env.client() as other:
            assert other.health() == "SERVING"
            assert other.query("SELECT count(*) AS n FROM accounts").to_pylist() == [{"n": 100}]
            assert other.watermarks("accounts").lwm == LWM
            assert len(other.tables()) >= 3
    finally:
        for call in calls:
            call.cancel()
        for c in clients:
            c.close()
    # A waiter stops with its caller, not at the end of its wait ([reads] max_wait_s, 30 s).
    assert _wait_until(lambda: offload.running == 0, 15), "cancelled waits kept their threads"


def test_a_reader_too_slow_for_the_deadline_is_cut_off_and_its_slot_freed(broker_env, spark):
    config = broker_config(broker_env.redis.url, limits={"query_timeout_s": 4.0})
    # Without BDP probing the client's flow-control window stays small, so the broker's writes
    # block long before the result (about 20 MB) is sent; with it the window can grow until the
    # whole result fits in the transport's buffers and the stream ends before its deadline.
    unprobed = [("grpc.http2.bdp_probe", 0), ("grpc.max_receive_message_length", -1)]
    with (
        ExtraBroker(config, spark, broker_env) as server,
        HorizonClient(
            grpc.insecure_channel(server.target, options=unprobed), token=ADMIN
        ) as horizon,
    ):
        call = horizon.start_query(
            "SELECT id, owner, balance FROM big WHERE id < 900000", cache=False
        )
        stream = iter(call._call)
        assert next(stream).WhichOneof("kind") == "header"
        assert _wait_until(lambda: server.engine.admission.stats().running == 1)
        # Read nothing more: the broker's writes block on flow control until the deadline.
        assert _wait_until(lambda: server.engine.admission.stats().running == 0, 30)
        assert _wait_until(lambda: server.offload.running == 0)
        with pytest.raises(grpc.RpcError) as ended:
            for _ in stream:
                pass
        assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "did not read the result" in ended.value.details()
        assert horizon.query("SELECT count(*) AS n FROM accounts").to_pylist() == [{"n": 100}]


def test_a_wait_past_the_deadline_names_what_holds_it_back(broker_env):
    far = tokens.encode({"accounts": LWM + 10**12})
    with (
        broker_env.client(monotonic=False) as horizon,
        pytest.raises(DeadlineExceeded, match="held back by"),
    ):
        horizon.query("SELECT count(*) FROM accounts", min_snapshot=far, timeout=3, cache=False)
