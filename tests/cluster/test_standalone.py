"""The broker on a Spark standalone cluster (a master and two one-core workers on loopback, from
the installed pyspark), and an ingestion server writing batches through the same cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from horizon_broker.broker.spark.local_cluster import StandaloneCluster
from tests.cluster import checks
from tests.cluster.conftest import ClusterEnv, cluster_env
from tests.ingest.cli_test_table import TABLE


@pytest.fixture(scope="module")
def cluster() -> Iterator[StandaloneCluster]:
    with StandaloneCluster(workers=2, cores=1, memory="1g") as running:
        yield running


APP_CONF = (
    '"spark.cores.max" = "1"\n"spark.executor.memory" = "768m"\n'
    '"spark.sql.shuffle.partitions" = "2"\n"spark.driver.host" = "127.0.0.1"\n'
)


@pytest.fixture(scope="module")
def env(
    cluster: StandaloneCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ClusterEnv]:
    section = f'[spark]\nmaster = "{cluster.url}"\n\n[spark.conf]\n{APP_CONF}'
    yield from cluster_env(tmp_path_factory.mktemp("standalone"), section)


def test_queries_of_every_kind_run_on_the_cluster_and_say_so(env, client):
    checks.query_kinds_answer_like_local_mode(env, client, "cluster Spark (spark://127.0.0.1:")


def test_a_key_lookup_on_a_cluster_says_the_broker_did_not_read_the_files(client):
    checks.a_key_lookup_says_why_it_did_not_read_the_files(client, "executors read")


def test_explain_shows_the_clusters_physical_plan(client):
    checks.explain_shows_the_physical_plan(client)


def test_a_passthrough_plan_answers_the_same_on_the_callers_spark(client, spark):
    checks.passthrough_plan_answers_on_the_callers_spark(client, spark)


def test_cancel_and_deadline_stop_a_query_running_on_the_cluster(client):
    checks.cancel_and_deadline_stop_a_query(client)


def test_literals_stay_literals_and_runtime_errors_keep_their_condition_on_the_cluster(client):
    checks.literals_and_runtime_errors_keep_their_meaning(client)


def test_result_limits_hold_on_the_cluster(client):
    checks.limits_hold(client)


def test_an_unreadable_file_on_the_cluster_falls_back_or_fails_naming_the_segment(env, client):
    checks.an_unreadable_file_falls_back_where_exact_and_fails_clearly_elsewhere(env, client)


def test_an_ingestion_server_writes_batches_through_the_cluster(
    env: ClusterEnv, cluster: StandaloneCluster, client, tmp_path: Path
):
    definition = tmp_path / "ingested.toml"
    # Every batch on Spark (a batch this small would run on the driver), so the cluster's
    # executors resolve and write it.
    definition.write_text(
        TABLE.replace('name = "accounts"', 'name = "ingested"\ndriver_batch_rows = 0')
    )
    source = tmp_path / "changelog"
    source.mkdir()
    changes = [{"user_id": f"u{i}", "balance": i, "seq": 1, "deleted": False} for i in range(50)]
    (source / "001.json").write_text("\n".join(json.dumps(c) for c in changes))
    horizon = str(Path(sys.executable).with_name("horizon"))
    command = [
        horizon, "ingest", "--table", str(definition), "--source", str(source),
        "--format", "json", "--server-id", "cluster-ingest", "--redis", env.redis.url,
        "--storage-root", str(tmp_path / "store"), "--spark-master", cluster.url,
        "--spark-conf", "spark.cores.max=1", "--spark-conf", "spark.executor.memory=768m",
        "--spark-conf", "spark.driver.host=127.0.0.1",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    token = done.stdout.rsplit("token ", 1)[1].split()[0]
    result = client.execute("SELECT count(*) AS n FROM ingested", min_snapshot=token, timeout=60)
    assert result.table.to_pylist() == [{"n": 50}]
