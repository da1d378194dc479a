"""Settled segments (greatest validFrom known and <= the LWM) are read through a view of their own
without the ``validFrom <= S`` test when S is at or above their greatest validFrom: the layout and
the SQL shape (pure), and, on real Spark, answers equal to the plain visibility rule for any
split, LWM and snapshot (scans and the change feed)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from broker.catalog_builder import catalog_table
from broker.sql import Catalog, CatalogTable, rewrite
from broker.sql.derived import change_feed_sql, visible_scan_sql
from broker.sql.functions_from_spark import function_policy_from_spark
from broker.view_layout import split_layout, view_layout
from tests.sql.spark_helpers import bag, register_source, version_chains, visible
from tests.sql.test_spark_rewrite import expected_changes
from timeline.errors import InvalidArgument
from timeline.interval import Interval
from timeline.segment import Segment
from watermark.catalog import ColumnSpec, TableDescriptor
from watermark.follower import TableView

FULL_10 = "validFrom <= 10 AND (validUntil IS NULL OR validUntil > 10)"
ALIVE_10 = "(validUntil IS NULL OR validUntil > 10)"


def _segment(partition: int, max_valid_from: int | None, table: str = "t") -> Segment:
    return Segment(
        table=table,
        interval=Interval(0, 86_400_000),
        version="v1",
        partition=partition,
        location=(f"/segments/{table}/p{partition}.parquet",),
        max_valid_from=max_valid_from,
    )


def _table_view(segments, lwm, *, upsert: bool = True, generation: int = 4) -> TableView:  # type: ignore[no-untyped-def]
    descriptor = TableDescriptor(
        name="t",
        columns=(ColumnSpec("k", "int"), ColumnSpec("v", "int")),
        primary_key=("k",),
        upsert=upsert,
    )
    return TableView(
        table="t",
        descriptor=descriptor,
        generation=generation,
        visible_segments=tuple(segments),
        lwm=lwm,
        retention_horizon=0,
        staleness_s=0.0,
        laggard=None,
    )


def _catalog_table(**fields) -> CatalogTable:  # type: ignore[no-untyped-def]
    base = CatalogTable("t", (ColumnSpec("k", "int"),), ("k",), True, 10, 0, "__horizon_t_g1")
    return replace(base, **fields)


# -- the layout (pure) ---------------------------------------------------------------------------


def test_without_settled_segments_the_table_keeps_its_one_view_over_everything():
    segments = [_segment(0, None), _segment(1, 1300)]
    layout = view_layout(_table_view(segments, 1200))
    assert layout.settled is None and layout.settled_through is None
    assert layout.names == ("__horizon_t_g4",)
    assert layout.rest is not None and layout.rest.segments == tuple(segments)


def test_an_unknown_lwm_settles_nothing():
    layout = view_layout(_table_view([_segment(0, 5)], None))
    assert layout.names == ("__horizon_t_g4",) and layout.settled is None


def test_segments_at_or_below_the_lwm_are_settled_and_named_after_their_greatest_valid_from():
    a, b, c, d = _segment(0, 900), _segment(1, 1200), _segment(2, None), _segment(3, 1201)
    layout = view_layout(_table_view([a, b, c, d], 1200), namespace="x_")
    assert layout.settled_through == 1200
    assert layout.settled is not None and layout.settled.segments == (a, b)
    assert layout.rest is not None and layout.rest.segments == (c, d)
    assert layout.names == ("__horizon_x_t_g4_t1200", "__horizon_x_t_g4_t1200_s")
    assert layout.main_view == "__horizon_x_t_g4_t1200"
    assert layout.settled.files == ("/segments/t/p0.parquet", "/segments/t/p1.parquet")


def test_when_every_segment_is_settled_only_the_settled_view_exists():
    layout = view_layout(_table_view([_segment(0, 500), _segment(1, 700)], 1200))
    assert layout.rest is None and layout.names == ("__horizon_t_g4_t700_s",)
    assert layout.main_view == "__horizon_t_g4_t700_s"


def test_each_threshold_of_one_generation_has_its_own_view_names():
    segments = [_segment(0, 500), _segment(1, 1000), _segment(2, None)]
    low = split_layout("t", 4, segments, 800)
    high = split_layout("t", 4, segments, 1100)
    assert low.settled_through == 500 and high.settled_through == 1000
    assert not set(low.names) & set(high.names)


def test_append_only_tables_are_never_split():
    layout = view_layout(_table_view([_segment(0, 500)], 1200, upsert=False))
    assert layout.names == ("__horizon_t_g4",)


def test_the_catalog_entry_names_the_layouts_views_and_its_threshold():
    entry = catalog_table(_table_view([_segment(0, 900), _segment(1, None)], 1200))
    assert entry.source_view == "__horizon_t_g4_t900"
    assert entry.settled_view == "__horizon_t_g4_t900_s"
    assert entry.settled_through == 900
    assert entry.views == ("__horizon_t_g4_t900", "__horizon_t_g4_t900_s")
    assert len(entry.files) == 2 and len(entry.segments) == 2
    unsplit = catalog_table(_table_view([_segment(0, None)], 1200))
    assert (unsplit.source_view, unsplit.settled_view, unsplit.settled_through) == (
        "__horizon_t_g4",
        "",
        None,
    )


def test_a_settled_view_without_its_threshold_is_refused():
    with pytest.raises(InvalidArgument, match="settled view"):
        _catalog_table(settled_view="__horizon_t_g1_s")
    with pytest.raises(InvalidArgument, match="no source view"):
        _catalog_table(source_view="")


# -- the SQL shape (pure) ------------------------------------------------------------------------


def test_scan_without_a_settled_view_is_the_one_view_with_the_full_predicate():
    sql = visible_scan_sql(_catalog_table(), 10)
    assert sql == f"(SELECT k, validFrom, validUntil FROM __horizon_t_g1 WHERE {FULL_10})"


@pytest.mark.parametrize("threshold", [3, 10])
def test_at_or_above_the_threshold_the_settled_branch_tests_only_valid_until(threshold):
    table = _catalog_table(
        source_view="__horizon_t_g1_t3",
        settled_view="__horizon_t_g1_t3_s",
        settled_through=threshold,
    )
    assert visible_scan_sql(table, 10) == (
        f"(SELECT k, validFrom, validUntil FROM __horizon_t_g1_t3_s WHERE {ALIVE_10} "
        f"UNION ALL SELECT k, validFrom, validUntil FROM __horizon_t_g1_t3 WHERE {FULL_10})"
    )


def test_below_the_threshold_both_branches_keep_the_full_predicate():
    table = _catalog_table(
        source_view="__horizon_t_g1_t11", settled_view="__horizon_t_g1_t11_s", settled_through=11
    )
    assert visible_scan_sql(table, 10) == (
        f"(SELECT k, validFrom, validUntil FROM __horizon_t_g1_t11_s WHERE {FULL_10} "
        f"UNION ALL SELECT k, validFrom, validUntil FROM __horizon_t_g1_t11 WHERE {FULL_10})"
    )


def test_with_only_settled_segments_there_is_no_rest_branch():
    table = _catalog_table(source_view="", settled_view="__horizon_t_g1_t4_s", settled_through=4)
    assert visible_scan_sql(table, 10) == (
        f"(SELECT k, validFrom, validUntil FROM __horizon_t_g1_t4_s WHERE {ALIVE_10})"
    )
    assert visible_scan_sql(table, 3) == (
        "(SELECT k, validFrom, validUntil FROM __horizon_t_g1_t4_s WHERE "
        "validFrom <= 3 AND (validUntil IS NULL OR validUntil > 3))"
    )


def test_the_change_feed_reads_the_union_of_both_views():
    table = _catalog_table(
        source_view="__horizon_t_g1_t4", settled_view="__horizon_t_g1_t4_s", settled_through=4
    )
    sql = change_feed_sql(table, 1, 9)
    union = (
        "(SELECT k, validFrom, validUntil FROM __horizon_t_g1_t4 UNION ALL "
        "SELECT k, validFrom, validUntil FROM __horizon_t_g1_t4_s)"
    )
    assert sql.count(union) == 4, "both halves, each version and neighbour scan"
    assert "FROM __horizon_t_g1_t4 " not in sql.replace(union, "")
    assert change_feed_sql(_catalog_table(), 1, 9).count("FROM __horizon_t_g1 ") == 4


# -- on Spark: any split answers like the visibility rule ----------------------------------------

NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


@pytest.fixture(scope="module")
def policy(spark):  # type: ignore[no-untyped-def]
    return function_policy_from_spark(spark)


@st.composite
def split_histories(draw: st.DrawFn) -> tuple[list[tuple], list[int], list[bool], int, int]:
    """Versions spread over three segments, which segments state their (true) greatest validFrom,
    the LWM and a snapshot at or below it."""
    rows = draw(version_chains())
    homes = draw(st.lists(st.integers(0, 2), min_size=len(rows), max_size=len(rows)))
    known = draw(st.lists(st.booleans(), min_size=3, max_size=3))
    lwm = draw(st.integers(0, 36))
    snapshot = draw(st.integers(0, lwm))
    return rows, homes, known, lwm, snapshot


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=NO_SHRINK,
)
@given(history=split_histories(), start=st.integers(0, 20))
def test_any_split_answers_exactly_like_the_visibility_rule(spark, policy, history, start) -> None:  # type: ignore[no-untyped-def]
    rows, homes, known, lwm, snapshot = history
    by_segment = [
        [row for row, home in zip(rows, homes, strict=True) if home == i] for i in range(3)
    ]
    segments = [
        _segment(i, max(row[2] for row in part) if known[i] and part else None)
        for i, part in enumerate(by_segment)
    ]
    table_view = _table_view(segments, lwm)
    layout = view_layout(table_view)
    for part in layout.parts:
        part_rows = [row for seg in part.segments for row in by_segment[seg.partition]]
        register_source(spark, part.name, "k int, v int", part_rows)
    catalog = Catalog([catalog_table(table_view)])
    try:
        scan = rewrite(f"SELECT * FROM t VERSION AS OF {snapshot}", catalog, functions=policy)
        assert bag(spark, scan.sql) == Counter(visible(rows, snapshot))
        end = min(start + 10, lwm)
        if start <= end:
            feed = rewrite(
                f"SELECT k, v, _change_type, _commit_timestamp "
                f"FROM table_changes('t', {start}, {end})",
                catalog,
                functions=policy,
            )
            assert bag(spark, feed.sql) == expected_changes(rows, start, end)
    finally:
        for name in layout.names:
            spark.catalog.dropTempView(name)
