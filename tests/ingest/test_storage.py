"""Local paths are served by Python; every answer must equal what Hadoop's FileSystem gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from horizon_broker.ingest.storage import Storage


class HadoopOnly(Storage):
    """The same operations, every path through the JVM (the reference)."""

    def _local(self, path: str) -> str | None:
        return None


@pytest.fixture()
def stores(spark: Any) -> tuple[Storage, Storage]:
    return Storage(spark), HadoopOnly(spark)


@pytest.fixture()
def written(spark: Any, tmp_path: Path) -> Path:
    """A partitioned Parquet write by Spark (with Hadoop's checksum and marker files), two
    row groups per file, a column that is null in one partition."""
    frame = spark.range(0, 6000).selectExpr(
        "id",
        "CAST(id % 3 AS INT) AS part",
        "IF(id % 3 = 0, NULL, id * 2) AS maybe",
        "concat('k ', CAST(id AS STRING)) AS name",
    )
    directory = tmp_path / "a dir=with spaces"
    (
        frame.repartition(1)
        .write.option("parquet.block.size", 16 * 1024)
        .partitionBy("part")
        .parquet(str(directory))
    )
    return directory


def test_local_listings_equal_hadoops_spelling_and_sizes(
    stores: tuple[Storage, Storage], written: Path
) -> None:
    local, hadoop = stores
    for path in (str(written), f"file:{written}", f"file://{written}"):
        assert local.list_files(path, suffix=".parquet") == hadoop.list_files(
            path, suffix=".parquet"
        )
        assert local.list_files(path) == hadoop.list_files(path)
        assert [i.path for i in local.list_dir(path)] == [i.path for i in hadoop.list_dir(path)]
    one = hadoop.list_files(str(written), suffix=".parquet")[0].path
    assert local.list_files(one) == hadoop.list_files(one)
    assert local.list_files(str(written / "missing")) == []
    assert local.list_dir(str(written / "missing")) == []


def test_local_footers_equal_hadoops(stores: tuple[Storage, Storage], written: Path) -> None:
    local, hadoop = stores
    files = [info.path for info in hadoop.list_files(str(written), suffix=".parquet")]
    assert files
    for path in files:
        columns = ("id", "maybe", "absent")  # numeric, like validFrom
        assert local.parquet_footer(path, *columns) == hadoop.parquet_footer(path, *columns)
    # The partition whose `maybe` column is all null has no maximum, like Hadoop says.
    nulls = next(path for path in files if "part=0" in path)
    assert local.parquet_footer(nulls, "maybe", "id") == (2000, (None, 5997))


def test_local_text_files_round_trip_with_hadoop(
    stores: tuple[Storage, Storage], tmp_path: Path
) -> None:
    local, hadoop = stores
    first = str(tmp_path / "m" / "one.json")
    local.write_atomically(str(tmp_path / "n" / "deeper" / "x.json"), "{}")  # parents created
    assert hadoop.read_text(str(tmp_path / "n" / "deeper" / "x.json")) == "{}"
    hadoop.write_atomically(first, '{"a": 1}\n{"b": 2}')  # leaves Hadoop's checksum beside it
    assert local.read_text(first) == hadoop.read_text(first) == '{"a": 1}\n{"b": 2}'
    local.write_atomically(first, '{"c": 3}')
    # Hadoop must not check the new text against the checksum of the old one.
    assert hadoop.read_text(first) == local.read_text(first) == '{"c": 3}'
    assert not list((tmp_path / "m").glob("*.tmp"))
    assert local.exists(first) and hadoop.exists(first)
    local.delete(first)
    assert not local.exists(first) and not hadoop.exists(first)
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == []
    local.delete(first)  # absent paths are fine


def test_local_delete_removes_a_spark_written_tree(
    stores: tuple[Storage, Storage], written: Path
) -> None:
    local, hadoop = stores
    local.delete(f"file:{written}")
    assert not written.exists()
    assert hadoop.list_files(str(written)) == []


def test_paths_of_other_file_systems_are_never_served_locally(spark: Any) -> None:
    storage = Storage(spark)
    assert storage._local("s3a://bucket/table") is None
    assert storage._local("hdfs://namenode:8020/table") is None
    assert storage._local("file:/tmp/table") == "/tmp/table"
    assert storage._local("file:///tmp/table") == "/tmp/table"
