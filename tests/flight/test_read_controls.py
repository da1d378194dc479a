"""Horizon's read controls through Flight SQL: call headers (x-horizon-*) and Flight SQL session
options set through the ADBC driver, with the same effect as ExecuteQuery's ReadOptions."""

from __future__ import annotations

import re
import threading

import adbc_driver_manager
import pytest

from horizon_broker.watermark import tokens
from tests.broker.conftest import LWM, BrokerEnv, publish_table
from tests.broker.data import UpsertTable, as_rows, oracle
from tests.flight.conftest import COOKIES, adbc_connect, snapshot_of

SESSION_OPTION = "adbc.flight.sql.session.option."


@pytest.fixture
def table(broker_env: BrokerEnv, request: pytest.FixtureRequest) -> UpsertTable:
    """A fresh table of this test at LWM 1200 (partition 0; partition 1 is at 1500)."""
    name = "fl_" + request.node.name.split("[")[0][-40:].replace("test_", "")
    made = UpsertTable(name, broker_env.root)
    publish_table(broker_env, made.desc, made.segments)
    return made


def _report(env: BrokerEnv, table: UpsertTable, lwm: int) -> None:
    env.server_client.report(table.name, {0: (lwm, lwm), 1: (10**6, 10**6)})


def _query(connection, sql: str):  # type: ignore[no-untyped-def]
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetch_arrow_table()


def test_a_query_with_a_commit_token_header_waits_to_read_its_own_write(broker_env, table):
    commit = tokens.encode({table.name: 1400})  # what the ingestion batch returned
    timer = threading.Timer(0.5, _report, (broker_env, table, 1400))
    timer.start()
    with adbc_connect(
        broker_env.broker.flight_target, headers={"x-horizon-min-snapshot": commit}
    ) as connection:
        answer = _query(connection, f"SELECT id, owner, balance FROM {table.name}")
    timer.join()
    snapshot = snapshot_of(answer)
    assert snapshot is not None and snapshot >= 1400
    assert as_rows(answer) == oracle(table.rows_visible_at(snapshot))
    token = answer.schema.metadata[b"horizon.snapshot_token"].decode()
    assert tokens.decode(token)[table.name] == snapshot


def test_a_pinned_read_through_a_header_reads_the_pins_snapshot(broker_env, native, table):
    with native.pin([table.name], snapshot=700, lease=60) as cut:
        with adbc_connect(
            broker_env.broker.flight_target, headers={"x-horizon-pin-id": cut.pin.pin_id}
        ) as connection:
            answer = _query(connection, f"SELECT id, owner, balance FROM {table.name}")
        expected = cut.query(f"SELECT id, owner, balance FROM {table.name}")
    assert snapshot_of(answer) == 700
    assert answer.schema.metadata[b"horizon.snapshot_source"] == b"SNAPSHOT_SOURCE_PIN"
    assert as_rows(answer) == as_rows(expected) == oracle(table.rows_visible_at(700))


def test_session_options_set_through_adbc_apply_to_every_later_query(broker_env, native, table):
    with (
        native.pin([table.name], snapshot=1000, lease=60) as cut,
        adbc_connect(broker_env.broker.flight_target, **{COOKIES: "true"}) as connection,
    ):
        connection.adbc_connection.set_options(
            **{
                SESSION_OPTION + "pin_id": cut.pin.pin_id,
                "adbc.flight.sql.session.optionbool.bypass_cache": "true",
            }
        )
        assert connection.adbc_connection.get_option(SESSION_OPTION + "pin_id") == (cut.pin.pin_id)
        first = _query(connection, f"SELECT count(*) AS n FROM {table.name}")
        second = _query(connection, f"SELECT id, balance FROM {table.name} WHERE id = 3")
        assert connection.adbc_current_db_schema == "horizon"
        with pytest.raises(adbc_driver_manager.Error, match=r"INVALID_VALUE|invalid"):
            connection.adbc_connection.set_options(**{SESSION_OPTION + "max_staleness": "x"})
    assert snapshot_of(first) == snapshot_of(second) == 1000
    assert first.schema.metadata[b"horizon.cache"] == b"bypassed"
    assert first.to_pylist() == [{"n": len(table.rows_visible_at(1000))}]


def test_a_header_overrides_the_session_option_for_its_call(broker_env, native, table):
    with (
        native.pin([table.name], snapshot=700, lease=60) as old,
        native.pin([table.name], snapshot=1000, lease=60) as newer,
        adbc_connect(
            broker_env.broker.flight_target,
            headers={"x-horizon-pin-id": newer.pin.pin_id},
            **{COOKIES: "true"},
        ) as connection,
    ):
        connection.adbc_connection.set_options(**{SESSION_OPTION + "pin_id": old.pin.pin_id})
        assert snapshot_of(_query(connection, f"SELECT * FROM {table.name}")) == 1000


def test_max_staleness_refuses_an_old_default_read_naming_the_laggard(broker_env, native, table):
    sql = f"SELECT * FROM {table.name}"
    with (
        adbc_connect(
            broker_env.broker.flight_target, headers={"x-horizon-max-staleness": "5"}
        ) as connection,
        connection.cursor() as cursor,
    ):
        with pytest.raises(adbc_driver_manager.Error) as caught:
            cursor.execute(sql)
        # An explicit snapshot is not bound by it.
        cursor.execute(f"SELECT count(*) FROM {table.name} VERSION AS OF {LWM}")
        assert cursor.fetchone() == (len(table.rows_visible_at(LWM)),)
    assert "(Unavailable; " in str(caught.value)
    with pytest.raises(Exception) as expected:
        native.query(sql, max_staleness=5.0)

    def without_age(message: str) -> str:  # the age grows between the two calls
        return re.sub(r"is [\d.]+s old", "is ...s old", message)

    assert without_age(str(expected.value)) in without_age(str(caught.value))
    assert "srv-a" in str(caught.value)


def test_a_malformed_read_control_header_is_an_invalid_argument_naming_it(broker_env):
    for header, value, named in (
        ("x-horizon-min-snapshot", "garbage", "snapshot token"),
        ("x-horizon-max-staleness", "soon", "max_staleness"),
        ("x-horizon-pin-id", "a|b", "pin id"),
        ("x-horizon-query-id", "no spaces allowed", "x-horizon-query-id"),
    ):
        with adbc_connect(broker_env.broker.flight_target, headers={header: value}) as connection:
            with connection.cursor() as cursor, pytest.raises(adbc_driver_manager.Error) as caught:
                cursor.execute("SELECT 1 AS one")
            assert "(InvalidArgument; " in str(caught.value)
            assert named in str(caught.value)
