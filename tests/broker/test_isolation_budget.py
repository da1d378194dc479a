"""Bounded work: hostile or careless queries are refused before Spark runs anything, the row cap
is planned into the query, results stay bounded in memory, and planning takes an admission slot;
after each refusal another caller's query is answered at once."""

from __future__ import annotations

import pytest

from horizon_broker._core.errors import InvalidArgument, ResourceExhausted
from horizon_broker.client import connect
from tests.broker.conftest import ADMIN, broker_config
from tests.broker.spark_jobs import ExtraBroker, engine_group, job_statuses, wait_for_jobs
from tests.broker.test_status_codes import SLOW_SQL

BREADTH = "SELECT count(*) FROM " + ", ".join(f"accounts a{i}" for i in range(2_000))

HOSTILE = [
    ("SELECT * FROM range(1000000000000)", ResourceExhausted, "max_generated_rows"),
    ("SELECT * FROM range(0, 10, 1, 100000000)", ResourceExhausted, "max_partitions"),
    ("SELECT /*+ REPARTITION(100000000) */ * FROM accounts", ResourceExhausted, "max_partitions"),
    ("SELECT /*+ NO_SUCH_HINT(accounts) */ * FROM accounts", InvalidArgument, "hint NO_SUCH_HINT"),
    ("SELECT /*+ COALESCE('x') */ * FROM accounts", InvalidArgument, "hint COALESCE"),
    ("SELECT explode(sequence(1, 1000000000))", ResourceExhausted, "max_array_elements"),
    ("SELECT size(sequence(1, id * 1000000)) FROM accounts", ResourceExhausted, "constant"),
    ("SELECT array_repeat(id, 100000000) FROM accounts", ResourceExhausted, "max_array_elements"),
    ("SELECT repeat(owner, 1000000000) FROM accounts", ResourceExhausted, "max_string_length"),
    (
        "SELECT count(*) FROM accounts a CROSS JOIN accounts b CROSS JOIN accounts c",
        ResourceExhausted,
        "max_cross_joins",
    ),
    ("SELECT count(*) FROM big a CROSS JOIN big b", ResourceExhausted, "max_estimated_rows"),
    (
        "SELECT count(*) FROM big a JOIN big b ON a.id < b.id",
        ResourceExhausted,
        "max_estimated_rows",
    ),
    (
        "SELECT count(*) FROM big LATERAL VIEW explode(sequence(1, 10000)) s AS x",
        ResourceExhausted,
        "max_estimated_rows",
    ),
    (BREADTH, ResourceExhausted, "max_table_references"),
    (
        "SELECT size(transform(sequence(1, 90000), x -> repeat('q', 90000))) FROM accounts",
        ResourceExhausted,
        "max_value_size",
    ),
    (
        "SELECT aggregate(sequence(1, 60), owner, (acc, x) -> concat(acc, acc)) FROM accounts",
        ResourceExhausted,
        "max_string_length",
    ),
    ("SELECT format_string('%2000000000d', id) FROM accounts", ResourceExhausted, "string_length"),
    (
        "SELECT count(*) FROM accounts GROUP BY CUBE(id, owner, balance, id + 1, id + 2, "
        "id + 3, id + 4, id + 5, id + 6, id + 7, id + 8, id + 9, id + 10, id + 11, id + 12, "
        "id + 13, id + 14, id + 15)",
        ResourceExhausted,
        "max_grouping_sets",
    ),
]


@pytest.mark.parametrize(("sql", "error", "names"), HOSTILE, ids=[h[2] for h in HOSTILE])
def test_unbounded_work_is_refused_before_spark_and_others_are_still_answered(
    broker_env, spark, client, sql, error, names
):
    query_id = f"hostile-{abs(hash(sql)) % 10**8}"
    with pytest.raises(error, match=names):
        client.query(sql, query_id=query_id, cache=False)
    assert job_statuses(spark, engine_group(broker_env.broker, query_id)) == [], (
        "Spark ran the refused query"
    )
    with broker_env.client() as other:
        assert other.query("SELECT count(*) AS n FROM accounts").to_pylist() == [{"n": 100}]


def test_work_within_the_budget_runs(client):
    assert client.query("SELECT count(*) AS n FROM range(0, 1000000, 1, 4)").to_pylist() == [
        {"n": 1_000_000}
    ]
    joined = client.query(
        "SELECT count(*) AS n FROM big a, big b WHERE a.id = b.id AND a.id < 10"
    ).to_pylist()
    assert joined == [{"n": 10}]
    small_cross = client.query("SELECT count(*) AS n FROM accounts a CROSS JOIN accounts b")
    assert small_cross.to_pylist() == [{"n": 100 * 100}]
    hinted = client.query(
        "SELECT /*+ REPARTITION(3), BROADCAST(a) */ count(*) AS n FROM accounts a"
    )
    assert hinted.to_pylist() == [{"n": 100}]


def test_the_budget_is_configuration(broker_env, spark):
    config = broker_config(
        broker_env.redis.url, limits={"max_generated_rows": 10, "max_cross_joins": 0}
    )
    with ExtraBroker(config, spark, broker_env) as server, connect(server.target, token=ADMIN) as c:
        with pytest.raises(ResourceExhausted, match="max_generated_rows = 10"):
            c.query("SELECT * FROM range(11)")
        assert c.query("SELECT count(*) AS n FROM range(10)").to_pylist() == [{"n": 10}]
        with pytest.raises(ResourceExhausted, match="max_cross_joins = 0"):
            c.query("SELECT count(*) FROM accounts a CROSS JOIN accounts b")


def test_an_ordered_result_over_the_byte_limit_is_refused_while_it_is_held(broker_env, spark):
    config = broker_config(broker_env.redis.url, limits={"max_result_bytes": 300_000})
    with ExtraBroker(config, spark, broker_env) as server, connect(server.target, token=ADMIN) as c:
        with pytest.raises(ResourceExhausted, match="max_result_bytes"):
            c.query("SELECT id, owner, balance FROM big ORDER BY id DESC", cache=False)
        assert c.query("SELECT id FROM big ORDER BY id LIMIT 3").to_pylist() == [
            {"id": 0},
            {"id": 1},
            {"id": 2},
        ]


def test_a_spark_plan_takes_an_admission_slot_like_a_query(broker_env, spark):
    config = broker_config(broker_env.redis.url, limits={"max_concurrent": 1, "queue_size": 0})
    with ExtraBroker(config, spark, broker_env) as server, connect(server.target, token=ADMIN) as c:
        running = c.start_query(SLOW_SQL, query_id="plan-hog", cache=False)
        try:
            wait_for_jobs(spark, engine_group(server, "plan-hog"))
            with pytest.raises(ResourceExhausted, match="busy"):
                c.explain("SELECT count(*) FROM accounts", include_spark_plan=True)
            assert c.explain("SELECT count(*) FROM accounts").rewritten_sql  # no Spark: no slot
        finally:
            running.cancel()
