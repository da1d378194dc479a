"""DoExchange's quiet streams, read with plain ``pyarrow.flight``: a quiet step comes as a
metadata-only ``progress`` message with a new token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow.flight as fl
import pytest

from tests.subscribe.harness import ADMIN, Env, subscribe_env

pytestmark = [pytest.mark.spark, pytest.mark.redis]

MAX_LAG_S = 1.0
CALL_S = 120.0


@pytest.fixture(scope="module")
def env(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:  # type: ignore[no-untyped-def]
    with subscribe_env(
        spark, tmp_path_factory.mktemp("exchange-bounds"), subscription_max_lag_s=MAX_LAG_S
    ) as env:
        yield env


class Exchange:
    """A DoExchange subscription as any Flight client opens it; the flow-control window stays
    small (no BDP probing), so a reader that stops reading stalls the server's writes."""

    def __init__(self, env: Env, sql: str) -> None:
        self.client = fl.FlightClient(
            f"grpc://{env.broker.flight_target}", generic_options=[("grpc.http2.bdp_probe", 0)]
        )
        options = fl.FlightCallOptions(
            headers=[(b"authorization", f"Bearer {ADMIN}".encode())], timeout=CALL_S
        )
        command = json.dumps({"command": "subscribe", "sql": sql}).encode()
        descriptor = fl.FlightDescriptor.for_command(command)
        self.writer, self.reader = self.client.do_exchange(descriptor, options)

    def meta(self) -> dict[str, Any]:
        """The next message's app_metadata, its rows dropped."""
        return dict(json.loads(self.reader.read_chunk().app_metadata.to_pybytes()))

    def close(self) -> None:
        self.reader.cancel()
        self.client.close()


def test_a_quiet_step_comes_as_a_progress_message_with_a_token(env: Env) -> None:
    table = env.table()
    sql = f"SELECT id, owner, balance FROM {table}"
    exchange = Exchange(env, sql)
    try:
        while not exchange.meta()["last_part"]:
            pass  # the first result
        env.move(table, 5000)
        while not exchange.meta()["last_part"]:
            pass  # the delta from 1000
        env.move(table, 5500)  # nothing between 5000 and 5500 changes the answer
        chunk = exchange.reader.read_chunk()
        meta = json.loads(chunk.app_metadata.to_pybytes())
        assert chunk.data is None, "metadata only"
        assert (meta["kind"], meta["from_snapshot"], meta["to_snapshot"]) == (
            "progress",
            5000,
            5500,
        )
        assert meta["resume_token"] and meta["last_part"]
    finally:
        exchange.close()
