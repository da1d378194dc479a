"""Subscribe's bounds over real gRPC, Spark and Redis: a subscriber that stops reading is ended
past ``[limits] subscription_max_lag_s`` with its last resume token, and resumes from it losing
and repeating nothing; operators see every open subscription in ListQueries."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2_grpc as rpc
from horizon_broker.broker.subscribe.live import LiveResult, SubscriptionMessage
from tests.subscribe.harness import ADMIN, Env, answer, big_history, rows_of, subscribe_env
from tests.waiting import eventually

pytestmark = [pytest.mark.spark, pytest.mark.redis]

MAX_LAG_S = 1.0
CHANNEL_OPTIONS = [
    ("grpc.http2.bdp_probe", 0),  # the flow-control window stays small: a stalled reader stalls
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
]
WAIT_S = 60.0


@pytest.fixture(scope="module")
def env(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:  # type: ignore[no-untyped-def]
    with subscribe_env(
        spark, tmp_path_factory.mktemp("bounds"), subscription_max_lag_s=MAX_LAG_S
    ) as env:
        yield env


def subscription_record(env: Env, sql: str):  # type: ignore[no-untyped-def]
    """The registry's record of the subscription to ``sql`` (running or ended), or None."""
    queries = env.broker.engine.queries
    for record in [*queries.running(), *queries.recent()]:
        if record.sql == sql and record.kind == "subscription":
            return record
    return None


def test_a_subscriber_that_stops_reading_is_ended_past_the_lag_bound_and_resumes_from_its_token(
    env: Env,
) -> None:
    steps = [1000 + 100 * k for k in range(1, 11)]
    table = env.table(big_history(steps))
    sql = f"SELECT id, owner, balance FROM {table}"
    channel = grpc.insecure_channel(env.broker.target, options=CHANNEL_OPTIONS)
    stub = rpc.QueryServiceStub(channel)
    call = stub.Subscribe(
        pb.SubscribeRequest(sql=sql), metadata=[("authorization", f"Bearer {ADMIN}")]
    )
    try:
        live = LiveResult()
        live.apply(SubscriptionMessage.from_proto(next(call)))
        for lwm in steps:  # the subscriber reads nothing meanwhile
            env.move(table, lwm)
            # The broker hands this snapshot's delta over, or finds no room and, past the
            # bound, ends the stream.
            record = eventually(
                lambda at=lwm: (
                    (r := subscription_record(env, sql)) and (r.snapshot == at or r.ended_ms) and r
                ),
                "the step handed over or the stream ended",
                patience_s=WAIT_S,
            )
            if record.ended_ms:
                break
        ended = subscription_record(env, sql)
        assert ended.ended_ms, "a stalled subscriber's stream ends once no room was left"
        env.move(table, steps[-1])
        assert ended.status == "RESOURCE_EXHAUSTED" and "fell behind" in ended.message
        with pytest.raises(grpc.RpcError) as raised:
            for message in call:  # what was handed over before it ended, then the status
                step = SubscriptionMessage.from_proto(message)
                assert step.from_snapshot == live.snapshot, "contiguous ranges"
                live.apply(step)
        error = raised.value
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "subscription_max_lag_s" in error.details()
        assert live.resume_token in error.details()
        assert dict(error.trailing_metadata())["x-horizon-resume-token"] == live.resume_token
        assert live.snapshot < steps[-1]
    finally:
        channel.close()
    with env.client() as client:
        resumed = client.subscribe(sql, resume_token=live.resume_token, timeout=WAIT_S)
        header = next(resumed)
        assert (header.kind, header.to_snapshot) == ("resumed", live.snapshot)
        while live.snapshot != steps[-1]:
            step = next(resumed)
            assert step.from_snapshot == live.snapshot, "nothing lost, nothing repeated"
            live.apply(step)
        resumed.close()
        assert rows_of(live.table) == answer(client, sql, steps[-1])


def test_an_open_subscription_is_listed_with_its_identity_sql_and_snapshot_sent(
    env: Env,
) -> None:
    table = env.table()
    sql = f"SELECT id, owner, balance FROM {table}"
    with env.client() as client:
        stream = client.subscribe(sql, timeout=WAIT_S)
        first = next(stream)
        env.move(table, 2000)
        delta = next(stream)
        assert (first.to_snapshot, delta.to_snapshot) == (1000, 2000)

        def listed() -> pb.QueryInfo | None:
            running = [q for q in client.queries(running_only=True) if q.sql == sql]
            return running[0] if running and running[0].snapshot == 2000 else None

        info = eventually(listed, "the subscription listed at the snapshot it sent")
        assert (info.source, info.identity, info.state) == ("Subscribe", "admin", "running")
        assert list(info.tables) == [table]
        assert info.row_count == first.rows.num_rows + delta.rows.num_rows
        assert subscription_record(env, sql).kind == "subscription"
        stream.close()
        gone = eventually(
            lambda: [q for q in client.queries() if q.sql == sql and q.ended_ms],
            "the subscription's end recorded",
        )
        assert (gone[0].state, gone[0].status) == ("cancelled", "CANCELLED")
