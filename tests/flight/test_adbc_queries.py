"""Queries through the ADBC Flight SQL driver (DB-API) answer exactly what ExecuteQuery answers
for the same query at the same snapshot, and carry Horizon's query metadata."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from tests.broker.conftest import LWM
from tests.broker.data import as_rows, oracle
from tests.flight.conftest import snapshot_of


def test_a_query_answers_the_rows_execute_query_answers_at_the_same_snapshot(
    broker_env, adbc, native
):
    sql = "SELECT id, owner, balance FROM accounts ORDER BY id"
    with adbc.cursor() as cursor:
        cursor.execute(sql)
        flight = cursor.fetch_arrow_table()
    expected = native.execute(sql)
    assert snapshot_of(flight) == expected.snapshot == LWM
    assert flight.to_pylist() == expected.table.to_pylist()
    assert as_rows(flight) == oracle(broker_env.tables["accounts"].rows_visible_at(LWM))
    assert flight.schema.equals(expected.table.schema)  # same types, names, nullability


def test_fetch_df_gives_the_same_frame_as_the_native_answer(adbc, native):
    sql = "SELECT id, owner, balance, validFrom FROM accounts WHERE id < 20 ORDER BY id"
    with adbc.cursor() as cursor:
        cursor.execute(sql)
        frame = cursor.fetch_df()
    assert frame.equals(native.query(sql).to_pandas())


def test_the_result_schema_carries_the_snapshot_token_and_per_table_lwm(adbc, native):
    with adbc.cursor() as cursor:
        cursor.execute("SELECT count(*) AS n FROM accounts")
        table = cursor.fetch_arrow_table()
    meta = table.schema.metadata
    assert meta[b"horizon.snapshot"] == str(LWM).encode()
    assert meta[b"horizon.snapshot_source"] == b"SNAPSHOT_SOURCE_LWM"
    expected = native.execute("SELECT count(*) AS n FROM accounts").metadata
    assert meta[b"horizon.snapshot_token"].decode() == expected.snapshot_token
    detail = json.loads(meta[b"horizon.query_metadata"])
    (read,) = detail["tables"]
    assert read["table"] == "accounts" and int(read["lwm"]) == LWM
    assert read["laggard"]["server"] == "srv-a"
    assert read["staleness_seconds"] == detail["staleness_seconds"] == 0.0  # state is fresh


@pytest.mark.parametrize("snapshot", [499, 700, 1000])
def test_version_as_of_reads_the_versions_valid_at_that_snapshot(broker_env, adbc, snapshot):
    sql = f"SELECT id, owner, balance FROM accounts VERSION AS OF {snapshot}"
    with adbc.cursor() as cursor:
        cursor.execute(sql)
        table = cursor.fetch_arrow_table()
    assert snapshot_of(table) == snapshot
    assert table.schema.metadata[b"horizon.snapshot_source"] == b"SNAPSHOT_SOURCE_VERSION"
    assert as_rows(table) == oracle(broker_env.tables["accounts"].rows_visible_at(snapshot))


def test_a_parameterised_query_binds_values_by_position(adbc, native):
    with adbc.cursor() as cursor:
        cursor.execute(
            "SELECT id, owner FROM accounts WHERE id BETWEEN ? AND ? AND owner <> ? ORDER BY id",
            (5, 9, "owner7"),
        )
        rows = cursor.fetchall()
    expected = native.query(
        "SELECT id, owner FROM accounts WHERE id BETWEEN 5 AND 9 AND owner <> 'owner7' ORDER BY id"
    )
    assert rows == [tuple(row.values()) for row in expected.to_pylist()]


def test_a_bound_string_comes_back_verbatim_and_never_runs_as_sql(adbc):
    hostile = "x'); DROP TABLE accounts; -- \\' \" ? :name"
    with adbc.cursor() as cursor:
        cursor.execute(
            "SELECT ? AS s, count(*) AS n FROM accounts WHERE owner = ?", (hostile, hostile)
        )
        assert cursor.fetchall() == [(hostile, 0)]


def test_a_prepared_statement_reports_its_schemas_and_runs_with_new_values_each_time(adbc):
    with adbc.cursor() as cursor:
        cursor.adbc_prepare("SELECT id, balance FROM accounts WHERE id = ?")
        assert pa.schema(cursor.adbc_statement.get_parameter_schema()).names == ["parameter_1"]
        answers = []
        for key in (3, 60, 1000):
            cursor.execute("SELECT id, balance FROM accounts WHERE id = ?", (key,))
            answers.append(cursor.fetchall())
    assert answers == [[(3, 31)], [(60, 600)], []]


def test_execute_schema_knows_the_result_schema_without_running(adbc, native):
    sql = "SELECT id, owner FROM accounts WHERE balance > 100"
    with adbc.cursor() as cursor:
        schema = cursor.adbc_execute_schema(sql)  # Flight SQL GetSchema
        assert cursor.adbc_prepare("SELECT id FROM accounts") is None  # no parameters
        cursor.execute("SELECT id FROM accounts WHERE id = 5")
        assert cursor.fetchall() == [(5,)]
    assert schema.equals(native.query(sql).schema)


def test_a_repeated_query_is_a_result_cache_hit_with_the_same_rows(adbc):
    sql = "SELECT owner, balance FROM accounts WHERE balance > 300 ORDER BY owner"
    with adbc.cursor() as cursor:
        cursor.execute(sql)
        first = cursor.fetch_arrow_table()
        cursor.execute(sql)
        second = cursor.fetch_arrow_table()
    assert second.schema.metadata[b"horizon.cache"] == b"hit"
    assert second.to_pylist() == first.to_pylist()


def test_an_empty_visible_set_still_answers_the_table_schema(adbc, native):
    with adbc.cursor() as cursor:
        cursor.execute("SELECT * FROM empty_t")
        table = cursor.fetch_arrow_table()
    assert table.num_rows == 0
    assert table.schema.names == native.query("SELECT * FROM empty_t").schema.names
