"""The checks both cluster modes pass: every query kind, explain, passthrough, cancel, deadline,
limits, and the fallback on an unreadable file, through the broker's gRPC API."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from horizon_broker._core.errors import (
    Cancelled,
    DeadlineExceeded,
    InvalidArgument,
    ResourceExhausted,
    Unavailable,
)
from tests.broker.data import as_rows, oracle
from tests.cluster.conftest import LWM, SLOW_SQL, ClusterEnv


def query_kinds_answer_like_local_mode(env: ClusterEnv, client: Any, execution: str) -> None:
    accounts = env.tables["accounts"]
    result = client.execute("SELECT id, owner, balance FROM accounts")
    assert execution in result.metadata.execution, result.metadata.execution
    assert result.snapshot == LWM
    assert as_rows(result.table) == oracle(accounts.rows_visible_at(LWM))
    old = client.query("SELECT id, owner, balance FROM accounts VERSION AS OF 700")
    assert as_rows(old) == oracle(accounts.rows_visible_at(700))
    joined = client.query(
        "SELECT count(*) AS n FROM accounts a JOIN accounts b ON a.id = b.id"
    ).to_pylist()
    assert joined == [{"n": len(accounts.rows_visible_at(LWM))}]
    changes = client.query(
        "SELECT count(*) AS n FROM table_changes('accounts', 900, 1100) "
        "WHERE _change_type = 'update_postimage'"
    ).to_pylist()
    assert changes == [{"n": 10}]


def a_key_lookup_says_why_it_did_not_read_the_files(client: Any, reason: str) -> None:
    result = client.execute("SELECT * FROM accounts WHERE id = 7")
    assert result.table.num_rows == 1
    assert "direct key lookup bypassed" in result.metadata.execution
    assert reason in result.metadata.execution, result.metadata.execution


def explain_shows_the_physical_plan(client: Any) -> None:
    explained = client.explain("SELECT count(*) FROM accounts", include_spark_plan=True)
    assert "parquet" in explained.spark_plan.lower(), explained.spark_plan


def passthrough_plan_answers_on_the_callers_spark(client: Any, spark: Any) -> None:
    sql = "SELECT id, owner, balance FROM accounts"
    on_broker = client.query(sql)
    frame = client.passthrough(spark, sql)  # on the test's own local Spark
    assert sorted(tuple(r) for r in frame.collect()) == sorted(
        tuple(r.values()) for r in on_broker.to_pylist()
    )


def _ended_and_let_go(client: Any, query_id: str, state: str, timeout: float = 60.0) -> Any:
    """The broker's record of ``query_id`` once it ended in ``state`` and (where Spark can tell)
    none of its jobs runs any more."""
    deadline = time.monotonic() + timeout
    record = None
    while time.monotonic() < deadline:
        record = next((q for q in client.queries() if q.query_id == query_id), None)
        if (
            record is not None
            and record.state == state
            and (not record.HasField("spark_jobs_running") or record.spark_jobs_running == 0)
        ):
            return record
        time.sleep(0.2)
    raise AssertionError(f"query {query_id} did not end {state} with its jobs gone: {record}")


def _running_jobs(client: Any, query_id: str, timeout: float = 60.0) -> None:
    """Once ``query_id`` runs Spark jobs, so a cancel must stop tasks, not a plan (where Spark
    cannot tell, as over Spark Connect: a few seconds after the broker took it)."""
    deadline = time.monotonic() + timeout
    record = None
    while time.monotonic() < deadline:
        record = next((q for q in client.queries() if q.query_id == query_id), None)
        if record is not None and not record.HasField("spark_jobs_running"):
            time.sleep(3)
            return
        if record is not None and record.spark_jobs_running > 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"query {query_id} never ran a Spark job: {record}")


def cancel_and_deadline_stop_a_query(client: Any) -> None:
    call = client.start_query(SLOW_SQL, query_id="cluster-cancel", cache=False)
    _running_jobs(client, "cluster-cancel")
    call.cancel()
    with pytest.raises(Cancelled):
        call.result()
    _ended_and_let_go(client, "cluster-cancel", "cancelled")
    with pytest.raises(DeadlineExceeded):
        client.query(SLOW_SQL, timeout=4.0, cache=False, query_id="cluster-deadline")
    _ended_and_let_go(client, "cluster-deadline", "deadline")
    # The cores were given back: a small query answers (the slow one would hold them for
    # minutes had Spark not stopped it); its own deadline only guards against a hang.
    small = client.query("SELECT count(*) AS n FROM accounts", cache=False, timeout=120)
    assert small.to_pylist() == [{"n": 100}]


def literals_and_runtime_errors_keep_their_meaning(client: Any) -> None:
    """``${...}`` in a literal is text, not the engine's environment; a caller's runtime error,
    whether Spark raises it while planning the collection or in a task, keeps its condition."""
    for text in ("${env:HOME}", "${spark.app.name}", "a${nope}b"):
        answer = client.query(f"SELECT '{text}' AS t", cache=False)
        assert answer.column("t").to_pylist() == [text]
    for sql in (
        "SELECT element_at(array(1, 2), 5) FROM accounts",
        "SELECT element_at(array(1, 2), cast(id AS int) + 5) FROM accounts",
    ):
        with pytest.raises(InvalidArgument, match="INVALID_ARRAY_INDEX"):
            client.query(sql, cache=False)


def limits_hold(client: Any) -> None:
    with pytest.raises(ResourceExhausted, match="max_rows"):
        client.query("SELECT * FROM accounts", max_rows=5)


def an_unreadable_file_falls_back_where_exact_and_fails_clearly_elsewhere(
    env: ClusterEnv, client: Any
) -> None:
    table = env.tables["fallback_t"]
    assert client.query("SELECT count(*) AS n FROM fallback_t").to_pylist() == [{"n": 100}]
    os.remove(table.o0.location[0])
    with pytest.raises(Unavailable) as refused:
        client.execute("SELECT * FROM fallback_t", cache=False)
    assert str(table.o0.id) in str(refused.value)
    old = client.query("SELECT id, owner, balance FROM fallback_t VERSION AS OF 900", cache=False)
    assert as_rows(old) == oracle(table.rows_visible_at(900, overwrite=False))
