"""Subscriptions over Arrow Flight DoExchange, read with plain ``pyarrow.flight`` (no Horizon
code on the client side): the first result and the deltas checked against ExecuteQuery at each
snapshot, resuming from a token, a bad command, grants and the per-identity limit (counted with
the gRPC door's), all on a real broker, Spark and Redis."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from tests.subscribe.harness import (
    ADMIN,
    LIMIT,
    OTHER,
    STEPS,
    Env,
    answer,
    oracle,
    subscribe_env,
)
from tests.waiting import eventually

pytestmark = [pytest.mark.spark, pytest.mark.redis]

CALL_S = 120.0
"""The deadline of one DoExchange call (a hang fails the test, it measures nothing)."""


@pytest.fixture(scope="module")
def env(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:  # type: ignore[no-untyped-def]
    with subscribe_env(spark, tmp_path_factory.mktemp("exchange")) as env:
        yield env


class Exchange:
    """One DoExchange subscription, as any Flight client would open and read it."""

    def __init__(self, env: Env, command: dict[str, Any], token: str = ADMIN) -> None:
        self.client = fl.connect(f"grpc://{env.broker.flight_target}")
        options = fl.FlightCallOptions(
            headers=[(b"authorization", f"Bearer {token}".encode())], timeout=CALL_S
        )
        descriptor = fl.FlightDescriptor.for_command(json.dumps(command).encode())
        self.writer, self.reader = self.client.do_exchange(descriptor, options)
        self.by_key: dict[tuple, tuple] = {}

    def next(self) -> tuple[pa.RecordBatch | None, dict[str, Any]]:
        chunk = self.reader.read_chunk()
        return chunk.data, json.loads(chunk.app_metadata.to_pybytes())

    def step(self) -> list[tuple[pa.RecordBatch | None, dict[str, Any]]]:
        """The messages of one step (up to the one marked last_part), applied to ``by_key``."""
        parts = [self.next()]
        while not parts[-1][1]["last_part"]:
            parts.append(self.next())
        for batch, meta in parts:
            self.apply(batch, meta)
        return parts

    def apply(self, batch: pa.RecordBatch | None, meta: dict[str, Any]) -> None:
        """Each change by the message's key columns: what a Flight client does with it."""
        if batch is None:
            return
        names = [n for n in batch.schema.names if n != "_change_type"]
        key = [names.index(k) for k in meta["key_columns"]]
        for change in batch.to_pylist():
            row = tuple(change[n] for n in names)
            at = tuple(row[i] for i in key)
            if change["_change_type"] in ("insert", "update_after"):
                self.by_key[at] = row
            else:
                assert self.by_key.pop(at) == row, "a change removes the row the client holds"

    @property
    def rows(self) -> Counter:
        return Counter(self.by_key.values())

    def close(self) -> None:
        """Cancel the call (the broker ends the subscription) and close the connection."""
        self.reader.cancel()
        self.client.close()


def test_first_result_then_a_delta_per_snapshot_equals_the_query_at_each(env: Env) -> None:
    table = env.table()
    sql = f"SELECT id, owner, balance FROM {table}"
    exchange = Exchange(env, {"command": "subscribe", "sql": sql, "max_rows_per_message": 2})
    try:
        first = exchange.step()
        assert exchange.reader.schema.names == ["_change_type", "id", "owner", "balance"]
        metas = [meta for _, meta in first]
        assert [m["kind"] for m in metas] == ["first_result"] * 3  # 5 rows, 2 a message
        assert {b.column(0).to_pylist()[0] for b, _ in first if b is not None} == {"insert"}
        assert metas[-1]["to_snapshot"] == 1000 and metas[-1]["key_columns"] == ["id"]
        assert metas[-1]["resume_token"].startswith("hzs1.") and not metas[0]["resume_token"]
        with env.client() as client:
            assert exchange.rows == oracle(env.rows[table], 1000) == answer(client, sql, 1000)
            kinds: Counter = Counter()
            previous = 1000
            for lwm in STEPS:
                env.move(table, lwm)
                parts = exchange.step()
                assert {(m["kind"], m["from_snapshot"], m["to_snapshot"]) for _, m in parts} == {
                    ("delta", previous, lwm)
                }
                assert exchange.rows == answer(client, sql, lwm) == oracle(env.rows[table], lwm)
                kinds.update(k for b, _ in parts if b is not None for k in b.column(0).to_pylist())
                previous = lwm
        assert set(kinds) == {"insert", "delete", "update_before", "update_after"}
    finally:
        exchange.close()


