"""Engine handles belong to the broker: a caller's query id is a label, unique per identity
among its running queries, and another identity that sends the same id reaches nothing of the
first caller's: not its Spark jobs, not its record. Inspection shows a query's tables and error
message only to whoever may read every table it read."""

from __future__ import annotations

import time

import pytest

from horizon_broker._core.errors import AlreadyExists, Cancelled, InvalidArgument
from tests.broker.conftest import ADMIN, READER
from tests.broker.spark_jobs import engine_group, job_statuses, wait_for_jobs
from tests.broker.test_status_codes import SLOW_SQL

READER_SLOW_SQL = "SELECT count(DISTINCT sha2(repeat(owner, 100000), 256)) AS n FROM accounts"


def test_another_identity_cancelling_a_call_with_the_same_id_leaves_the_first_callers_jobs(
    broker_env, spark
):
    with broker_env.client(ADMIN) as admin, broker_env.client(READER) as reader:
        first = admin.start_query(SLOW_SQL, query_id="shared-id", cache=False)
        try:
            group = engine_group(broker_env.broker, "shared-id")
            wait_for_jobs(spark, group)
            second = reader.start_query(READER_SLOW_SQL, query_id="shared-id", cache=False)
            second.cancel()
            with pytest.raises(Cancelled):
                second.result()
            time.sleep(1.0)  # a cancel reaches running tasks within about a second
            states = job_statuses(spark, group)
            assert "RUNNING" in states and "FAILED" not in states, states
            listed = [q for q in admin.queries(running_only=True) if q.query_id == "shared-id"]
            assert [q.identity for q in listed] == ["admin"]
        finally:
            first.cancel()


def test_a_second_running_query_with_the_same_id_of_one_identity_is_already_exists(
    broker_env, spark
):
    with broker_env.client(ADMIN) as admin:
        first = admin.start_query(SLOW_SQL, query_id="twice", cache=False)
        try:
            wait_for_jobs(spark, engine_group(broker_env.broker, "twice"))
            with pytest.raises(AlreadyExists, match="'twice' is already running"):
                admin.query("SELECT 1 AS one", query_id="twice", cache=False)
        finally:
            first.cancel()
        with pytest.raises(Cancelled):
            first.result()
        assert admin.query("SELECT 1 AS one", query_id="twice").to_pylist() == [{"one": 1}]


def test_inspection_hides_the_tables_and_message_of_a_query_on_tables_it_may_not_read(
    broker_env,
):
    with broker_env.client(ADMIN) as admin, broker_env.client(READER) as reader:
        with pytest.raises(InvalidArgument, match="quoted-literal-4711"):
            admin.query(
                "SELECT raise_error('quoted-literal-4711') FROM secret",
                query_id="hidden-failure",
                cache=False,
            )
        admin.query("SELECT count(*) AS n FROM secret", query_id="hidden-read", cache=False)
        by_admin = {q.query_id: q for q in admin.queries() if q.query_id.startswith("hidden-")}
        by_reader = {q.query_id: q for q in reader.queries() if q.query_id.startswith("hidden-")}
    assert "quoted-literal-4711" in by_admin["hidden-failure"].message
    assert list(by_admin["hidden-read"].tables) == ["secret"]
    failure, read = by_reader["hidden-failure"], by_reader["hidden-read"]
    assert failure.status == "INVALID_ARGUMENT"
    assert (failure.sql, failure.message, list(failure.tables)) == ("", "", [])
    assert read.status == "OK"
    assert (read.sql, read.message, list(read.tables)) == ("", "", [])
