"""The change feed reads only the files whose versions may lie in its window, and answers exactly
as the unpruned feed: which files each side keeps (pure), and, on real Spark over real Parquet
files split the way ingestion and the updater split them, the pruned feed equals the feed that
reads every file and the plain change rule, for any history, segment metadata and window."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from horizon_broker.broker.engine.catalog import catalog_table
from horizon_broker.broker.spark.scan_layout import scan_layout
from horizon_broker.broker.sql import Catalog, rewrite
from horizon_broker.broker.sql.derived import change_feed_sql
from horizon_broker.broker.sql.feed_files import (
    BEGINS,
    ENDS,
    FILE_COLUMN,
    FILE_NAME_EXPRESSION,
    MAX_LISTED_FILES,
    FileValidity,
    file_validity,
    files_view,
    side_filter,
)
from horizon_broker.broker.sql.functions_from_spark import function_policy_from_spark
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor
from horizon_broker.watermark.follower import TableState
from tests.sql.spark_helpers import bags_of_many, version_chains
from tests.sql.test_spark_rewrite import expected_changes

OLD_OPEN = FileValidity("old-open.parquet", 10, None, True)
OLD_CLOSED = FileValidity("old-closed.parquet", 10, 20, False)
RECENT = FileValidity("recent.parquet", 40, None, True)
MIXED = FileValidity("mixed.parquet", 10, None, False)
UNKNOWN = FileValidity("unknown.parquet", None, None, False)


# -- which files each side keeps (pure) ----------------------------------------------------------


def test_a_file_whose_versions_all_began_before_the_window_is_no_begin_candidate() -> None:
    files = (OLD_OPEN, OLD_CLOSED, RECENT)
    assert side_filter(files, BEGINS, 30) == "__horizon_file IN ('recent.parquet')"


def test_open_files_and_closed_ones_ended_before_the_window_are_no_end_candidates() -> None:
    files = (OLD_OPEN, OLD_CLOSED, RECENT, MIXED)
    assert side_filter(files, ENDS, 30) == "__horizon_file IN ('mixed.parquet')"
    assert side_filter(files, ENDS, 15) == (
        "__horizon_file IN ('mixed.parquet', 'old-closed.parquet')"
    )


def test_unknown_bounds_are_read_and_no_filter_is_written_when_every_file_is_a_candidate() -> None:
    assert side_filter((UNKNOWN, RECENT), BEGINS, 30) is None
    assert side_filter((), BEGINS, 30) is None, "nothing known: every file"
    assert side_filter((OLD_OPEN,), ENDS, 0) == "FALSE", "no file can hold an end"


def test_past_the_listing_cap_a_side_reads_every_file() -> None:
    many = tuple(FileValidity(f"f{n}.parquet", 50, None, True) for n in range(MAX_LISTED_FILES + 1))
    assert side_filter((*many, OLD_OPEN), BEGINS, 30) is None


def test_a_name_spark_may_spell_otherwise_switches_pruning_off() -> None:
    def segment(path: str) -> Segment:
        return Segment(
            table="t",
            interval=Interval(0, 86_400_000),
            version="v1",
            partition=0,
            location=(path,),
            max_valid_from=5,
        )

    assert file_validity([segment("/s/part-0.parquet")]) == (
        FileValidity("part-0.parquet", 5, None, False),
    )
    assert file_validity([segment("/s/part 0%20.parquet"), segment("/s/b.parquet")]) == ()


@pytest.mark.parametrize("column", ["_METADATA", FILE_COLUMN])
def test_a_table_with_a_column_hiding_the_file_names_is_never_pruned(column: str) -> None:
    old = _segment(0, ["/s/a.parquet"], 1, None, ("/s/a.parquet",))
    recent = _segment(1, ["/s/b.parquet"], 35, None, ())
    table = catalog_table(_table_view([old, recent], 50))
    assert FILE_COLUMN in change_feed_sql(table, 30, 40)
    shadowed = replace(table, columns=(*table.columns, ColumnSpec(column, "int")))
    sql = change_feed_sql(shadowed, 30, 40)
    assert not any(files_view(view) in sql for view in table.views)


# -- on Spark, over real files -------------------------------------------------------------------

SCHEMA = pa.schema(
    [("k", pa.int32()), ("v", pa.int32()), ("validFrom", pa.int64()), ("validUntil", pa.int64())]
)
DDL = "k int, v int, validFrom bigint, validUntil bigint"
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


def _segment(
    partition: int,
    location: list[str],
    max_valid_from: int | None,
    max_valid_until: int | None,
    open_files: tuple[str, ...],
) -> Segment:
    return Segment(
        table="t",
        interval=Interval(0, 86_400_000),
        version="v1",
        partition=partition,
        location=tuple(location),
        max_valid_from=max_valid_from,
        max_valid_until=max_valid_until,
        open_files=open_files,
    )


def _table_view(segments: list[Segment], lwm: int) -> TableState:
    descriptor = TableDescriptor(
        name="t",
        columns=(ColumnSpec("k", "int"), ColumnSpec("v", "int")),
        primary_key=("k",),
        upsert=True,
    )
    return TableState(
        table="t",
        descriptor=descriptor,
        generation=1,
        visible_segments=tuple(segments),
        lwm=lwm,
        retention_horizon=0,
        staleness_s=0.0,
        laggard=None,
    )


def _write(root: Path, rows: list[tuple]) -> str:
    path = root / f"{uuid.uuid4().hex}.parquet"
    columns = list(zip(*rows, strict=True)) if rows else [[], [], [], []]
    pq.write_table(pa.table([list(c) for c in columns], schema=SCHEMA), path)
    return str(path)


@st.composite
def stored_histories(draw: st.DrawFn) -> tuple[list[tuple], list[list[int]], list[tuple]]:
    """Versions spread over up to four segments, and per segment whether its open and closed
    versions are apart and which of its bounds the timeline knows."""
    rows = draw(version_chains())
    homes = draw(st.lists(st.integers(0, 3), min_size=len(rows), max_size=len(rows)))
    flags = st.tuples(st.booleans(), st.sampled_from([True, True, False]), st.booleans())
    return rows, homes, draw(st.lists(flags, min_size=4, max_size=4))


def _store(root: Path, rows: list[tuple], homes: list[int], flags: list[tuple]) -> list[Segment]:
    segments = []
    for number, (apart, from_known, until_known) in enumerate(flags):
        mine = [row for row, home in zip(rows, homes, strict=True) if home == number]
        if not mine:
            continue
        closed = [row for row in mine if row[3] is not None]
        open_rows = [row for row in mine if row[3] is None]
        if apart:
            parts = {"open": open_rows, "closed": closed}
            files = {kind: _write(root, part) for kind, part in parts.items() if part}
        else:
            files = {"mixed": _write(root, mine)}
        segments.append(
            _segment(
                number,
                list(files.values()),
                max(row[2] for row in mine) if from_known else None,
                max(row[3] for row in closed) if apart and until_known and closed else None,
                (files["open"],) if "open" in files else (),
            )
        )
    return segments


@pytest.fixture(scope="module")
def policy(spark: Any) -> Any:
    return function_policy_from_spark(spark)


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=NO_SHRINK,
)
@given(history=stored_histories(), start=st.integers(0, 36), width=st.integers(0, 12))
def test_the_pruned_change_feed_equals_the_feed_of_every_file_and_the_rule(
    spark: Any, policy: Any, tmp_path_factory: Any, history: Any, start: int, width: int
) -> None:
    rows, homes, flags = history
    segments = _store(tmp_path_factory.mktemp("feed"), rows, homes, flags)
    lwm = 40
    end = min(start + width, lwm)
    table_view = _table_view(segments, lwm)
    layout = scan_layout(table_view)
    for part in layout.parts:
        frame = spark.read.schema(DDL).parquet(*part.files)
        frame.createOrReplaceTempView(part.name)
        frame.selectExpr("*", FILE_NAME_EXPRESSION).createOrReplaceTempView(files_view(part.name))
    pruned = catalog_table(table_view)
    feed = f"SELECT k, v, _change_type, _commit_timestamp FROM table_changes('t', {start}, {end})"
    try:
        queries = [
            rewrite(feed, Catalog([table]), functions=policy).sql
            for table in (pruned, replace(pruned, file_validity=()))
        ]
        got, unpruned = (_rows(bag) for bag in bags_of_many(spark, queries))
        assert got == unpruned == expected_changes(rows, start, end)
    finally:
        for name in layout.names:
            spark.catalog.dropTempView(name)
            spark.catalog.dropTempView(files_view(name))


def _rows(bag: Counter) -> Counter:
    """bags_of_many's JSON rows as (k, v, _change_type, _commit_timestamp) tuples."""
    out: Counter = Counter()
    for text, count in bag.items():
        row = json.loads(text)
        key = (row.get("k"), row.get("v"), row["_change_type"], row["_commit_timestamp"])
        out[key] += count
    return out
