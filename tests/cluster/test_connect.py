"""The broker over Spark Connect (a Connect server from the installed pyspark on loopback): every
query kind, cancellation by operation tags, limits and timeouts; ingestion over Connect is
refused at start, before anything is written."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from horizon_broker.broker.spark.local_cluster import ConnectServer
from horizon_broker.ingest.cli import main_ingest
from tests.cluster import checks
from tests.cluster.conftest import ClusterEnv, cluster_env
from tests.ingest.cli_test_table import TABLE


@pytest.fixture(scope="module")
def server() -> Iterator[ConnectServer]:
    conf = {"spark.sql.shuffle.partitions": "2"}
    with ConnectServer(master="local[2]", conf=conf) as running:
        yield running


@pytest.fixture(scope="module")
def env(server: ConnectServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterEnv]:
    yield from cluster_env(
        tmp_path_factory.mktemp("connect"), f'[spark]\nremote = "{server.url}"\n'
    )


def test_queries_of_every_kind_run_over_connect_and_say_so(env, client):
    checks.query_kinds_answer_like_local_mode(env, client, "connect Spark (sc://127.0.0.1:")


def test_a_key_lookup_over_connect_says_the_broker_did_not_read_the_files(client):
    checks.a_key_lookup_says_why_it_did_not_read_the_files(client, "Spark Connect")


def test_explain_shows_the_connect_servers_physical_plan(client):
    checks.explain_shows_the_physical_plan(client)


def test_a_passthrough_plan_from_a_connect_broker_answers_on_the_callers_spark(client, spark):
    checks.passthrough_plan_answers_on_the_callers_spark(client, spark)


def test_cancel_and_deadline_interrupt_the_connect_operation(client):
    checks.cancel_and_deadline_stop_a_query(client)


def test_literals_stay_literals_and_runtime_errors_keep_their_condition_over_connect(client):
    checks.literals_and_runtime_errors_keep_their_meaning(client)


def test_result_limits_hold_over_connect(client):
    checks.limits_hold(client)


def test_an_unreadable_file_over_connect_falls_back_or_fails_naming_the_segment(env, client):
    checks.an_unreadable_file_falls_back_where_exact_and_fails_clearly_elsewhere(env, client)


def test_ingestion_over_connect_is_refused_at_start_saying_what_to_use(
    env: ClusterEnv, server: ConnectServer, tmp_path, capsys
):
    definition = tmp_path / "over_connect.toml"
    definition.write_text(TABLE.replace('name = "accounts"', 'name = "over_connect"'))
    argv = [
        "--table", str(definition), "--source", str(tmp_path), "--server-id", "c1",
        "--redis", env.redis.url, "--spark-remote", server.url,
    ]  # fmt: skip
    assert main_ingest(argv) == 2
    error = capsys.readouterr().err
    assert "needs a classic Spark session" in error and "--spark-master" in error
    with env.client() as client:
        assert "over_connect" not in [t.name for t in client.tables()]
