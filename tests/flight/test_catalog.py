"""Catalog answers through Flight SQL: ADBC's get_objects / get_table_schema / get_info, and the
catalog commands through pyarrow.flight's generic client; only granted tables are shown."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import adbc_driver_manager
import pyarrow as pa
import pyarrow.flight as fl
import pytest

from tests.broker.conftest import ADMIN, READER, broker_config
from tests.broker.spark_jobs import ExtraBroker
from tests.flight.conftest import (
    adbc_connect,
    flight_client,
    flight_sql_command,
    statement_descriptor,
)


def _table_names(objects: pa.Table) -> list[str]:
    return sorted(
        table["table_name"]
        for catalog in objects.to_pylist()
        for schema in catalog["catalog_db_schemas"] or []
        for table in schema["db_schema_tables"] or []
    )


def test_get_objects_lists_only_the_tables_the_token_may_read_with_their_columns(broker_env, adbc):
    everything = _table_names(adbc.adbc_get_objects().read_all())
    assert {"accounts", "secret", "big", "empty_t"} <= set(everything)
    with adbc_connect(broker_env.broker.flight_target, READER) as reader:
        objects = reader.adbc_get_objects(depth="all").read_all().to_pylist()
    (catalog,) = objects
    (schema,) = catalog["catalog_db_schemas"]
    assert schema["db_schema_name"] == "horizon"
    (table,) = schema["db_schema_tables"]
    assert table["table_name"] == "accounts" and table["table_type"] == "TABLE"
    columns = [(c["column_name"], c["xdbc_type_name"]) for c in table["table_columns"]]
    assert columns == [
        ("id", "BIGINT"),
        ("owner", "STRING"),
        ("balance", "BIGINT"),
        ("validFrom", "BIGINT"),
        ("validUntil", "BIGINT"),
    ]


def test_a_tables_schema_is_the_schema_select_star_answers(adbc, native):
    schema = adbc.adbc_get_table_schema("accounts")
    answered = native.query("SELECT * FROM accounts").schema
    assert [(f.name, f.type) for f in schema] == [(f.name, f.type) for f in answered]
    assert schema.field("id").metadata[b"ARROW:FLIGHT:SQL:TYPE_NAME"] == b"BIGINT"


def test_the_schema_a_tool_lists_names_a_table_sql_resolves(adbc):
    with adbc.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM horizon.accounts")
        assert cursor.fetchone() == (100,)


def test_get_info_says_horizon_and_its_version(adbc):
    info = adbc.adbc_get_info()
    assert info["vendor_name"] == "Horizon"
    assert info["vendor_version"]


def _answer(client: fl.FlightClient, command: bytes) -> pa.Table:
    info = client.get_flight_info(fl.FlightDescriptor.for_command(command))
    table = client.do_get(info.endpoints[0].ticket).read_all()
    assert table.schema.equals(info.schema)
    return table


def test_catalog_commands_answer_through_the_generic_flight_client(broker_env):
    client = flight_client(broker_env)
    assert _answer(client, flight_sql_command("CommandGetCatalogs")).num_rows == 0
    schemas = _answer(client, flight_sql_command("CommandGetDbSchemas"))
    assert schemas.to_pylist() == [{"catalog_name": None, "db_schema_name": "horizon"}]
    types = _answer(client, flight_sql_command("CommandGetTableTypes"))
    assert types.to_pylist() == [{"table_type": "TABLE"}]
    keys = _answer(client, flight_sql_command("CommandGetPrimaryKeys", (3, b"ACCOUNTS")))
    assert [(r["table_name"], r["column_name"], r["key_sequence"]) for r in keys.to_pylist()] == [
        ("accounts", "id", 1)
    ]
    tables = _answer(client, flight_sql_command("CommandGetTables", (3, b"acc%")))
    assert tables.column("table_name").to_pylist() == ["accounts"]
    assert (
        _answer(client, flight_sql_command("CommandGetExportedKeys", (3, b"accounts"))).num_rows
        == 0
    )


def test_an_ungranted_tables_primary_key_is_not_revealed(broker_env):
    client = flight_client(broker_env, token=READER)
    keys = _answer(client, flight_sql_command("CommandGetPrimaryKeys", (3, b"secret")))
    assert keys.num_rows == 0


def test_sql_info_answers_the_ids_asked_as_a_dense_union(broker_env):
    client = flight_client(broker_env)
    # CommandGetSqlInfo.info = [0, 3, 504] (packed repeated uint32, field 1)
    info = _answer(client, flight_sql_command("CommandGetSqlInfo", (1, bytes([0, 3, 0xF8, 0x03]))))
    assert info.to_pylist() == [
        {"info_name": 0, "value": "Horizon"},
        {"info_name": 3, "value": True},
        {"info_name": 504, "value": "`"},
    ]


def test_get_schema_of_a_statement_is_its_result_schema_with_the_snapshot(broker_env, native):
    client = flight_client(broker_env)
    result = client.get_schema(statement_descriptor("SELECT id, owner FROM accounts"))
    assert result.schema.names == ["id", "owner"]
    assert result.schema.metadata[b"horizon.snapshot"] == b"1200"
    assert result.schema.equals(native.query("SELECT id, owner FROM accounts").schema)


def test_a_tables_schema_waits_for_an_admission_slot_like_a_query(broker_env, spark):
    """Listing a schema runs Spark's analysis on the shared driver: with every slot taken it
    queues behind the running queries, and answers once a slot is free."""
    config = broker_config(broker_env.redis.url, limits={"max_concurrent": 1, "queue_size": 1})
    with ExtraBroker(config, spark, broker_env) as server:  # a fresh broker: no schema known yet
        admission = server.engine.admission
        with ThreadPoolExecutor(1) as pool, adbc_connect(server.flight_target, ADMIN) as conn:
            with admission.slot():  # every slot taken (a running query's)
                pending = pool.submit(conn.adbc_get_table_schema, "accounts")
                wait_until(lambda: admission.stats().queued == 1 or pending.done())
                assert not pending.done() and admission.stats().queued == 1
            schema = pending.result(timeout=120)
    assert schema.names == ["id", "owner", "balance", "validFrom", "validUntil"]
    assert admission.stats().running == 0 and admission.stats().queued == 0


def test_a_tables_schema_is_refused_when_no_slot_may_even_queue(one_slot):
    with (
        adbc_connect(one_slot.flight_target, ADMIN) as conn,
        one_slot.engine.admission.slot(),  # the one slot taken, none may queue
        pytest.raises(adbc_driver_manager.Error, match="busy") as refused,
    ):
        conn.adbc_get_table_schema("accounts")
    assert "token 'admin'" in str(refused.value)  # counted in the caller's share
    with adbc_connect(one_slot.flight_target, ADMIN) as conn:
        assert conn.adbc_get_table_schema("accounts").names[0] == "id"


def wait_until(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll ``condition`` (the bound only keeps a broken run from hanging)."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
