"""Which road a batch takes: row by row on the driver, as Arrow columns on the driver, or Spark.

A table whose batches the driver may take (:func:`ingest.small.batch.driver_can_take`) has each
batch's enriched rows collected as Arrow in one Spark job, at most one more than the larger of its
``driver_batch_rows`` and ``driver_columnar_rows``. Up to ``driver_batch_rows`` rows the batch
runs row by row (:mod:`ingest.small`: no fixed cost, a few microseconds a row), up to
``driver_columnar_rows`` as columns (:mod:`ingest.columnar`: about 0.1 s of fixed cost, well under
a microsecond a row), and a larger batch, or one either declines, on Spark, which reads the source
again (the collect is then wasted: at most ``driver_columnar_rows`` rows).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ingest.columnar.batch import ColumnarBatch, columnar_batch
from ingest.manifest import KeyIndexVersion
from ingest.small.batch import SmallBatch, driver_can_take, small_batch

COLLECT_ACTION = "collect on the driver"


def collect_on_driver(
    server: Any, rows: Any, key_index: Mapping[int, KeyIndexVersion]
) -> SmallBatch | ColumnarBatch | None:
    """The batch, collected, when the driver takes it; None: the Spark path runs it."""
    table, storage, spark = server.table, server.storage, server.spark
    local = storage.local_path(server.root)
    conf = {"spark.sql.session.timeZone": spark.conf.get("spark.sql.session.timeZone")}
    if not driver_can_take(table, conf, local is not None):
        return None
    most = max(table.driver_batch_rows, table.driver_columnar_rows)
    with server.steps.action(COLLECT_ACTION):
        arrow = rows.limit(most + 1).toArrow()
    if arrow.num_rows <= table.driver_batch_rows:
        small = small_batch(server, arrow, key_index)
        if small is not None:
            return small
    if arrow.num_rows <= table.driver_columnar_rows:
        return columnar_batch(server, arrow, key_index)
    return None
