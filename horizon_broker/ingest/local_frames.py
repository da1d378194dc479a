"""Small driver-side tables as Spark DataFrames, without a Python worker.

A DataFrame built from a list of tuples is a Python RDD: every Spark job that reads it (each
action that broadcasts a batch's offsets or segment numbers) starts a Python worker to unpickle
the rows. Built from an Arrow table it is a local relation the JVM holds itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_ARROW_TYPES = {"string": "string", "int": "int32", "long": "int64", "boolean": "bool"}


def local_frame(
    spark: Any, rows: Sequence[tuple[Any, ...]], schema: Sequence[tuple[str, str]]
) -> Any:
    """A DataFrame of ``rows`` with ``schema`` as ``(name, Spark type)`` pairs.

    >>> local_frame(spark, [("a", 1)], [("name", "string"), ("n", "int")]).collect()  # doctest: +SKIP
    [Row(name='a', n=1)]
    """
    import pyarrow as pa

    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    arrays = {
        name: pa.array(list(values), type=pa.type_for_alias(_ARROW_TYPES[kind]))
        for (name, kind), values in zip(schema, columns, strict=True)
    }
    return spark.createDataFrame(pa.table(arrays))
