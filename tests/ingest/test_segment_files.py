"""Segment files as ``write_segments`` lays them out: one directory per segment, open and closed
versions apart, and no Parquet dictionary for the columns whose values are all distinct (the
driver's writer also leaves it out for the columns a sample finds mostly distinct)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from horizon_broker.ingest.resolve import stored_columns
from horizon_broker.ingest.segment_files import Writer, mostly_distinct
from horizon_broker.ingest.segments import (
    is_open_file,
    segment_directory_of,
    tag_of_file,
    write_segments,
)
from horizon_broker.ingest.storage import Storage
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


def test_a_writer_samples_a_column_once_a_sample_is_large_enough(tmp_path: Path):
    writer = Writer("TIMESTAMP_MICROS")
    few = pa.table({"amount": pa.array([1, 1, 2, 3], pa.int64())})  # too few values to decide
    many_distinct = pa.table({"amount": pa.array(range(5_000), pa.int64())})
    repeating = pa.table({"amount": pa.array([i % 5 for i in range(5_000)], pa.int64())})
    assert dictionary_encoded(writer.write(str(tmp_path / "a"), few))["amount"]
    assert not dictionary_encoded(writer.write(str(tmp_path / "b"), many_distinct))["amount"]
    # Decided by the large sample: the same table's later files are not sampled again.
    assert not dictionary_encoded(writer.write(str(tmp_path / "c"), repeating))["amount"]
    assert dictionary_encoded(Writer("TIMESTAMP_MICROS").write(str(tmp_path / "d"), repeating))[
        "amount"
    ]


def test_spark_reads_the_driver_s_delta_encoded_columns_exactly(spark, tmp_path: Path):
    count = 3_000
    rows = pa.table(
        {
            "id": pa.array(range(count), pa.int32()),
            "validFrom": pa.array([(1 << 62) + i * 65_537 for i in range(count)], pa.int64()),
            "validUntil": pa.array(
                [None if i % 3 else (1 << 62) - i * 977 for i in range(count)], pa.int64()
            ),
            "_sourcePosition": pa.array([-(i * i) for i in range(count)], pa.int64()),
            "name": pa.array([f"n{i}" for i in range(count)]),
        }
    )
    plain = ["id", "validFrom", "validUntil", "_sourcePosition", "name"]
    path = Writer("TIMESTAMP_MICROS").write(str(tmp_path / "out"), rows, 8 * 1024, plain)
    metadata = pq.ParquetFile(path).metadata
    assert metadata.num_row_groups > 1
    encodings = {
        metadata.row_group(0).column(i).path_in_schema: metadata.row_group(0).column(i).encodings
        for i in range(metadata.num_columns)
    }
    for name in ("id", "validFrom", "validUntil", "_sourcePosition"):
        assert "DELTA_BINARY_PACKED" in encodings[name], name
    assert "DELTA_BINARY_PACKED" not in encodings["name"]
    read = spark.read.parquet(path).orderBy("id").collect()
    assert [row.asDict() for row in read] == rows.to_pylist()


def test_the_driver_stores_decimals_as_integers_as_spark_does(tmp_path: Path):
    """Spark stores a decimal of up to 9 digits as INT32 and up to 18 as INT64; its scan of
    fixed-length byte arrays (pyarrow's default) is several times slower (bench.tpch)."""
    from decimal import Decimal

    rows = pa.table(
        {
            "price": pa.array([Decimal("12.34"), None, Decimal("-0.01")], pa.decimal128(15, 2)),
            "rate": pa.array([Decimal("0.05"), Decimal("1.00"), None], pa.decimal128(4, 2)),
            "huge": pa.array([Decimal("1" * 20), None, Decimal(0)], pa.decimal128(38, 0)),
        }
    )
    path = Writer("TIMESTAMP_MICROS").write(str(tmp_path / "out"), rows)
    metadata = pq.ParquetFile(path).metadata
    physical = {
        metadata.schema.column(i).name: metadata.schema.column(i).physical_type for i in range(3)
    }
    assert physical == {"price": "INT64", "rate": "INT32", "huge": "FIXED_LEN_BYTE_ARRAY"}
    assert pq.ParquetFile(path).read().equals(rows)


def test_the_driver_sizes_row_groups_by_the_bytes_rows_take_in_the_file(tmp_path: Path):
    """As Spark's ``parquet.block.size`` does: sized by the rows' size in memory, groups were
    about five times smaller than Spark's, and Spark scans many small groups far slower
    (bench.tpch). Values that do not compress keep several groups, for key lookups to prune."""
    import numpy as np

    count = 200_000
    repeating = pa.table({"tier": pa.array(np.arange(count) % 10, pa.int64())})
    random = pa.table({"amount": pa.array(np.random.default_rng(1).integers(0, 2**62, count))})
    writer = Writer("TIMESTAMP_MICROS")
    budget = 256 * 1024  # 1.6 MB in memory each: seven groups by memory
    assert (
        pq.ParquetFile(writer.write(str(tmp_path / "r"), repeating, budget)).metadata.num_row_groups
        == 1
    )
    assert (
        pq.ParquetFile(writer.write(str(tmp_path / "d"), random, budget)).metadata.num_row_groups
        > 4
    )


def test_segments_are_written_in_row_groups_of_the_size_asked_for(spark, tmp_path: Path):
    """Compaction asks for larger row groups than ingestion's (fewer for Spark's scans); the
    size reaches the writer, and each row group carries the page index key lookups read by."""
    table = accounts_table(tmp_path)
    frame = spark.range(60_000).selectExpr(
        "concat('k', id) AS user_id",
        "id AS balance",
        "id AS seq",
        "false AS deleted",
        "1 AS validFrom",
        "CAST(NULL AS BIGINT) AS validUntil",
        "'changes.json' AS _sourceFile",
        "id AS _sourcePosition",
        "CAST(0 AS BIGINT) AS _chunk",
        "CAST(0 AS INT) AS _seg",
    )

    def row_groups(size: int | None, name: str) -> list[int]:
        written = write_segments(
            frame.coalesce(1),
            stored_columns(table),
            str(tmp_path / name),
            1,
            Storage(spark),
            primary_key=table.primary_key,
            shuffle=False,
            row_group_bytes=size,
        )
        metadata = pq.read_metadata(written[(0, 0)].open_locations[0].removeprefix("file:"))
        assert all(metadata.row_group(0).column(i).has_offset_index for i in range(3))
        return [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]

    assert row_groups(None, "ingestion") == [60_000]
    small = row_groups(256 * 1024, "small")
    assert len(small) > 1 and sum(small) == 60_000
