"""Subscribe's strategies over real gRPC, a real broker and real ingestion: each stream names the
strategy that computes it on every message (the one ExplainQuery names for the SQL), its deltas
bring the first result to the query's answer, a forced strategy is used or refused with
INVALID_ARGUMENT saying why, and an unknown name is refused."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2_grpc as rpc
from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.broker.subscribe.live import LiveResult, SubscriptionMessage
from horizon_broker.broker.subscribe.snapshot_sql import at_snapshot
from horizon_broker.client import connect
from horizon_broker.ingest.job import IngestJob
from horizon_broker.watermark.server import ServerClient
from tests.broker.conftest import ADMIN, broker_config
from tests.compaction.history import SCHEMA
from tests.ingest.conftest import COLUMNS, Change, accounts_table, broker_view
from tests.processes import RedisProcess

pytestmark = [pytest.mark.spark, pytest.mark.redis]

CALL_S = 60.0
"""A stream's deadline: a hang fails the test, it times nothing."""
METADATA = (("authorization", f"Bearer {ADMIN}"),)
_seq = itertools.count(1)


@dataclass
class Env:
    redis: RedisProcess
    broker: BrokerServer
    job: IngestJob
    spark: Any

    def ingest(self, changes: list[tuple[str, int, bool]]) -> int:
        """One batch through the ingestion job; the LWM the broker serves after it."""
        rows = [
            tuple(Change(k, b, next(_seq), d).as_row()[c] for c in COLUMNS) for k, b, d in changes
        ]
        self.job.run_batch(self.spark.createDataFrame(rows, SCHEMA))
        return int(broker_view(self.broker.follower, self.job.client, "accounts").lwm)

    def stub(self) -> rpc.QueryServiceStub:
        return rpc.QueryServiceStub(grpc.insecure_channel(self.broker.target))


@pytest.fixture(scope="module")
def env(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:  # type: ignore[no-untyped-def]
    redis = RedisProcess().start()
    broker = BrokerServer(broker_config(redis.url), spark=spark).start()  # type: ignore[arg-type]
    root: Path = tmp_path_factory.mktemp("strategies")
    client = ServerClient(redis.url, "s1")
    job = IngestJob(spark, accounts_table(root, key_partitions=1), client)
    built = Env(redis, broker, job, spark)
    built.ingest([(f"k{i}", i, False) for i in range(6)])
    yield built
    broker.stop(0)
    broker.follower.stop()
    client.close()
    redis.close()


SQL = {
    "change_feed": "SELECT user_id, balance FROM accounts WHERE balance > 1",
    "changed_groups": "SELECT balance % 2 AS parity, count(*) AS n, sum(balance) AS total "
    "FROM accounts GROUP BY balance % 2",
    "exact_diff": "SELECT user_id, balance FROM accounts ORDER BY balance DESC LIMIT 3",
}


def rows(table: Any) -> Counter:
    return Counter(tuple(r.values()) for r in table.to_pylist())


def answer(sql: str, snapshot: int, env: Env) -> Counter:
    with connect(env.broker.target, token=ADMIN) as client:
        return rows(client.query(at_snapshot(sql, ["accounts"], snapshot)))


def follow_one_batch(env: Env, sql: str, strategy: str = "") -> list[SubscriptionMessage]:
    """Subscribe, ingest one batch, read up to the delta reaching its LWM; every message, each
    step checked against the query at its snapshot."""
    call = env.stub().Subscribe(
        pb.SubscribeRequest(sql=sql, strategy=strategy), timeout=CALL_S, metadata=METADATA
    )
    try:
        live, seen = LiveResult(), []
        message = SubscriptionMessage.from_proto(next(call))
        seen.append(message)
        live.apply(message)
        fresh = 100 + next(_seq)  # a new key, greatest balance: every query's answer changes
        lwm = env.ingest([("k0", 7, False), ("k5", 0, True), (f"n{fresh}", fresh, False)])
        while live.snapshot != lwm:
            message = SubscriptionMessage.from_proto(next(call))
            seen.append(message)
            if live.apply(message):
                assert live.table is not None
                assert rows(live.table) == answer(sql, message.to_snapshot, env), message
        return seen
    finally:
        call.cancel()


@pytest.mark.parametrize("strategy", sorted(SQL))
def test_each_strategy_is_named_on_every_message_of_its_stream_and_by_explain(
    env: Env, strategy: str
) -> None:
    with connect(env.broker.target, token=ADMIN) as client:
        explained = client.explain(SQL[strategy])
    assert explained.subscribe_strategy == strategy  # an unforced stream takes it too
    assert explained.subscribe_strategy_reason.startswith(f"{strategy}: ")
    messages = follow_one_batch(env, SQL[strategy], strategy=strategy)
    assert {m.strategy for m in messages} == {strategy}
    assert messages[0].kind == "first_result"
    assert "delta" in [m.kind for m in messages]


def test_an_unforced_stream_uses_the_incremental_strategy_that_suits_its_query(
    env: Env,
) -> None:
    messages = follow_one_batch(env, SQL["change_feed"])
    assert {m.strategy for m in messages} == {"change_feed"}


def test_a_group_by_with_min_is_left_to_the_exact_diff_unless_forced(env: Env) -> None:
    """Changed groups with min, max, avg or HAVING re-run the query for the touched groups,
    which costs about a whole re-run: the broker does not take it by itself."""
    sql = "SELECT balance % 2 AS parity, min(user_id) AS first FROM accounts GROUP BY balance % 2"
    with connect(env.broker.target, token=ADMIN) as client:
        explained = client.explain(sql)
    assert explained.subscribe_strategy == "exact_diff"
    assert "changed_groups suits the query" in explained.subscribe_strategy_reason


@pytest.mark.parametrize(
    ("sql", "strategy", "why"),
    [
        (
            SQL["changed_groups"],
            "change_feed",
            "change_feed cannot serve this query: the query aggregates",
        ),
        (
            SQL["exact_diff"],
            "changed_groups",
            "changed_groups cannot serve this query: the query has a LIMIT",
        ),
        (
            SQL["change_feed"],
            "fastest",
            "strategy must be one of change_feed, changed_groups, exact_diff",
        ),
    ],
)
def test_a_strategy_that_cannot_serve_the_query_is_invalid_argument_saying_why(
    env: Env, sql: str, strategy: str, why: str
) -> None:
    call = env.stub().Subscribe(
        pb.SubscribeRequest(sql=sql, strategy=strategy), timeout=CALL_S, metadata=METADATA
    )
    with pytest.raises(grpc.RpcError) as raised:
        next(call)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert why in (raised.value.details() or "")
