"""A batch's resolved frame is written once and read back by later batches (as a key index level)
and by the updater (as pending updates): the schema they read it with must match what was written."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.job import is_resolution, resolution_directory
from ingest.resolve import empty_index, resolution_schema, resolve, stored_versions
from ingest.table import TableDefinition
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

    written = {field.name: field.dataType.simpleString() for field in resolved.schema.fields}
    declared = spark.createDataFrame([], resolution_schema(table)).schema.fields
    assert {field.name: field.dataType.simpleString() for field in declared} == {
        name: written[name] for name in (field.name for field in declared)
    }
    # Everything written is declared, but for the batch's own split column (never read back).
    assert set(written) - {field.name for field in declared} <= {"_bucket"}


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
