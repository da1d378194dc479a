"""Every status code of the API, each produced by a real bad request against a real broker."""

from __future__ import annotations

import time

import grpc
import pytest

from horizon_broker._core.errors import (
    Cancelled,
    DeadlineExceeded,
    FailedPrecondition,
    HorizonError,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    StatusCode,
    Unauthenticated,
    Unavailable,
)
from horizon_broker.broker.api.status import ERROR_TYPES, GRPC_STATUS, status_of
from horizon_broker.client import connect
from tests.broker.conftest import ADMIN, NO_INSPECT, READER, broker_config
from tests.broker.spark_jobs import (
    ExtraBroker,
    assert_group_finished,
    assert_group_stopped,
    engine_group,
    wait_for_jobs,
)
from tests.processes import RedisProcess

# Minutes of work on 2 cores, in scan batches Spark can interrupt (a cancel frees the cores).
SLOW_SQL = "SELECT count(DISTINCT sha2(repeat(owner, 100000), 256)) AS n FROM big"
"""Within every work budget, yet minutes of hashing (100 kB per row), in tasks that a cancel
interrupts within about a second (one Parquet batch)."""


def test_every_horizon_code_maps_to_the_grpc_code_of_the_same_name_and_back():
    for code in StatusCode:
        assert GRPC_STATUS[code].name == code.value
        assert ERROR_TYPES[GRPC_STATUS[code]].code == code


def test_unexpected_errors_become_internal_without_details():
    code, message = status_of(KeyError("secret internal detail"))
    assert code == grpc.StatusCode.INTERNAL
    assert "secret" not in message and "ref" in message


@pytest.mark.parametrize(
    "sql",
    [
        "DROP TABLE accounts",
        "SELECT 1; SELECT 2",
        "SELECT * FROM parquet.`/etc/passwd`",
        "SELECT reflect('java.lang.System', 'exit', 0)",
        "SELECT * FROM accounts WHERE",
        "SELECT no_such_column FROM accounts",
    ],
)
def test_invalid_queries_are_invalid_argument(client, sql):
    with pytest.raises(InvalidArgument) as caught:
        client.query(sql)
    assert str(caught.value)


def test_unknown_table_is_not_found(client):
    with pytest.raises(NotFound, match="nosuch"):
        client.query("SELECT * FROM nosuch")
    with pytest.raises(NotFound, match="nosuch"):
        client.timeline("nosuch")


def test_snapshot_above_the_lwm_is_failed_precondition(client):
    with pytest.raises(FailedPrecondition, match="1200"):
        client.query("SELECT * FROM accounts VERSION AS OF 999999")


def test_missing_or_unknown_token_is_unauthenticated(broker_env):
    with broker_env.client(token=None) as anonymous, pytest.raises(Unauthenticated):
        anonymous.query("SELECT * FROM accounts")
    with broker_env.client(token="wrong") as stranger, pytest.raises(Unauthenticated):
        stranger.tables()


def test_tokens_only_read_and_inspect_what_they_are_granted(broker_env):
    with broker_env.client(token=READER) as reader:
        assert reader.query("SELECT count(*) AS n FROM accounts").to_pylist() == [{"n": 100}]
        assert [table.name for table in reader.tables()] == ["accounts"]
        with pytest.raises(PermissionDenied, match="secret"):
            reader.query("SELECT a.id FROM accounts a JOIN secret s ON a.id = s.id")
        with pytest.raises(PermissionDenied):
            reader.rewrite("SELECT * FROM secret")
        with pytest.raises(PermissionDenied):
            reader.timeline("secret")
        assert reader.watermarks("accounts").lwm == 1200
    with broker_env.client(token=NO_INSPECT) as blind:
        assert blind.query("SELECT count(*) AS n FROM accounts").num_rows == 1
        with pytest.raises(PermissionDenied, match="inspect"):
            blind.watermarks("accounts")
    with broker_env.client(token=ADMIN) as admin:
        assert {t.name for t in admin.tables()} >= {"accounts", "secret", "empty_t"}


def test_result_over_the_requested_max_rows_is_resource_exhausted_naming_it(client):
    with pytest.raises(ResourceExhausted, match=r"more than 5 rows \(the limit max_rows = 5\)"):
        client.query("SELECT * FROM accounts", max_rows=5)
    assert client.query("SELECT * FROM accounts WHERE id <= 5", max_rows=5).num_rows == 5


