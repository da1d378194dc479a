"""A batch's resolved frame is written once and read back by later batches (as a key index level)
and by the updater (as pending updates): the schema they read it with must match what was written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from horizon_broker.ingest.key_index import is_resolution, resolution_directory
from horizon_broker.ingest.resolve import (
    DERIVED_ON_READ,
    empty_index,
    index_entries,
    resolution_file,
    resolution_schema,
    resolve,
    stored_versions,
    with_derived_columns,
)
from horizon_broker.ingest.table import TableDefinition
from tests.ingest.conftest import accounts_table


def batch_schema(table: TableDefinition) -> str:
    """A batch as the job hands it to the resolution: user columns, commit timestamp, source
    order, key partition, time chunk and source position."""
    return (
        f"{table.spark_schema_ddl()}, `_ts` bigint, `_ord` bigint, `_kp` int, `_chunk` bigint, "
        "`_sourceFile` string, `_sourcePosition` bigint"
    )


@pytest.mark.parametrize(
    "comparison", [[], ["seq"], ["seq", "balance"]], ids=["none", "one", "two"]
)
def test_the_resolution_schema_reads_every_written_column_with_its_written_type(
    spark, tmp_path: Path, comparison: list[str]
) -> None:
    table = accounts_table(tmp_path, comparison=comparison)
    batch = spark.createDataFrame(
        [],
        batch_schema(table),
    )
    segments = spark.createDataFrame([], "`_chunk` bigint, `_kp` int, `_seg` int")
    resolved = resolve(batch, empty_index(batch, table), table, segments)

    file = resolution_file(resolved)
    written = {field.name: field.dataType.simpleString() for field in file.schema.fields}
    declared = spark.createDataFrame([], resolution_schema(table)).schema.fields
    assert {field.name: field.dataType.simpleString() for field in declared} == written
    derived = with_derived_columns(spark.createDataFrame([], resolution_schema(table)), table)
    assert {f.name: f.dataType.simpleString() for f in derived.schema.fields} == {
        name: type_ for name, type_ in _types(resolved).items() if name in derived.columns
    }, "the derived columns have the types the resolution computed them with"


def _types(frame: Any) -> dict[str, str]:
    return {field.name: field.dataType.simpleString() for field in frame.schema.fields}


@pytest.mark.parametrize(
    "comparison", [[], ["seq"], ["seq", "balance"]], ids=["none", "one", "two"]
)
def test_a_resolution_read_back_derives_the_columns_its_file_leaves_out_as_resolved(
    spark, tmp_path: Path, comparison: list[str]
) -> None:
    table = accounts_table(tmp_path, comparison=comparison)
    # Key a: two records (one a delete), b: a record the index beats, c: indexed, untouched.
    batch = spark.createDataFrame(
        [
            ("a", 10, 5, None, 100, 1, 0, 0, "f", 0),
            ("a", 11, 6, True, 101, 2, 0, 0, "f", 1),
            ("b", 12, 1, False, 102, 3, 1, 0, "f", 2),
        ],
        batch_schema(table),
    )
    index = resolve(
        spark.createDataFrame(
            [("b", 1, 9, False, 50, 1, 1, 0, "g", 0), ("c", 2, 3, False, 51, 2, 0, 0, "g", 1)],
            batch_schema(table),
        ),
        empty_index(batch, table),
        table,
        spark.createDataFrame([(0, 0, 0), (0, 1, 1)], "`_chunk` bigint, `_kp` int, `_seg` int"),
    )
    segments = spark.createDataFrame(
        [(0, 0, 2), (0, 1, 3)], "`_chunk` bigint, `_kp` int, `_seg` int"
    )
    resolved = resolve(batch, index_entries(index, table), table, segments, untouched_keys=True)
    path = str(tmp_path / "resolution")
    resolution_file(resolved).write.parquet(path)
    read = with_derived_columns(spark.read.schema(resolution_schema(table)).parquet(path), table)

    def rows(frame: Any) -> dict[tuple[str, Any], dict[str, Any]]:
        return {
            (row["user_id"], row["_ts"]): row.asDict(recursive=True)
            for row in frame.select("user_id", *DERIVED_ON_READ, "_ts").collect()
        }

    expected, found = rows(resolved), rows(read)
    assert set(found) == set(expected) and len(expected) == 4
    for key, row in expected.items():
        if row["_inBatch"]:
            assert found[key] == row, key
        else:  # a key the batch has no record of: only its being untouched is read
            assert found[key]["_inBatch"] is False, key


def test_only_batches_resolutions_are_read_as_key_index_levels_or_pending_updates() -> None:
    root = "file:/data/horizon/accounts"
    assert is_resolution(resolution_directory(root, "s1", 3))
    assert is_resolution(f"{resolution_directory(root, 's-1', 12)}/_kpDir=2")
    assert not is_resolution(f"{root}/_keyindex/s1/b0000000003/_kpDir=2")  # older layout
    assert not is_resolution(f"{root}/_updates/s1/b0000000003")
    assert not is_resolution(f"{root}/segments/s1/r0000000003")


def test_a_version_whose_time_chunk_has_no_reserved_segment_fails_instead_of_going_missing(
    spark, tmp_path: Path
) -> None:
    table = accounts_table(tmp_path)
    batch = spark.createDataFrame(
        [("a", 10, 1, False, 5, 1, 0, 0, "changes.parquet", 0)],
        batch_schema(table),
    )
    other_chunk = spark.createDataFrame(
        [(86_400_000, 0, 7)], "`_chunk` bigint, `_kp` int, `_seg` int"
    )
    resolved = resolve(batch, empty_index(batch, table), table, other_chunk)

    with pytest.raises(Exception, match="no segment was reserved for time chunk 0"):
        stored_versions(resolved, table).collect()
