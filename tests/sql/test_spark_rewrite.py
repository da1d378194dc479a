"""The rewriter against real Spark: rewritten queries over versioned data return exactly what the
original queries return over tables holding only the versions visible at the snapshot."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from horizon_broker.broker.sql import Catalog, CatalogTable, FunctionPolicy, rewrite
from horizon_broker.broker.sql.functions import DENIED_FUNCTIONS
from horizon_broker.broker.sql.functions_from_spark import function_policy_from_spark
from horizon_broker.watermark.catalog import ColumnSpec
from tests.sql.conftest import SAMPLE_BUILTINS, make_catalog
from tests.sql.spark_helpers import (
    bag,
    bags_of_many,
    register,
    register_source,
    version_chains,
    visible,
)
from tests.sql.test_corpus import CASES, Ok

pytestmark = pytest.mark.spark

#: Each example runs a dozen Spark queries; shrinking a failure could take many minutes, so the
#: first failing example is reported as found.
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)

A_SCHEMA = "k int, v int"
B_SCHEMA = "id int, k int, w int"

DIFFERENTIAL_QUERIES = (
    "SELECT * FROM a",
    "SELECT a.k, a.v, b.id, b.w FROM a LEFT JOIN b ON a.k = b.k",
    "SELECT a.k, b.id, a.validFrom FROM a FULL OUTER JOIN b ON a.k = b.k AND b.w > 0",
    "SELECT k, count(*) AS n, sum(w) AS s, max(validUntil) AS u FROM b GROUP BY k",
    "SELECT x.k AS xk, y.k AS yk FROM a x JOIN a y ON x.v = y.v",
    "SELECT k FROM a WHERE k IN (SELECT k FROM b WHERE w > 0) "
    "OR EXISTS (SELECT 1 FROM b WHERE b.k = a.k + 1)",
    "WITH a AS (SELECT * FROM a WHERE v >= 0) "
    "SELECT a.k, (SELECT max(w) FROM b WHERE b.k = a.k) AS m FROM a",
    "SELECT k FROM a UNION ALL SELECT k FROM b EXCEPT ALL SELECT k FROM b WHERE w < 0",
    "SELECT count(*) FROM b LEFT ANTI JOIN a ON a.k = b.k",
)


@pytest.fixture(scope="module")
def policy(spark) -> FunctionPolicy:  # type: ignore[no-untyped-def]
    return function_policy_from_spark(spark)


def _table(name: str, columns: tuple[tuple[str, str], ...], key: str, lwm: int) -> CatalogTable:
    return CatalogTable(
        name=name,
        columns=tuple(ColumnSpec(n, t) for n, t in columns),
        primary_key=(key,),
        upsert=True,
        lwm=lwm,
        retention_horizon=0,
        source_view=f"__horizon_{name}_g1",
    )


def test_function_policy_from_spark_has_the_builtins_and_not_the_deny_list(policy) -> None:  # type: ignore[no-untyped-def]
    for name in SAMPLE_BUILTINS:
        assert policy.is_known(name) == (name not in DENIED_FUNCTIONS), name
    assert not policy.allowed & DENIED_FUNCTIONS
    assert policy.is_known("percentile_approx") and policy.is_known("range")


def test_every_accepted_corpus_query_is_valid_spark_sql(spark, policy) -> None:  # type: ignore[no-untyped-def]
    catalog = make_catalog()
    schemas = {
        table.name: ", ".join(f"`{c.name}` {c.type}" for c in table.columns) for table in catalog
    }
    for table in catalog:
        validity = ", validFrom bigint, validUntil bigint" if table.upsert else ""
        register(
            spark, table.source_view, f"_segment_row string, {schemas[table.name]}{validity}", []
        )
    try:
        for case in CASES:
            if isinstance(case, Ok):
                sql = rewrite(case.sql, catalog, functions=policy).sql
                spark.sql(sql).schema  # noqa: B018 - analysis fails loudly on invalid SQL
    finally:
        for table in catalog:
            spark.catalog.dropTempView(table.source_view)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=NO_SHRINK,
)
@given(
    a_rows=version_chains(),
    b_rows=version_chains(key_count=5),
    b_keys=st.lists(st.integers(0, 4), min_size=5, max_size=5),
    snapshot=st.integers(0, 36),
)
def test_rewritten_queries_equal_the_originals_over_the_visible_versions(
    spark, policy, a_rows, b_rows, b_keys, snapshot
) -> None:  # type: ignore[no-untyped-def]
    b_full = [(pk, b_keys[pk], w, vf, vu) for pk, w, vf, vu in b_rows]
    catalog = Catalog(
        [
            _table("a", (("k", "int"), ("v", "int")), "k", snapshot),
            _table("b", (("id", "int"), ("k", "int"), ("w", "int")), "id", snapshot),
        ]
    )
    register_source(spark, "__horizon_a_g1", A_SCHEMA, a_rows)
    register_source(spark, "__horizon_b_g1", B_SCHEMA, b_full)
    validity = ", validFrom bigint, validUntil bigint"
    register(spark, "a", A_SCHEMA + validity, visible(a_rows, snapshot))
    register(spark, "b", B_SCHEMA + validity, visible(b_full, snapshot))
    expected = bags_of_many(spark, DIFFERENTIAL_QUERIES)
    spark.catalog.dropTempView("a")
    spark.catalog.dropTempView("b")
    results = [rewrite(query, catalog, functions=policy) for query in DIFFERENTIAL_QUERIES]
    assert all(result.plan.snapshot == snapshot for result in results)
    actual = bags_of_many(spark, [result.sql for result in results])
    for query, want, got in zip(DIFFERENTIAL_QUERIES, expected, actual, strict=True):
        assert got == want, query


# --- the Pinot upsert design's own examples, on real Spark ---------------------------------------

ACCOUNTS = (("user_id", "string"), ("balance", "int"))
ACCOUNT_ROWS = [
    ("abc-12", 100, 1, 3),
    ("abc-13", 102, 2, 4),
    ("abc-12", 200, 3, None),
    ("abc-13", 300, 4, None),
]


def _accounts(spark, lwm: int) -> Catalog:  # type: ignore[no-untyped-def]
    register_source(spark, "__horizon_accounts_g1", "user_id string, balance int", ACCOUNT_ROWS)
    return Catalog([_table("accounts", ACCOUNTS, "user_id", lwm)])


@pytest.mark.parametrize(
    ("snapshot", "average", "abc12"), [(2, 101.0, 100), (3, 151.0, 200), (4, 250.0, 200)]
)
def test_pinot_account_balances_average_per_snapshot(
    spark, policy, snapshot: int, average: float, abc12: int
) -> None:  # type: ignore[no-untyped-def]
    catalog = _accounts(spark, lwm=4)
    avg_sql = f"SELECT avg(balance) FROM accounts VERSION AS OF {snapshot}"
    assert spark.sql(rewrite(avg_sql, catalog, functions=policy).sql).first()[0] == average
    one = f"SELECT balance FROM accounts VERSION AS OF {snapshot} WHERE user_id = 'abc-12'"
    rows = spark.sql(rewrite(one, catalog, functions=policy).sql).collect()
    assert [row[0] for row in rows] == [abc12]


PINOT_KEY_ROWS = [("a-1", 1, 500, 1000), ("a-1", 2, 1000, None)]


@pytest.mark.parametrize(
    ("lwm", "values"),
    [(800, [1]), (1200, [2]), (1000, [2]), (999, [1]), (400, [])],
    ids=[
        "example-1-lwm-800",
        "example-2-lwm-1200",
        "replacement-instant",
        "just-before",
        "before-insert",
    ],
)
def test_pinot_low_watermark_examples_see_exactly_one_right_version(
    spark, policy, lwm: int, values: list[int]
) -> None:  # type: ignore[no-untyped-def]
    register_source(spark, "__horizon_upsert_table_g1", "pk string, value int", PINOT_KEY_ROWS)
    catalog = Catalog([_table("upsert_table", (("pk", "string"), ("value", "int")), "pk", lwm)])
    sql = rewrite("SELECT * FROM upsert_table WHERE PK = 'a-1'", catalog, functions=policy).sql
    assert [row["value"] for row in spark.sql(sql).collect()] == values


# --- change history ------------------------------------------------------------------------------


def expected_changes(rows: list[tuple], start: int, end: int) -> Counter:
    """Plain-Python change feed of (key, value, from, until) rows over (start, end]."""
    live = [row for row in rows if row[3] is None or row[3] > row[2]]
    changes: Counter = Counter()
    for key, value, valid_from, valid_until in live:
        if start < valid_from <= end:
            replaced = any(o[0] == key and o[3] == valid_from for o in live)
            changes[(key, value, "update_postimage" if replaced else "insert", valid_from)] += 1
        if valid_until is not None and start < valid_until <= end:
            succeeded = any(o[0] == key and o[2] == valid_until for o in live)
            changes[(key, value, "update_preimage" if succeeded else "delete", valid_until)] += 1
    return changes


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=NO_SHRINK,
)
@given(rows=version_chains(), start=st.integers(0, 20), width=st.integers(0, 20))
def test_table_changes_matches_the_python_change_feed(spark, policy, rows, start, width) -> None:  # type: ignore[no-untyped-def]
    register_source(spark, "__horizon_a_g1", A_SCHEMA, rows)
    catalog = Catalog([_table("a", (("k", "int"), ("v", "int")), "k", 40)])
    end = start + width
    sql = rewrite(
        f"SELECT k, v, _change_type, _commit_timestamp FROM table_changes('a', {start}, {end})",
        catalog,
        functions=policy,
    ).sql
    assert bag(spark, sql) == expected_changes(rows, start, end)


def test_table_changes_of_a_simple_history_names_every_change_kind(spark, policy) -> None:  # type: ignore[no-untyped-def]
    rows = [
        (1, 10, 5, 8),  # replaced at 8
        (1, 11, 8, 12),  # deleted at 12
        (2, 20, 6, None),  # inserted at 6
        (3, 30, 7, 7),  # out-of-order loser: never appears
    ]
    register_source(spark, "__horizon_a_g1", A_SCHEMA, rows)
    catalog = Catalog([_table("a", (("k", "int"), ("v", "int")), "k", 40)])
    sql = rewrite(
        "SELECT k, v, _change_type, _commit_timestamp FROM table_changes('a', 5, 12)",
        catalog,
        functions=policy,
    ).sql
    assert bag(spark, sql) == Counter(
        {
            (2, 20, "insert", 6): 1,
            (1, 10, "update_preimage", 8): 1,
            (1, 11, "update_postimage", 8): 1,
            (1, 11, "delete", 12): 1,
        }
    )
