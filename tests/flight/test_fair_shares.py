"""Fair shares through the real doors: what one identity keeps open on Flight SQL (prepared
statements, sessions, results waiting for DoGet) stops at its own quota and leaves the others
served; a result waiting for its DoGet holds no query slot; and per-identity concurrency and rate
quotas from ``[[tokens]]`` hold on gRPC while other identities are answered."""

from __future__ import annotations

import glob
import os
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import adbc_driver_manager
import pyarrow.flight as fl
import pytest

from horizon_broker._core.errors import ResourceExhausted
from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.broker.flight.buffered import SPILL_PREFIX
from horizon_broker.client import connect
from tests.broker.conftest import ADMIN, READER, TOKENS, BrokerEnv, broker_config
from tests.broker.test_status_codes import SLOW_SQL
from tests.flight.conftest import adbc_connect, statement_descriptor
from tests.flight.test_errors_and_auth import details
from tests.waiting import eventually

BIG_SQL = "SELECT * FROM big LIMIT 900000"  # over 4 MiB: its waiting result spills to a file
LANE = "lane-token"
PACED = "paced-token"
ADMIN_CALL = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {ADMIN}".encode())])

_count = iter(range(1_000_000))


def _broker(env: BrokerEnv, spark: Any, **sections: dict) -> BrokerServer:
    tokens = [
        *TOKENS,
        {"name": "lane", "token": LANE, "tables": ["*"], "max_concurrent": 1},
        {"name": "paced", "token": PACED, "tables": ["*"], "queries_per_second": 0.001},
    ]
    config = broker_config(env.redis.url, tokens=tokens, **sections)  # type: ignore[arg-type]
    return BrokerServer(
        config,  # type: ignore[arg-type]
        spark=spark,
        follower=env.broker.follower,
        functions=env.broker.engine.functions,
        view_namespace=f"fair{next(_count)}_",
    ).start()


@pytest.fixture
def quotas(broker_env: BrokerEnv, spark: Any) -> Iterator[BrokerServer]:
    """Two of each Flight SQL kind per identity; two query slots."""
    server = _broker(
        broker_env,
        spark,
        limits={"max_concurrent": 2, "queue_size": 4},
        flight={
            "max_statements_per_identity": 2,
            "max_sessions_per_identity": 2,
            "max_waiting_results_per_identity": 2,
        },
    )
    yield server
    server.stop(0)


@pytest.fixture
def one_slot(broker_env: BrokerEnv, spark: Any) -> Iterator[BrokerServer]:
    """One query slot and no queue: a held slot refuses the next query at once."""
    server = _broker(broker_env, spark, limits={"max_concurrent": 1, "queue_size": 0})
    yield server
    server.stop(0)


def _readers_query_is_answered(server: BrokerServer) -> None:
    with adbc_connect(server.flight_target, READER) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT count(*) AS n FROM accounts")
        assert cursor.fetchone() == (100,)


def _exhausted(error: adbc_driver_manager.Error) -> bool:
    return details(error).get("x-horizon-status") == b"RESOURCE_EXHAUSTED"


def test_prepared_statements_stop_at_the_callers_quota_and_others_still_prepare(quotas):
    with adbc_connect(quotas.flight_target) as connection:
        cursors = [connection.cursor() for _ in range(3)]
        try:
            cursors[0].adbc_prepare("SELECT 1 AS a")
            cursors[1].adbc_prepare("SELECT 2 AS b")
            with pytest.raises(adbc_driver_manager.Error) as refused:
                cursors[2].adbc_prepare("SELECT 3 AS c")
            assert _exhausted(refused.value)
            assert "max_statements_per_identity = 2" in str(refused.value)
            assert "token 'admin' has 2 open prepared statements" in str(refused.value)
            _readers_query_is_answered(quotas)
        finally:
            for cursor in cursors:
                cursor.close()


def test_sessions_stop_at_the_callers_quota_and_others_still_open_one(quotas):
    client = fl.connect(f"grpc://{quotas.flight_target}")
    new_session = fl.Action("SetSessionOptions", b"")  # no cookie sent back: a new session each
    for _ in range(2):
        list(client.do_action(new_session, ADMIN_CALL))
    with pytest.raises(fl.FlightUnavailableError, match="max_sessions_per_identity = 2"):
        list(client.do_action(new_session, ADMIN_CALL))
    reader = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {READER}".encode())])
    assert list(client.do_action(new_session, reader))


