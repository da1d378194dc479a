"""Cancelling through Flight SQL stops the query's Spark jobs and frees its admission slot, and so
do a result nobody fetches (it expires) and a stream the client stops reading."""

from __future__ import annotations

import threading

import adbc_driver_manager
import pyarrow as pa
import pyarrow.flight as fl
import pytest

from horizon_broker.broker.api.server import BrokerServer
from tests.broker.conftest import ADMIN
from tests.broker.spark_jobs import assert_group_stopped, engine_group, wait_for_jobs
from tests.broker.test_status_codes import SLOW_SQL
from tests.flight.conftest import _field, adbc_connect, statement_descriptor
from tests.waiting import eventually

BIG_SQL = "SELECT * FROM big LIMIT 900000"  # over 4 MiB: the waiting result spills to a file


OPTIONS = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {ADMIN}".encode())])


def _client(server: BrokerServer) -> fl.FlightClient:
    return fl.connect(f"grpc://{server.flight_target}")


def _refused_not_found(client: fl.FlightClient, ticket: fl.Ticket, message: str) -> None:
    """DoGet of ``ticket`` fails with NOT_FOUND (pyarrow's KeyError) saying ``message``."""
    with pytest.raises(pa.ArrowKeyError, match=message):
        client.do_get(ticket, OPTIONS).read_all()


def _slot_is_free(server: BrokerServer) -> bool:
    return server.engine.admission.stats().running == 0


def _a_query_runs(server: BrokerServer) -> None:
    with adbc_connect(server.flight_target) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT count(*) AS n FROM accounts")
        assert cursor.fetchone() == (100,)


def test_a_cancelled_long_query_stops_its_spark_jobs_and_frees_its_slot(one_slot, spark):
    failures: list[BaseException] = []
    with adbc_connect(
        one_slot.flight_target, headers={"x-horizon-query-id": "flight-cancel-probe"}
    ) as connection:
        cursor = connection.cursor()

        def run() -> None:
            try:
                cursor.execute(SLOW_SQL)
                cursor.fetchall()
            except BaseException as error:
                failures.append(error)

        worker = threading.Thread(target=run)
        worker.start()
        group = engine_group(one_slot, "flight-cancel-probe")
        wait_for_jobs(spark, group)
        cursor.adbc_cancel()
        worker.join(30)
        cursor.close()
    assert not worker.is_alive()
    assert failures and isinstance(failures[0], adbc_driver_manager.Error)
    assert_group_stopped(spark, group)
    eventually(lambda: _slot_is_free(one_slot), "the cancelled query's slot was freed")
    _a_query_runs(one_slot)


def test_cancel_flight_info_cancels_a_result_waiting_for_its_doget(one_slot):
    client = _client(one_slot)
    info = client.get_flight_info(statement_descriptor(BIG_SQL), OPTIONS)
    assert _slot_is_free(one_slot)  # the result waits read whole: it holds no query slot
    request = _field(1, info.serialize())  # CancelFlightInfoRequest.info
    (result,) = client.do_action(fl.Action("CancelFlightInfo", request), OPTIONS)
    assert result.body.to_pybytes() == b"\x08\x01"  # CancelFlightInfoResult{CANCELLED}
    assert _slot_is_free(one_slot)
    _refused_not_found(client, info.endpoints[0].ticket, "no waiting result")
    _a_query_runs(one_slot)


def test_a_result_nobody_fetches_expires_and_holds_no_slot_meanwhile(one_slot):
    client = _client(one_slot)
    info = client.get_flight_info(statement_descriptor(BIG_SQL), OPTIONS)
    assert _slot_is_free(one_slot)
    eventually(
        lambda: len(one_slot.flight.results) == 0,
        "the unread result expired ([flight].result_ttl_s)",
    )
    _refused_not_found(client, info.endpoints[0].ticket, "result_ttl_s")
    _a_query_runs(one_slot)


def test_a_client_that_cancels_its_stream_midway_frees_the_slot(one_slot):
    client = _client(one_slot)
    info = client.get_flight_info(statement_descriptor(BIG_SQL), OPTIONS)
    reader = client.do_get(info.endpoints[0].ticket, OPTIONS)
    assert reader.read_chunk().data.num_rows > 0
    reader.cancel()
    eventually(lambda: _slot_is_free(one_slot), "the abandoned stream's slot was freed")
    _a_query_runs(one_slot)


def test_a_ticket_is_single_use_and_only_for_its_caller(one_slot, broker_env):
    from tests.broker.conftest import READER

    client = _client(one_slot)
    info = client.get_flight_info(statement_descriptor("SELECT 1 AS one"), OPTIONS)
    ticket = info.endpoints[0].ticket
    other = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {READER}".encode())])
    with pytest.raises(fl.FlightUnauthorizedError, match="another caller"):
        client.do_get(ticket, other).read_all()
    assert client.do_get(ticket, OPTIONS).read_all().to_pylist() == [{"one": 1}]
    _refused_not_found(client, ticket, "already read")


def test_a_large_result_streams_in_batches_no_bigger_than_the_batch_target(broker_env):
    client = _client(broker_env.broker)
    info = client.get_flight_info(statement_descriptor(BIG_SQL), OPTIONS)
    reader = client.do_get(info.endpoints[0].ticket, OPTIONS)
    target = broker_env.broker.config.limits.batch_bytes
    rows = 0
    for chunk in reader:
        rows += chunk.data.num_rows
        assert chunk.data.nbytes <= 2 * target
    assert rows == 900_000
    assert info.total_records == 900_000  # read whole before the FlightInfo left


def test_the_flight_info_app_metadata_is_executequerys_query_metadata(broker_env, native):
    from horizon_broker.broker.flight.metadata import decode

    client = _client(broker_env.broker)
    sql = "SELECT count(*) AS n FROM accounts"
    info = client.get_flight_info(statement_descriptor(sql), OPTIONS)
    flight = decode(info.app_metadata)
    client.do_get(info.endpoints[0].ticket, OPTIONS).read_all()
    expected = native.execute(sql).metadata
    assert flight.snapshot == expected.snapshot
    assert flight.snapshot_token == expected.snapshot_token
    assert [t.lwm for t in flight.tables] == [t.lwm for t in expected.tables]
    assert flight.tables[0].laggard.server == "srv-a"
    assert info.total_records == 1
