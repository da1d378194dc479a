"""Flight SQL queries are the broker's queries like any other: ListQueries, the query log and the
metrics see them (``source = "FlightSQL"``), from start to whichever end they had."""

from __future__ import annotations

import time
import uuid

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.broker.observe.metrics import REGISTRY
from tests.broker.conftest import BrokerEnv
from tests.flight.conftest import adbc_connect, statement_descriptor
from tests.flight.test_cancel_and_expiry import BIG_SQL, OPTIONS, _client
from tests.waiting import eventually


def _recorded(env: BrokerEnv, query_id: str, within_s: float = 15.0) -> object:
    """The finished query ``query_id`` as ListQueries shows it (it ends just after its stream)."""
    deadline = time.monotonic() + within_s
    with env.client() as horizon:
        while True:
            found = [q for q in horizon.queries() if q.query_id == query_id and q.ended_ms]
            if found:
                return found[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"query {query_id} never ended in ListQueries")
            time.sleep(0.05)


def _flight_queries_counted(code: str) -> float:
    total = 0.0
    for metric in REGISTRY.collect():
        for sample in metric.samples:
            if (
                sample.name == "horizon_queries_total"
                and sample.labels.get("rpc") == "FlightSQL"
                and sample.labels.get("code") == code
            ):
                total += sample.value
    return total


def test_a_flight_query_read_whole_is_listed_done_with_its_rows_tables_and_snapshot(
    broker_env: BrokerEnv,
) -> None:
    query_id = f"flight-done-{uuid.uuid4().hex[:8]}"
    counted = _flight_queries_counted("OK")
    with (
        adbc_connect(
            broker_env.broker.flight_target, headers={"x-horizon-query-id": query_id}
        ) as connection,
        connection.cursor() as cursor,
    ):
        cursor.execute("SELECT id, owner FROM accounts WHERE id < 10")
        rows = cursor.fetchall()
    record = _recorded(broker_env, query_id)
    assert record.source == "FlightSQL"
    assert (record.state, record.status) == ("done", "OK")
    assert rows and record.row_count == len(rows)
    assert record.byte_count > 0
    assert list(record.tables) == ["accounts"]
    assert record.HasField("snapshot") and record.snapshot > 0
    assert record.timings.total_ms > 0
    assert record.identity == "admin"
    assert _flight_queries_counted("OK") >= counted + 1


def test_a_refused_flight_query_is_listed_failed_with_its_status_code(
    broker_env: BrokerEnv,
) -> None:
    query_id = f"flight-refused-{uuid.uuid4().hex[:8]}"
    client = fl.connect(f"grpc://{broker_env.broker.flight_target}")
    options = fl.FlightCallOptions(
        headers=[*OPTIONS.headers, (b"x-horizon-query-id", query_id.encode())]
    )
    with pytest.raises(pa.ArrowInvalid, match="nope"):
        client.get_flight_info(statement_descriptor("SELECT nope FROM accounts"), options)
    record = _recorded(broker_env, query_id)
    assert (record.source, record.state, record.status) == (
        "FlightSQL",
        "failed",
        "INVALID_ARGUMENT",
    )
    assert "nope" in record.message


def test_a_result_nobody_fetches_is_listed_cancelled_when_it_expires(
    one_slot: BrokerServer, broker_env: BrokerEnv
) -> None:
    query_id = f"flight-unread-{uuid.uuid4().hex[:8]}"
    options = fl.FlightCallOptions(
        headers=[*OPTIONS.headers, (b"x-horizon-query-id", query_id.encode())]
    )
    _client(one_slot).get_flight_info(statement_descriptor(BIG_SQL), options)
    running = [q for q in one_slot.engine.queries.running() if q.query_id == query_id]
    assert running and running[0].state == "running"  # held while it waits for its DoGet
    eventually(
        lambda: any(q.query_id == query_id for q in one_slot.engine.queries.recent()),
        "the expired result ended in the registry",
    )
    (record,) = [q for q in one_slot.engine.queries.recent() if q.query_id == query_id]
    assert (record.rpc, record.state, record.status) == ("FlightSQL", "cancelled", "CANCELLED")
    assert "result_ttl_s" in record.message


def test_a_stream_the_client_drops_is_listed_cancelled(one_slot: BrokerServer) -> None:
    query_id = f"flight-dropped-{uuid.uuid4().hex[:8]}"
    options = fl.FlightCallOptions(
        headers=[*OPTIONS.headers, (b"x-horizon-query-id", query_id.encode())]
    )
    client = _client(one_slot)
    info = client.get_flight_info(statement_descriptor(BIG_SQL), options)
    reader = client.do_get(info.endpoints[0].ticket, OPTIONS)
    assert reader.read_chunk().data.num_rows > 0
    reader.cancel()
    eventually(
        lambda: any(q.query_id == query_id for q in one_slot.engine.queries.recent()),
        "the dropped stream ended in the registry",
    )
    (record,) = [q for q in one_slot.engine.queries.recent() if q.query_id == query_id]
    assert record.rpc == "FlightSQL" and record.state == "cancelled"