def test_results_waiting_for_doget_stop_at_the_callers_quota_and_hold_no_slot(quotas):
    client = fl.connect(f"grpc://{quotas.flight_target}")
    infos = [
        client.get_flight_info(statement_descriptor(f"SELECT {n} AS n"), ADMIN_CALL)
        for n in range(2)
    ]
    with pytest.raises(fl.FlightUnavailableError) as refused:
        client.get_flight_info(statement_descriptor("SELECT 9 AS n"), ADMIN_CALL)
    assert "max_waiting_results_per_identity = 2" in str(refused.value)
    assert "token 'admin' has 2 results waiting" in str(refused.value)
    assert quotas.engine.admission.stats().running == 0
    _readers_query_is_answered(quotas)
    assert client.do_get(infos[0].endpoints[0].ticket, ADMIN_CALL).read_all().num_rows == 1
    client.get_flight_info(statement_descriptor("SELECT 9 AS n"), ADMIN_CALL)  # room again


def _spilled() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), SPILL_PREFIX + "*")))


def test_an_unredeemed_large_result_does_not_starve_another_identitys_query(one_slot):
    before = _spilled()
    client = fl.connect(f"grpc://{one_slot.flight_target}")
    info = client.get_flight_info(statement_descriptor(BIG_SQL), ADMIN_CALL)
    assert one_slot.engine.admission.stats().running == 0
    assert len(_spilled() - before) == 1  # the waiting result is on disk, not in a slot
    _readers_query_is_answered(one_slot)  # the only slot, no queue: a held one would refuse
    assert client.do_get(info.endpoints[0].ticket, ADMIN_CALL).read_all().num_rows == 900_000
    assert _spilled() - before == set()  # read: its file is gone


def test_an_identitys_max_concurrent_queues_its_own_queries_while_others_run(quotas):
    target = quotas.target
    with connect(target, token=LANE) as lane, connect(target, token=ADMIN) as admin:
        slow = lane.start_query(SLOW_SQL)
        try:
            eventually(lambda: quotas.engine.admission.running_of("lane") == 1, "slow runs")
            outcome: list[BaseException] = []

            def second() -> None:
                try:
                    lane.execute("SELECT count(*) + 1 AS n FROM accounts", timeout=60)
                except BaseException as error:
                    outcome.append(error)

            waiter = threading.Thread(target=second)
            waiter.start()
            eventually(lambda: quotas.engine.admission.stats().queued == 1, "lane queues")
            # a slot is free, but lane's own quota holds its second query back; admin passes
            # a key lookup the broker answers from the files: no Spark core needed
            assert admin.query("SELECT balance FROM accounts WHERE id = 3").num_rows == 1
            assert quotas.engine.admission.stats().queued == 1
            assert quotas.engine.admission.running_of("lane") == 1
        finally:
            slow.cancel()
        waiter.join(60)
        assert not outcome  # once the slow one ended, lane's second ran


def test_an_identitys_rate_quota_refuses_naming_it_while_others_are_answered(quotas):
    with connect(quotas.target, token=PACED) as paced, connect(quotas.target, token=ADMIN) as admin:
        assert paced.query("SELECT count(*) + 3 AS n FROM accounts").num_rows == 1
        with pytest.raises(ResourceExhausted, match=r"token 'paced'.*queries_per_second"):
            paced.query("SELECT count(*) + 4 AS n FROM accounts")
        assert admin.query("SELECT count(*) + 5 AS n FROM accounts").num_rows == 1


def test_a_spark_plan_counts_in_its_callers_share(quotas):
    with connect(quotas.target, token=PACED) as paced, connect(quotas.target, token=ADMIN) as admin:
        assert paced.query("SELECT count(*) + 6 AS n FROM accounts").num_rows == 1
        with pytest.raises(ResourceExhausted, match=r"token 'paced'.*queries_per_second"):
            paced.explain("SELECT count(*) FROM accounts", include_spark_plan=True)
        assert admin.explain("SELECT count(*) FROM accounts", include_spark_plan=True).spark_plan
