"""Bucket values send each key partition to the Spark task chosen for it."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from horizon_broker.ingest.bucketing import bucket_column, bucket_layout, murmur3_int, task_of


def test_murmur3_of_an_int_equals_sparks_hash(spark: Any) -> None:
    values = [0, 1, 2, 3, 7, -1, 100, 123_456, 2**31 - 1, -(2**31)]
    frame = spark.createDataFrame([(v,) for v in values], "v int")
    hashed = {row.v: row.h for row in frame.selectExpr("v", "hash(v) AS h").collect()}
    assert {v: murmur3_int(v) for v in values} == hashed


@given(partitions=st.sets(st.integers(0, 1023), min_size=1, max_size=64), tasks=st.integers(1, 16))
def test_key_partitions_are_spread_round_robin_over_the_tasks(
    partitions: set[int], tasks: int
) -> None:
    layout = bucket_layout(sorted(partitions), tasks)
    for i, kp in enumerate(sorted(partitions)):
        assert task_of(layout.values[kp], tasks) == i % tasks


def test_sparks_repartition_puts_each_key_partition_in_its_own_task(spark: Any) -> None:
    from pyspark.sql import functions as F

    layout = bucket_layout([0, 1, 2, 3], 4)
    rows = (
        spark.range(400)
        .select((F.col("id") % 4).cast("int").alias("_kp"))
        .withColumn("_bucket", bucket_column(layout))
        .repartition(4, "_bucket")
        .select("_kp", F.spark_partition_id().alias("task"))
        .distinct()
        .collect()
    )
    assert sorted((row._kp, row.task) for row in rows) == [(0, 0), (1, 1), (2, 2), (3, 3)]


def test_local_frames_hold_their_rows_and_types_without_a_python_worker(spark):
    from horizon_broker.ingest.local_frames import local_frame

    frame = local_frame(
        spark, [("a", 1, 2**40), ("b", None, -1)], [("s", "string"), ("n", "int"), ("x", "long")]
    )
    assert [tuple(row) for row in frame.orderBy("s").collect()] == [
        ("a", 1, 2**40),
        ("b", None, -1),
    ]
    assert frame.schema.simpleString() == "struct<s:string,n:int,x:bigint>"
    assert "LocalRelation" in frame._jdf.queryExecution().analyzed().toString()
    empty = local_frame(spark, [], [("s", "string"), ("n", "int")])
    assert empty.count() == 0 and empty.columns == ["s", "n"]


def test_bucket_column_maps_each_held_key_partition_to_its_value_and_others_to_null(spark):
    from pyspark.sql import functions as F

    layout = bucket_layout([1, 5, 6], 2)
    rows = (
        spark.range(9)
        .select((F.col("id") - 1).cast("int").alias("_kp"))
        .withColumn("_bucket", bucket_column(layout))
        .collect()
    )
    assert {row._kp: row._bucket for row in rows} == {
        -1: None, 0: None, 1: layout.values[1], 2: None, 3: None, 4: None,
        5: layout.values[5], 6: layout.values[6], 7: None,
    }  # fmt: skip
