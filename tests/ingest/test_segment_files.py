"""Segment files as ``write_segments`` lays them out: one directory per segment, open and closed
versions apart, and no Parquet dictionary for the columns whose values are all distinct (the
driver's writer also leaves it out for the columns a sample finds mostly distinct)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ingest.resolve import stored_columns
from ingest.segments import is_open_file, segment_directory_of, tag_of_file, write_segments
from ingest.small.files import Writer, mostly_distinct
from ingest.storage import Storage
from tests.ingest.conftest import accounts_table


def dictionary_encoded(path: str) -> dict[str, bool]:
    metadata = pq.ParquetFile(path.removeprefix("file:")).metadata
    chunks = [metadata.row_group(0).column(i) for i in range(metadata.num_columns)]
    return {c.path_in_schema: any("DICTIONARY" in e for e in c.encodings) for c in chunks}


def test_segments_are_written_apart_and_distinct_valued_columns_without_a_dictionary(
    spark, tmp_path: Path
):
    table = accounts_table(tmp_path)
    # Two segments of two chunks in one task, their rows interleaved; every column repeats a
    # few values, so Parquet would give each a dictionary unless told not to.
    frame = spark.range(2000).selectExpr(
        "concat('k', id % 50) AS user_id",
        "id % 7 AS balance",
        "id % 5 AS seq",
        "false AS deleted",
        "id % 3 AS validFrom",
        "IF(id % 5 < 2, NULL, 9) AS validUntil",
        "'changes.json' AS _sourceFile",
        "id % 11 AS _sourcePosition",
        "IF(id % 2 = 0, 0, 86400000) AS _chunk",
        "CAST(id % 2 AS INT) AS _seg",
    )
    directory = str(tmp_path / "b0000000001")
    written = write_segments(
        frame.coalesce(1),
        stored_columns(table),
        directory,
        2,
        Storage(spark),
        primary_key=table.primary_key,
        shuffle=False,
    )

    assert sorted(written) == [(0, 0), (86400000, 1)]
    for (chunk, partition), segment in written.items():
        assert len(segment.files) == 2 and len(segment.open_locations) == 1, segment
        for path in segment.locations:
            assert tag_of_file(path) == (chunk, partition)
            assert segment_directory_of(path).endswith(f"/_chunk={chunk}/_seg={partition}")
            rows = pq.read_table(path.removeprefix("file:")).to_pylist()
            assert {row["validUntil"] is None for row in rows} == {is_open_file(path)}
            encoded = dictionary_encoded(path)
            for name in ("validFrom", "validUntil", "_sourcePosition", "user_id"):
                assert not encoded[name], (path, name)
            assert encoded["balance"] and encoded["seq"], path


def test_the_driver_writes_mostly_distinct_columns_without_a_dictionary(tmp_path: Path):
    rows = pa.table(
        {
            "amount": pa.array(range(50_000), pa.int64()),  # every value distinct
            "note": pa.array([f"n{i * 7919 % 50_000}" for i in range(50_000)]),
            "region": pa.array([f"r{i % 12}" for i in range(50_000)]),  # a dozen values
            "tier": pa.array([i % 3 for i in range(50_000)], pa.int32()),
            "flag": pa.array([i % 2 == 0 for i in range(50_000)]),
            "seen": pa.array([None] * 50_000, pa.int64()),  # nothing to tell: keeps its default
        }
    )
    assert mostly_distinct(rows) == ["amount", "note"]
    assert mostly_distinct(rows, skip=["note"]) == ["amount"]
    path = Writer("TIMESTAMP_MICROS").write(str(tmp_path / "out"), rows)
    encoded = dictionary_encoded(path)
    assert not encoded["amount"] and not encoded["note"]
    assert encoded["region"] and encoded["tier"]
    assert pq.ParquetFile(path).read().equals(rows)
