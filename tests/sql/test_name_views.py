"""A scan that reads one segment view whole names the view directly (it plans faster than the
derived table), only where the view shows exactly the derived table's columns; answers stay
those of the visibility rule, on real Spark."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from horizon_broker.broker.engine.catalog import catalog_table
from horizon_broker.broker.spark.segment_schema import storage_ddl
from horizon_broker.broker.sql import Catalog, CatalogTable, FunctionPolicy, rewrite
from horizon_broker.broker.sql.functions_from_spark import function_policy_from_spark
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor
from horizon_broker.watermark.follower import TableState
from horizon_broker.watermark.schema_versions import SchemaColumn, SchemaHistory, SchemaVersion
from tests.sql.spark_helpers import bags_of_many, register, version_chains, visible

VALIDITY = ("validFrom", "validUntil")
POLICY = FunctionPolicy.from_names(["count", "sum", "max"])


def _table(
    name: str, columns: tuple[str, ...], settled_through: int, lwm: int = 40, **fields: Any
) -> CatalogTable:
    """A table whose every file is an open file of a settled segment (after a compaction)."""
    return CatalogTable(
        name=name,
        columns=tuple(ColumnSpec(column, "int") for column in columns),
        primary_key=(columns[0],),
        upsert=True,
        lwm=lwm,
        retention_horizon=0,
        source_view="",
        open_view=f"__horizon_{name}_g1_t{settled_through}_o",
        settled_through=settled_through,
        view_columns=(*columns, *VALIDITY),
        **fields,
    )


def _history(*versions: tuple[int, tuple[str, ...]]) -> SchemaHistory:
    return SchemaHistory(
        tuple(
            SchemaVersion(at, tuple(SchemaColumn(name, "int") for name in names))
            for at, names in versions
        )
    )


def test_a_view_read_whole_is_named_directly_under_the_references_alias() -> None:
    catalog = Catalog([_table("a", ("k", "v"), 30)])
    sql = rewrite("SELECT x.k, a.v FROM a x JOIN a ON x.k = a.k", catalog, functions=POLICY).sql
    assert sql == (
        "SELECT x.k, a.v FROM __horizon_a_g1_t30_o AS x JOIN __horizon_a_g1_t30_o AS a ON x.k = a.k"
    )


@pytest.mark.parametrize(
    ("query", "fields"),
    [
        ("SELECT * FROM a", {"view_columns": ()}),  # not known
        ("SELECT * FROM a", {"view_columns": ("_row", "k", "v", *VALIDITY)}),  # more columns
        ("SELECT * FROM a", {"view_columns": ("v", "k", *VALIDITY)}),  # another order
        ("SELECT * FROM a VERSION AS OF 20", {}),  # below the settled bound: a test
        ("SELECT * FROM a TABLESAMPLE (50 PERCENT)", {}),  # the sample stays as written
        ("SELECT * FROM a AS x(p, q, r, s)", {}),  # column aliases stay as written
    ],
)
def test_a_scan_keeps_its_derived_table_unless_it_is_exactly_the_whole_view(
    query: str, fields: dict[str, Any]
) -> None:
    catalog = Catalog([replace(_table("a", ("k", "v"), 30), **fields)])
    assert (
        "(SELECT k, v, validFrom, validUntil FROM __horizon_a_g1_t30_o"
        in rewrite(query, catalog, functions=POLICY).sql
    )


def test_an_altered_tables_scan_names_its_view_only_at_a_version_with_every_stored_column() -> None:
    """Views of an altered table show every column any version had: a snapshot whose version
    lacks one (here ``w``, added at 25) reads through the derived table, which leaves it out."""
    history = _history((0, ("k", "v")), (25, ("k", "v", "w")))
    table = _table("a", ("k", "v", "w"), 10, schema_history=history)
    catalog = Catalog([table])
    assert "FROM __horizon_a_g1_t10_o AS a" in rewrite("SELECT k FROM a", catalog, functions=POLICY).sql  # fmt: skip
    older = rewrite("SELECT k FROM a VERSION AS OF 20", catalog, functions=POLICY).sql
    assert "(SELECT k, v, validFrom, validUntil FROM __horizon_a_g1_t10_o) AS a" in older


def test_the_brokers_catalog_lists_the_columns_its_views_are_built_with() -> None:
    """The catalog's ``view_columns`` and the views' schema come from the same descriptor: an
    altered table's views show its dropped column too, so its scans keep their derived table."""
    descriptor = TableDescriptor(
        name="t", columns=(ColumnSpec("k", "int"), ColumnSpec("v", "int")), primary_key=("k",)
    )
    history = _history((0, ("k", "v")), (5, ("k",)))
    for described in (descriptor, descriptor.with_schema(history)):
        segment = Segment(
            table="t", interval=Interval(0, 86_400_000), version="v1", partition=0,
            location=("/segments/t/p0.parquet",), max_valid_from=3,
        )  # fmt: skip
        state = TableState(
            table="t", descriptor=described, generation=1, visible_segments=(segment,), lwm=9,
            retention_horizon=0, staleness_s=0.0, laggard=None,
        )  # fmt: skip
        entry = catalog_table(state)
        ddl_names = tuple(part.split("`")[1] for part in storage_ddl(described).split(", "))
        assert entry.view_columns == ddl_names
    assert entry.view_columns == ("k", "v", *VALIDITY)  # the dropped column is still stored