def test_result_past_max_result_rows_is_refused_and_spark_stops_at_the_planned_limit(
    broker_env, spark
):
    config = broker_config(broker_env.redis.url, limits={"max_result_rows": 50_000})
    with (
        ExtraBroker(config, spark, broker_env) as server,
        connect(server.target, token=ADMIN) as horizon,
    ):
        with pytest.raises(ResourceExhausted, match=r"max_result_rows = 50000"):
            # The union's first part has 100,000 rows, its second hashes 100 kB per row for
            # minutes: the cap is planned as a LIMIT, so Spark stops after 50,001 rows and never
            # runs the expensive part (or, were it reached, the broker cancels it).
            horizon.query(
                "SELECT id, owner, '' AS digest FROM big WHERE id < 100000 "
                "UNION ALL "
                "SELECT id, owner, sha2(repeat(owner, 100000), 256) AS digest FROM big",
                query_id="rows-limit",
            )
        assert_group_finished(spark, engine_group(server, "rows-limit"))
        assert horizon.query("SELECT id FROM big WHERE id < 50000").num_rows == 50_000


def test_streamed_result_past_max_result_bytes_is_resource_exhausted_naming_it(broker_env, spark):
    config = broker_config(broker_env.redis.url, limits={"max_result_bytes": 200_000})
    with (
        ExtraBroker(config, spark, broker_env) as server,
        connect(server.target, token=ADMIN) as horizon,
    ):
        with pytest.raises(ResourceExhausted, match=r"max_result_bytes = 200000"):
            horizon.query("SELECT * FROM big WHERE id < 400000")
        assert horizon.query("SELECT id FROM big WHERE id < 1000").num_rows == 1000


def test_sql_past_the_length_limit_is_resource_exhausted(client):
    sql = "SELECT * FROM accounts WHERE " + " OR ".join(f"id = {i}" for i in range(20_000))
    with pytest.raises(ResourceExhausted):
        client.query(sql)


def test_client_deadline_is_deadline_exceeded_and_stops_the_spark_job(broker_env, client):
    with pytest.raises(DeadlineExceeded):
        client.query(SLOW_SQL, timeout=6.0, query_id="deadline-probe")
    assert_group_stopped(broker_env.broker.spark, engine_group(broker_env.broker, "deadline-probe"))


def test_server_query_timeout_is_deadline_exceeded(broker_env, spark):
    config = broker_config(broker_env.redis.url, limits={"query_timeout_s": 5.0})
    with ExtraBroker(config, spark, broker_env) as server:
        with (
            connect(server.target, token=ADMIN) as horizon,
            pytest.raises(DeadlineExceeded, match="deadline"),
        ):
            horizon.query(SLOW_SQL, query_id="server-timeout")
        assert_group_stopped(spark, engine_group(server, "server-timeout"))


def test_state_store_unreachable_past_the_staleness_limit_is_unavailable(broker_env, spark):
    redis = RedisProcess().start()
    try:
        config = broker_config(redis.url, state={"max_staleness_s": 0.5})
        with (
            ExtraBroker(config, spark, broker_env, own_follower=True) as server,
            connect(server.target, token=ADMIN) as horizon,
        ):
            with pytest.raises(NotFound):
                horizon.query("SELECT * FROM accounts")  # empty store: not registered yet
            redis.close()
            time.sleep(1.5)
            with pytest.raises(Unavailable, match="stale"):
                horizon.query("SELECT 1 AS one")
            assert horizon.health() == "NOT_SERVING"
    finally:
        redis.close()


def test_client_cancel_is_cancelled_and_stops_the_spark_job(broker_env, client):
    call = client.start_query(SLOW_SQL, query_id="cancel-probe")
    spark = broker_env.broker.spark
    group = engine_group(broker_env.broker, "cancel-probe")
    wait_for_jobs(spark, group)
    call.cancel()
    with pytest.raises(Cancelled):
        call.result()
    assert_group_stopped(spark, group)
    assert client.query("SELECT count(*) AS n FROM accounts").to_pylist() == [{"n": 100}]
    assert client.health() == "SERVING"


def test_queue_full_is_resource_exhausted(broker_env, spark):
    config = broker_config(broker_env.redis.url, limits={"max_concurrent": 1, "queue_size": 0})
    with (
        ExtraBroker(config, spark, broker_env) as server,
        connect(server.target, token=ADMIN) as horizon,
    ):
        running = horizon.start_query(SLOW_SQL, query_id="queue-hog")
        group = engine_group(server, "queue-hog")
        wait_for_jobs(spark, group)
        with pytest.raises(ResourceExhausted, match="busy"):
            horizon.query("SELECT 1 AS one")
        running.cancel()
        assert_group_stopped(spark, group)
        deadline = time.monotonic() + 10
        while server.engine.admission.stats().running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert horizon.query("SELECT 1 AS one").to_pylist() == [{"one": 1}]


def test_errors_raised_by_the_client_are_the_one_hierarchy(client):
    with pytest.raises(HorizonError) as caught:
        client.query("SELECT * FROM nosuch")
    assert not isinstance(caught.value, Internal)
