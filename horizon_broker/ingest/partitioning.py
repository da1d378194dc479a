"""Key partitions: which partition a primary key belongs to.

``pmod(xxhash64(pk...), n)``: stable across runs, machines and Spark versions (xxhash64 with Spark's
fixed seed), computed inside Spark so rows never leave the executors to be routed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def key_partition(primary_key: Sequence[str], partitions: int) -> Any:
    """A Spark int column: the key partition of each row."""
    from pyspark.sql import functions as F

    if partitions == 1:
        return F.lit(0).cast("int")
    hashed = F.xxhash64(*[F.col(name) for name in primary_key])
    return F.pmod(hashed, F.lit(partitions)).cast("int")


def partitions_of(spark: Any, keys: list[tuple[Any, ...]], primary_key: Sequence[str],
                  partitions: int, schema: str) -> list[int]:  # fmt: skip
    """The key partition of each given key (for tests and tools; computed by the same Spark code)."""
    frame = spark.createDataFrame(keys, schema)
    column = key_partition(primary_key, partitions).alias("p")
    return [row.p for row in frame.select(column).collect()]