def test_resuming_from_a_token_sends_no_first_result_and_goes_on_from_its_snapshot(
    env: Env,
) -> None:
    table = env.table()
    sql = f"SELECT id, owner, balance FROM {table}"
    command = {"command": "subscribe", "sql": sql}
    stopped = Exchange(env, command)
    stopped.step()
    env.move(table, 2000)
    token = stopped.step()[-1][1]["resume_token"]
    held = dict(stopped.by_key)
    stopped.close()
    resumed = Exchange(env, {**command, "resume_token": token})
    try:
        resumed.by_key = held
        header = resumed.step()
        assert [(b, m["kind"], m["to_snapshot"]) for b, m in header] == [(None, "resumed", 2000)]
        env.move(table, 3000)
        step = resumed.step()
        assert {(m["from_snapshot"], m["to_snapshot"]) for _, m in step} == {(2000, 3000)}
        with env.client() as client:
            assert resumed.rows == answer(client, sql, 3000)
    finally:
        resumed.close()


@pytest.mark.parametrize(
    ("command", "named"),
    [
        (b"SELECT 1", "not JSON"),
        (b'["subscribe"]', "JSON object"),
        (json.dumps({"command": "watch", "sql": "SELECT 1"}).encode(), "unknown DoExchange"),
        (json.dumps({"command": "subscribe", "sql": "x", "rows": 5}).encode(), "rows"),
        (json.dumps({"command": "subscribe", "sql": 7}).encode(), "sql must be a JSON string"),
        (json.dumps({"command": "subscribe"}).encode(), "sql is required"),
        (
            json.dumps({"command": "subscribe", "sql": "x", "max_rows_per_message": -1}).encode(),
            "max_rows_per_message",
        ),
        (
            json.dumps({"command": "subscribe", "sql": "x", "resume_token": "t"}).encode(),
            "not a subscription resume token",
        ),
    ],
)
def test_a_bad_command_is_invalid_argument_naming_what_is_wrong(
    env: Env, command: bytes, named: str
) -> None:
    client = fl.connect(f"grpc://{env.broker.flight_target}")
    options = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {ADMIN}".encode())])
    try:
        _, reader = client.do_exchange(fl.FlightDescriptor.for_command(command), options)
        with pytest.raises(pa.ArrowInvalid, match=named) as raised:
            reader.read_chunk()
        assert "INTERNAL" not in str(raised.value)
    finally:
        client.close()


def test_a_path_descriptor_is_invalid_argument(env: Env) -> None:
    client = fl.connect(f"grpc://{env.broker.flight_target}")
    options = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {ADMIN}".encode())])
    try:
        _, reader = client.do_exchange(fl.FlightDescriptor.for_path("accounts"), options)
        with pytest.raises(pa.ArrowInvalid, match="command descriptor"):
            reader.read_chunk()
    finally:
        client.close()


def test_a_token_that_may_not_read_the_table_is_refused(env: Env) -> None:
    table = env.table()
    exchange = Exchange(env, {"command": "subscribe", "sql": f"SELECT * FROM {table}"}, OTHER)
    try:
        with pytest.raises(fl.FlightUnauthorizedError, match=table):
            exchange.next()
    finally:
        exchange.close()
    anonymous = Exchange(env, {"command": "subscribe", "sql": f"SELECT * FROM {table}"}, "nope")
    try:
        with pytest.raises(fl.FlightUnauthenticatedError):
            anonymous.next()
    finally:
        anonymous.close()


def open_subscriptions(env: Env) -> list[Any]:
    return [r for r in env.broker.engine.queries.running() if r.kind == "subscription"]


def test_the_per_identity_limit_counts_flight_and_grpc_subscriptions_together(env: Env) -> None:
    eventually(lambda: not open_subscriptions(env), "the other tests' subscriptions ended")
    table = env.table()
    command = {"command": "subscribe", "sql": f"SELECT id FROM {table}"}
    held = [Exchange(env, command) for _ in range(LIMIT - 1)]
    grpc_client = env.client()
    try:
        for exchange in held:
            exchange.step()
        stream = grpc_client.subscribe(command["sql"])
        next(stream)  # the identity's last place, taken through gRPC
        refused = Exchange(env, command)
        with pytest.raises(fl.FlightUnavailableError, match="max_subscriptions_per_identity"):
            refused.next()  # RESOURCE_EXHAUSTED, which Flight sends as UNAVAILABLE
        refused.close()
        stream.close()
        again = _eventually_first(env, command)
        assert again["kind"] == "first_result"
    finally:
        for exchange in held:
            exchange.close()
        grpc_client.close()


def _eventually_first(env: Env, command: dict[str, Any]) -> dict[str, Any]:
    def attempt() -> dict[str, Any] | None:
        exchange = Exchange(env, command)
        try:
            return exchange.next()[1]
        except fl.FlightUnavailableError:
            return None
        finally:
            exchange.close()

    return eventually(attempt, "a place freed by a closed stream")
