"""Which road a batch takes: row by row on the driver, as Arrow columns on the driver, or Spark.

A table whose batches the driver may take (:func:`horizon_broker.ingest.driver_rows.batch.driver_can_take`) has each
batch's enriched rows collected as Arrow in one Spark job (how many at most: below). Up to ``driver_batch_rows`` rows the batch
runs row by row (:mod:`horizon_broker.ingest.driver_rows`: no fixed cost, a few microseconds a row), up to
``driver_columnar_rows`` as columns (:mod:`horizon_broker.ingest.driver_columns`: about 0.1 s of fixed cost, well under
a microsecond a row), and a larger batch, or one either declines, on Spark, which reads the source
again (the collect is then wasted: at most ``driver_columnar_rows`` rows).

The collect is limited to that many rows only when Spark cannot tell that the batch is small: a
``LIMIT`` makes Spark collect into one partition, scanning the others one after the other, which
cost 0.15 to 0.3 s of a 0.35 s collect of 500,000 rows. Where the plan's size estimate (file
sizes for a file source) times :data:`ARROW_EXPANSION` fits the columnar path's memory bound, the
batch is collected whole. The limit is also never more rows than the bound holds at the table's
estimated row width (:func:`row_bytes`), so a wide table collects fewer; and a collect Spark
refuses for its size (``spark.driver.maxResultSize``) sends the batch to Spark instead of failing
it.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from horizon_broker.ingest.driver_columns.batch import (
    DRIVER_COLUMNAR_BYTES,
    ColumnarBatch,
    columnar_batch,
)
from horizon_broker.ingest.driver_rows.batch import SmallBatch, driver_can_take, small_batch
from horizon_broker.ingest.manifest import KeyIndexVersion

if TYPE_CHECKING:
    from horizon_broker.ingest.server_table import ServerTable

COLLECT_ACTION = "collect on the driver"
ARROW_EXPANSION = 16
"""Arrow bytes per byte of Spark's size estimate that a collect is assumed to take at most (a
500,000-row Parquet changelog: estimate 9.6 MB, Arrow 84 MB)."""


_made_from: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
"""Frames made on the driver from Arrow (:func:`driver_frame`) -> that Arrow."""


def driver_frame(spark: Any, arrow: Any, schema: Any) -> Any:
    """A batch's rows held on the driver as Arrow (a partial table's merged rows), as a frame
    of ``schema`` whose driver roads take ``arrow`` as it is: collecting the frame again would
    send the same rows through the JVM and back."""
    frame = spark.createDataFrame(arrow, schema=schema)
    _made_from[frame] = arrow
    return frame


def collect_on_driver(
    server: ServerTable, rows: Any, key_index: Mapping[int, KeyIndexVersion]
) -> SmallBatch | ColumnarBatch | None:
    """The batch, collected, when the driver takes it; None: the Spark path runs it."""
    table, storage, spark = server.table, server.storage, server.spark
    local = storage.local_path(server.root)
    conf = {"spark.sql.session.timeZone": spark.conf.get("spark.sql.session.timeZone")}
    if not driver_can_take(table, conf, local is not None):
        return None
    fit = DRIVER_COLUMNAR_BYTES // row_bytes(table)
    most = max(table.driver_batch_rows, min(table.driver_columnar_rows, fit))
    arrow = _made_from.get(rows)
    if arrow is None:
        arrow = collected(server, rows, most)
    if arrow is None or arrow.num_rows > most:
        return None
    if arrow.num_rows <= table.driver_batch_rows:
        small = small_batch(server, arrow, key_index)
        if small is not None:
            return small
    if arrow.num_rows <= table.driver_columnar_rows:
        return columnar_batch(server, arrow, key_index)
    return None


def collected(server: ServerTable, rows: Any, most: int) -> Any:
    """``rows`` collected as Arrow (whole, or ``most`` + 1 of them when Spark cannot tell it
    is small); None: more than Spark lets the driver collect."""
    with server.steps.action(COLLECT_ACTION):
        estimate = estimated_bytes(rows)
        whole = estimate is not None and estimate * ARROW_EXPANSION <= DRIVER_COLUMNAR_BYTES
        try:
            return rows.toArrow() if whole else rows.limit(most + 1).toArrow()
        except Exception as error:
            if "maxResultSize" not in str(error):
                raise
            return None  # more than Spark lets the driver collect: Spark runs the batch


def row_bytes(table: Any) -> int:
    """A generous estimate of a collected row's Arrow bytes: 64 for a string or binary value,
    16 for a decimal, 8 for anything else, and 200 for the source file and position columns."""
    width = 200
    for column in table.columns:
        kind = column.type.strip().lower()
        width += 64 if kind in ("string", "binary") else 16 if kind.startswith("decimal") else 8
    return width


def estimated_bytes(frame: Any) -> int | None:
    """Spark's estimate of a frame's size (its optimized plan's statistics, the sizes of the files
    a file source reads); None when Spark has none (a stream's micro-batch, rows from Python)."""
    from py4j.protocol import Py4JError

    try:
        size = int(frame._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())
    except (AttributeError, Py4JError):  # a Spark Connect frame has no JVM plan here
        return None
    return None if size <= 0 or size >= _UNKNOWN else size


_UNKNOWN = 2**63 - 1
"""``spark.sql.defaultSizeInBytes``: what Spark says when it does not know."""
