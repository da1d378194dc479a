"""Settled segments (greatest validFrom known and <= the LWM) are read through a view of their own
without the ``validFrom <= S`` test when S is at or above their greatest validFrom, their open
files through one without any test, and closed files through one that is not read from their
greatest validUntil on: the layout and the SQL shape (pure), and, on real Spark, answers equal to
the plain visibility rule for any split, LWM and snapshot (scans and the change feed)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.broker.engine.catalog import catalog_table
from horizon_broker.broker.engine.explain import view_notes
from horizon_broker.broker.spark.scan_layout import scan_layout, split_layout
from horizon_broker.broker.sql import Catalog, CatalogTable, rewrite
from horizon_broker.broker.sql.derived import change_feed_sql, visible_scan_sql
from horizon_broker.broker.sql.feed_files import FILE_COLUMN, files_view
from horizon_broker.broker.sql.functions_from_spark import function_policy_from_spark
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor
from horizon_broker.watermark.follower import TableState
from tests.sql.spark_helpers import (
    INTERNAL_COLUMN,
    bag,
    register,
    register_source,
    version_chains,
    visible,
)
from tests.sql.test_spark_rewrite import expected_changes

NAMED_FILES = f"k int, v int, validFrom bigint, validUntil bigint, {FILE_COLUMN} string"
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


def _table_view(segments, lwm, *, upsert: bool = True, generation: int = 4) -> TableState:  # type: ignore[no-untyped-def]
    descriptor = TableDescriptor(
        name="t",
        columns=(ColumnSpec("k", "int"), ColumnSpec("v", "int")),
        primary_key=("k",),
        upsert=upsert,
    )
    return TableState(
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
    layout = scan_layout(_table_view(segments, 1200))
    assert layout.settled is None and layout.settled_through is None
    assert layout.names == ("__horizon_t_g4",)
    assert layout.rest is not None and layout.rest.segments == tuple(segments)


def test_an_unknown_lwm_settles_nothing():
    layout = scan_layout(_table_view([_segment(0, 5)], None))
    assert layout.names == ("__horizon_t_g4",) and layout.settled is None


def test_segments_at_or_below_the_lwm_are_settled_and_named_after_their_greatest_valid_from():
    a, b, c, d = _segment(0, 900), _segment(1, 1200), _segment(2, None), _segment(3, 1201)
    layout = scan_layout(_table_view([a, b, c, d], 1200), namespace="x_")
    assert layout.settled_through == 1200
    assert layout.settled is not None and layout.settled.segments == (a, b)
    assert layout.rest is not None and layout.rest.segments == (c, d)
    assert layout.names == ("__horizon_x_t_g4_t1200", "__horizon_x_t_g4_t1200_s")
    assert layout.main_view == "__horizon_x_t_g4_t1200"
    assert layout.settled.files == ("/segments/t/p0.parquet", "/segments/t/p1.parquet")


def test_when_every_segment_is_settled_only_the_settled_view_exists():
    layout = scan_layout(_table_view([_segment(0, 500), _segment(1, 700)], 1200))
    assert layout.rest is None and layout.names == ("__horizon_t_g4_t700_s",)
    assert layout.main_view == "__horizon_t_g4_t700_s"


def test_each_threshold_of_one_generation_has_its_own_view_names():
    segments = [_segment(0, 500), _segment(1, 1000), _segment(2, None)]
    low = split_layout("t", 4, segments, 800)
    high = split_layout("t", 4, segments, 1100)
    assert low.settled_through == 500 and high.settled_through == 1000
    assert not set(low.names) & set(high.names)


def test_append_only_tables_are_never_split():
    layout = scan_layout(_table_view([_segment(0, 500)], 1200, upsert=False))
    assert layout.names == ("__horizon_t_g4",)


def _apart(partition: int, max_valid_from: int | None, max_valid_until: int | None) -> Segment:
    """A segment whose open and closed versions are in files of their own, as ingestion writes."""
    base = f"/segments/t/p{partition}"
    opened, closed = f"{base}/_rows=open/a.parquet", f"{base}/_rows=closed/a.parquet"
    return Segment(
        table="t",
        interval=Interval(0, 86_400_000),
        version="v1",
        partition=partition,
        location=(opened, closed),
        max_valid_from=max_valid_from,
        open_files=(opened,),
        max_valid_until=max_valid_until,
    )


def test_open_files_of_settled_segments_and_closed_files_get_views_of_their_own():
    settled = _apart(0, 900, 800)
    unsettled = _apart(1, 1300, 1100)
    mixed = _segment(2, 1000)
    layout = scan_layout(_table_view([settled, unsettled, mixed], 1200))
    assert (layout.settled_through, layout.closed_through) == (1000, 1100)
    assert layout.open is not None and layout.open.files == settled.open_files
    assert layout.closed is not None
    assert layout.closed.files == (settled.location[1], unsettled.location[1])
    assert layout.closed.segments == (settled, unsettled)
    assert layout.settled is not None and layout.settled.files == mixed.location
    # An unsettled segment's open rows may begin after a snapshot: the full test stays.
    assert layout.rest is not None and layout.rest.files == unsettled.open_files
    base = "__horizon_t_g4_t1000_u1100"
    assert layout.names == (base, f"{base}_s", f"{base}_o", f"{base}_c")
    entry = catalog_table(_table_view([settled, unsettled, mixed], 1200))
    assert entry.views == layout.names
    assert (entry.open_view, entry.closed_view, entry.closed_through) == (
        f"{base}_o",
        f"{base}_c",
        1100,
    )


def test_explain_notes_give_each_file_its_view_and_the_layouts_bounds():
    opened = _apart(0, 900, 800)
    closed_only = replace(
        _apart(1, 1000, 1100), location=("/segments/t/p1/_rows=closed/a.parquet",), open_files=()
    )
    layout = scan_layout(_table_view([opened, closed_only], 1200))
    assert layout.settled_through == 1000 and layout.closed_through == 1100
    notes = view_notes(layout, 1200)
    first, second = notes[str(opened.id)], notes[str(closed_only.id)]
    assert "1 file of open versions read through view" in first
    assert "so at snapshots >= 1000 nothing is tested" in first  # T counts every settled segment
    assert "1 file of closed versions" in first and "not read at snapshots >= 1100" in first
    assert "open versions" not in second and "not read at snapshots >= 1100" in second


def test_closed_files_split_a_table_without_settled_segments():
    layout = scan_layout(_table_view([_apart(0, None, 800)], 1200))
    assert layout.names == ("__horizon_t_g4_u800", "__horizon_t_g4_u800_c")
    assert layout.settled_through is None and layout.closed_through == 800


@pytest.mark.parametrize("max_valid_until", [None, 1201])
def test_closed_files_unknown_or_ending_after_the_lwm_keep_their_test(max_valid_until):
    unsettled = _apart(0, 1300, max_valid_until)
    layout = scan_layout(_table_view([unsettled], 1200))
    assert layout.names == ("__horizon_t_g4",)
    assert layout.rest is not None and layout.rest.files == unsettled.location
    settled = _apart(0, 1000, max_valid_until)
    layout = scan_layout(_table_view([settled], 1200))
    assert layout.closed is None
    assert layout.settled is not None and layout.settled.files == (settled.location[1],)


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
    with pytest.raises(InvalidArgument, match="settled view"):
        _catalog_table(open_view="__horizon_t_g1_o")
    with pytest.raises(InvalidArgument, match="closed view"):
        _catalog_table(closed_view="__horizon_t_g1_c")


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


def test_the_open_view_is_read_without_a_test_and_the_closed_view_not_from_its_bound():
    table = _catalog_table(
        source_view="",
        open_view="__horizon_t_g1_t4_o",
        closed_view="__horizon_t_g1_t4_c",
        settled_through=4,
        closed_through=9,
    )
    opened = "SELECT k, validFrom, validUntil FROM __horizon_t_g1_t4_o"
    closed = "SELECT k, validFrom, validUntil FROM __horizon_t_g1_t4_c"
    assert visible_scan_sql(table, 9) == f"({opened})"
    assert visible_scan_sql(table, 8) == (
        f"({opened} UNION ALL {closed} WHERE "
        "validFrom <= 8 AND (validUntil IS NULL OR validUntil > 8))"
    )
    assert visible_scan_sql(table, 3) == (
        f"({opened} WHERE validFrom <= 3 UNION ALL {closed} WHERE "
        "validFrom <= 3 AND (validUntil IS NULL OR validUntil > 3))"
    )


def test_a_table_of_closed_files_past_their_bound_scans_nothing():
    table = _catalog_table(source_view="", closed_view="__horizon_t_g1_c", closed_through=9)
    assert visible_scan_sql(table, 10) == (
        "(SELECT k, validFrom, validUntil FROM __horizon_t_g1_c WHERE FALSE)"
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
    assert sql.count(union) == 2, "both halves: the versions beginning and those ending"
    assert "FROM __horizon_t_g1_t4 " not in sql.replace(union, "")
    assert change_feed_sql(_catalog_table(), 1, 9).count("FROM __horizon_t_g1 ") == 2


# -- on Spark: any split answers like the visibility rule ----------------------------------------

NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


@pytest.fixture(scope="module")
def policy(spark):  # type: ignore[no-untyped-def]
    return function_policy_from_spark(spark)


@st.composite
def split_histories(draw: st.DrawFn) -> tuple[list[tuple], list[Segment], dict, int, int]:
    """Versions spread over three segments, the segments as ingestion may describe them, each
    file's rows, the LWM and a snapshot at or below it.

    A segment keeps its versions in one file, or its open and closed versions apart (each file
    omitted when empty); it states its (true) greatest validFrom or not, and, when apart, the
    (true) greatest validUntil of its closed file or not.
    """
    rows = draw(version_chains())
    homes = draw(st.lists(st.integers(0, 2), min_size=len(rows), max_size=len(rows)))
    mostly = st.lists(st.sampled_from([True, True, False]), min_size=3, max_size=3)
    known, apart, until_known = draw(mostly), draw(mostly), draw(mostly)
    # Often past every commit (times are at most 30), so that most segments settle.
    lwm = draw(st.one_of(st.integers(0, 36), st.integers(30, 36)))
    snapshot = draw(st.integers(0, lwm))
    segments, files = [], {}
    for i in range(3):
        mine = [row for row, home in zip(rows, homes, strict=True) if home == i]
        closed = [row for row in mine if row[3] is not None]
        if apart[i]:
            kinds = {
                f"/segments/t/p{i}/open.parquet": [row for row in mine if row[3] is None],
                f"/segments/t/p{i}/closed.parquet": closed,
            }
            mine_files = {path: part for path, part in kinds.items() if part}
        else:
            mine_files = {f"/segments/t/p{i}.parquet": mine}
        files.update(mine_files)
        segments.append(
            Segment(
                table="t",
                interval=Interval(0, 86_400_000),
                version="v1",
                partition=i,
                location=tuple(mine_files),
                max_valid_from=max(row[2] for row in mine) if known[i] and mine else None,
                open_files=tuple(path for path in mine_files if path.endswith("open.parquet")),
                max_valid_until=(
                    max(row[3] for row in closed)
                    if apart[i] and until_known[i] and closed
                    else None
                ),
            )
        )
    return rows, segments, files, lwm, snapshot


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=NO_SHRINK,
)
@given(history=split_histories(), start=st.integers(0, 20))
def test_any_split_answers_exactly_like_the_visibility_rule(spark, policy, history, start) -> None:  # type: ignore[no-untyped-def]
    rows, segments, files, lwm, snapshot = history
    table_view = _table_view(segments, lwm)
    layout = scan_layout(table_view)
    for part in layout.parts:
        part_rows = [row for path in part.files for row in files[path]]
        register_source(spark, part.name, "k int, v int", part_rows)
        named = [(*row, path.rsplit("/", 1)[-1]) for path in part.files for row in files[path]]
        register(spark, files_view(part.name), NAMED_FILES, named)  # the feed's companion
    # These views carry an internal column before the table's (register_source): the catalog
    # says so, and no scan may show it (one that reads a view whole still selects its columns).
    columns = (INTERNAL_COLUMN, "k", "v", "validFrom", "validUntil")
    catalog = Catalog([replace(catalog_table(table_view), view_columns=columns)])
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
            spark.catalog.dropTempView(files_view(name))