# -- on Spark ---------------------------------------------------------------------------------

QUERIES = (
    "SELECT * FROM a",
    "SELECT a.* FROM a JOIN b ON a.k = b.k",
    "SELECT a.k, a.v, b.id, b.w FROM a LEFT JOIN b ON a.k = b.k",
    "SELECT x.k AS xk, y.k AS yk, x.validFrom FROM a x JOIN a y ON x.v = y.v",
    "SELECT k, count(*) AS n, sum(w) AS s, max(validUntil) AS u FROM b GROUP BY k",
    "SELECT k FROM a WHERE k IN (SELECT k FROM b WHERE w > 0)",
)


@pytest.fixture(scope="module")
def policy(spark: Any) -> FunctionPolicy:
    return function_policy_from_spark(spark)


def _open_rows(rows: list[tuple], bound: int) -> list[tuple]:
    """What an open view of segments settled through ``bound`` holds: open versions begun by it
    (no validFrom above the bound, as the layout guarantees; some above 10, so a snapshot below
    the bound has versions it must not see)."""
    return [row for row in rows if row[-1] is None and row[-2] <= bound]


@pytest.mark.spark
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
)
@given(
    a_rows=version_chains(),
    b_rows=version_chains(key_count=5),
    snapshot=st.integers(10, 36),
)
def test_views_named_directly_answer_as_the_visibility_rule(
    spark: Any, policy: FunctionPolicy, a_rows: list[tuple], b_rows: list[tuple], snapshot: int
) -> None:
    """At and above the settled bound (20) every scan names its view, below it each keeps its
    ``validFrom`` test; the answers equal the original queries over tables holding only the
    versions visible at the snapshot (the tables' LWM: the query's snapshot)."""
    a_open = _open_rows(a_rows, 20)
    b_open = [(pk, pk % 3, w, vf, vu) for pk, w, vf, vu in _open_rows(b_rows, 20)]
    tables = [_table("a", ("k", "v"), 20, snapshot), _table("b", ("id", "k", "w"), 20, snapshot)]
    catalog = Catalog(tables)
    validity = ", validFrom bigint, validUntil bigint"
    register(spark, "__horizon_a_g1_t20_o", "k int, v int" + validity, a_open)
    register(spark, "__horizon_b_g1_t20_o", "id int, k int, w int" + validity, b_open)
    register(spark, "a", "k int, v int" + validity, visible(a_open, snapshot))
    register(spark, "b", "id int, k int, w int" + validity, visible(b_open, snapshot))
    expected = bags_of_many(spark, QUERIES)
    spark.catalog.dropTempView("a")
    spark.catalog.dropTempView("b")
    texts = [rewrite(query, catalog, functions=policy).sql for query in QUERIES]
    for query, want, got in zip(QUERIES, expected, bags_of_many(spark, texts), strict=True):
        assert got == want, query
    named = not any("validFrom, validUntil FROM" in text for text in texts)
    assert named == (snapshot >= 20)
