"""The segment views keep their DataFrames per file set: a new layout whose part reads the files
a live part reads registers a name only; a part whose files changed (even to as many other
files) is read anew, never served from the old set; the mirror session reads the same rows; a
file set no live view reads is forgotten. On the real local Spark, over real Parquet files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from horizon_broker.broker.spark.views import ViewCache
from horizon_broker.broker.sql.feed_files import FILE_COLUMN, files_view
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor
from horizon_broker.watermark.follower_views import TableState

DESCRIPTOR = TableDescriptor(
    name="vf",
    columns=(ColumnSpec("k", "int"), ColumnSpec("v", "int")),
    primary_key=("k",),
    upsert=True,
)


def _segment(directory: Path, partition: int, keys: range) -> Segment:
    """A one-file segment whose rows are ``keys``, all open, written at validFrom 5."""
    path = directory / f"p{partition}.parquet"
    rows = pa.table(
        {
            "k": pa.array(keys, pa.int32()),
            "v": pa.array([partition] * len(keys), pa.int32()),
            "validFrom": pa.array([5] * len(keys), pa.int64()),
            "validUntil": pa.array([None] * len(keys), pa.int64()),
        }
    )
    pq.write_table(rows, path)
    return Segment(
        table="vf",
        interval=Interval(0, 86_400_000),
        version="v1",
        partition=partition,
        location=(str(path),),
    )


def _view(generation: int, *segments: Segment) -> TableState:
    return TableState(
        table="vf",
        descriptor=DESCRIPTOR,
        generation=generation,
        visible_segments=segments,
        lwm=None,
        retention_horizon=0,
        staleness_s=0.0,
        laggard=None,
    )


def _keys(session: Any, view: str) -> list[int]:
    return sorted(row.k for row in session.sql(f"SELECT k FROM `{view}`").collect())


@pytest.fixture
def cache(spark: Any) -> Any:
    views = ViewCache(spark, namespace="filesets", mirrors=(spark.newSession(),))
    yield views
    views.clear()


def test_a_part_whose_files_changed_is_read_anew_and_an_unchanged_one_is_only_renamed(
    spark, cache: ViewCache, tmp_path: Path
):
    a, b, c = (_segment(tmp_path, n, range(n * 10, n * 10 + 3)) for n in (1, 2, 3))
    with cache.lease([_view(1, a, b)]) as (names, _):
        assert _keys(spark, names[0]) == [10, 11, 12, 20, 21, 22]
    read = cache.file_sets_read

    with cache.lease([_view(2, a, b)]) as (names, _):  # a new generation, the same files
        assert names == ["__horizon_filesetsvf_g2"]
        assert _keys(spark, names[0]) == [10, 11, 12, 20, 21, 22]
    assert cache.file_sets_read == read, "the same files: registered under the new name only"

    with cache.lease([_view(3, a, c)]) as (names, _):  # as many files, one of them another
        assert _keys(spark, names[0]) == [10, 11, 12, 30, 31, 32], "never the old file set"
        named = spark.sql(f"SELECT DISTINCT {FILE_COLUMN} FROM `{files_view(names[0])}`")
        assert sorted(row[0] for row in named.collect()) == ["p1.parquet", "p3.parquet"]
    assert cache.file_sets_read == read + 1


def test_the_mirror_session_reads_the_same_rows_from_one_read(
    spark, cache: ViewCache, tmp_path: Path
):
    mirror = cache._sessions[1]
    a, b = (_segment(tmp_path, n, range(n * 10, n * 10 + 2)) for n in (1, 2))
    with cache.lease([_view(1, a, b)]) as (names, _):
        assert _keys(mirror, names[0]) == _keys(spark, names[0]) == [10, 11, 20, 21]
        companion = mirror.sql(
            f"SELECT count(DISTINCT {FILE_COLUMN}) FROM `{files_view(names[0])}`"
        )
        assert companion.collect()[0][0] == 2
    assert cache.file_sets_read == 1, "one read serves both sessions"


def test_a_file_set_no_live_view_reads_is_forgotten(spark, cache: ViewCache, tmp_path: Path):
    a, b, c = (_segment(tmp_path, n, range(n, n + 1)) for n in (1, 2, 3))
    for generation, segments in enumerate([(a,), (a, b), (a, b, c)], start=1):
        with cache.lease([_view(generation, *segments)]):
            pass
    assert cache.names() == ["__horizon_filesetsvf_g3"]
    assert len(cache._frames) == 1, "the older generations' file sets went with their views"
