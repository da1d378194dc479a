"""A batch's count and commit timestamps as Arrow columns (pure).

:func:`count_columns` is :func:`horizon_broker.ingest.commit_times.count_changes` (and
:func:`horizon_broker.ingest.driver_rows.batch.count_rows`) of collected rows and :func:`stamp_columns` is
:func:`horizon_broker.ingest.commit_times.stamp` (and :func:`horizon_broker.ingest.driver_rows.resolution.stamp_rows`): each
row's source order is the base of its (source file, Spark partition) span plus its row there,
its commit timestamp that or its transaction's first, its time chunk from its event time or else
its commit time. A property test runs both forms on the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from horizon_broker._core.errors import Internal
from horizon_broker.ingest.commit_times import ChangeCount, SourceSpan, span_bases
from horizon_broker.ingest.driver_columns.arrays import numbers, numpy_of, valid
from horizon_broker.ingest.granularity import Granularity, chunk_start_ms, fixed_width
from horizon_broker.ingest.resolve import SOURCE_FILE
from horizon_broker.ingest.table import TableDefinition


def event_ms(column: Any) -> tuple[np.ndarray, np.ndarray]:
    """A time column's values as epoch milliseconds (:func:`horizon_broker.ingest.driver_rows.resolution.epoch_ms`,
    floored) and which are not null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    present = valid(column)
    if pa.types.is_date32(kind):
        return numbers(column.cast(pa.int32())).astype(np.int64) * 86_400_000, present
    if pa.types.is_timestamp(kind):
        ticks = numbers(pc.cast(column, pa.int64())).astype(np.int64)
        per_ms = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}[kind.unit]
        return (ticks * 1_000 if per_ms is None else ticks // per_ms), present
    return numbers(column).astype(np.int64), present


def chunk_starts(granularity: Granularity, ms: np.ndarray) -> np.ndarray:
    """:func:`horizon_broker.ingest.granularity.chunk_start_ms` of every value."""
    if granularity is Granularity.ALL:
        return np.zeros(len(ms), dtype=np.int64)
    fixed = fixed_width(granularity)
    if fixed is not None:
        size, offset = fixed
        return (ms - offset) // size * size + offset
    distinct, at = np.unique(ms, return_inverse=True)
    starts = np.array([chunk_start_ms(granularity, int(v)) for v in distinct], dtype=np.int64)
    return starts[at]


def _time_chunks(batch: Any, table: TableDefinition) -> tuple[np.ndarray, np.ndarray] | None:
    """Each row's event time (epoch ms) and which rows have one; None without a time column."""
    if table.time_column is None:
        return None
    return event_ms(batch[table.time_column])


def count_columns(batch: Any, table: TableDefinition) -> ChangeCount:
    """:func:`horizon_broker.ingest.commit_times.count_changes` of collected rows (an Arrow table of enriched
    rows)."""
    import pyarrow as pa

    times = _time_chunks(batch, table)
    if times is None:
        tchunk = pa.nulls(batch.num_rows, pa.int64())
        tmin = pa.nulls(batch.num_rows, pa.int64())
    else:
        ms, present = times
        tchunk = pa.array(chunk_starts(table.granularity, ms), mask=~present)
        tmin = pa.array(ms, mask=~present)
    counted = pa.table(
        {
            SOURCE_FILE: batch[SOURCE_FILE],
            "_pid": batch["_pid"],
            "_kp": batch["_kp"],
            "_tchunk": tchunk,
            "_row": batch["_row"],
            "_tmin": tmin,
        }
    )
    grouped = counted.group_by(
        [SOURCE_FILE, "_pid", "_kp", "_tchunk"], use_threads=False
    ).aggregate([("_row", "min"), ("_row", "max"), ("_row", "count"), ("_tmin", "min")])
    groups = [
        {
            SOURCE_FILE: g[SOURCE_FILE],
            "_pid": g["_pid"],
            "_kp": g["_kp"],
            "_tchunk": g["_tchunk"],
            "_lo": g["_row_min"],
            "_hi": g["_row_max"],
            "_n": g["_row_count"],
            "_tmin": g["_tmin_min"],
        }
        for g in grouped.to_pylist()
    ]
    spans = counted.group_by([SOURCE_FILE, "_pid"], use_threads=False).aggregate(
        [("_row", "min"), ("_row", "max"), ("_row", "count")]
    )
    return ChangeCount(
        groups,
        sorted(
            SourceSpan(s[SOURCE_FILE], s["_pid"], s["_row_min"], s["_row_max"], s["_row_count"])
            for s in spans.to_pylist()
        ),
    )


def stamp_columns(
    batch: Any, table: TableDefinition, spans: Sequence[SourceSpan], base: int
) -> Any:
    """The batch with its source order ``_ord``, commit timestamp ``_ts`` and time chunk
    ``_chunk`` (:func:`horizon_broker.ingest.commit_times.stamp`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    offsets = span_bases(spans, base)
    files = pc.dictionary_encode(batch[SOURCE_FILE]).combine_chunks()
    names = files.dictionary.to_pylist()
    pids = numbers(batch["_pid"]).astype(np.int64)
    width = int(pids.max()) + 1 if len(pids) else 1
    pair = numpy_of(files.indices).astype(np.int64) * width + pids
    distinct, at = np.unique(pair, return_inverse=True)
    try:
        starts = np.array(
            [offsets[(names[int(p) // width], int(p) % width)] for p in distinct], dtype=np.int64
        )
    except KeyError as missing:
        raise Internal(f"a batch row's source span {missing} was not counted") from None
    ordinal = starts[at] + numbers(batch["_row"]).astype(np.int64)
    ts = ordinal
    if table.transaction_column is not None:
        ts = _transaction_timestamps(batch[table.transaction_column], ordinal)
    times = _time_chunks(batch, table)
    moments = ts >> 16
    if times is not None:
        ms, present = times
        moments = np.where(present, ms, moments)
    chunks = chunk_starts(table.granularity, moments)
    return (
        batch.append_column("_ord", pa.array(ordinal, pa.int64()))
        .append_column("_ts", pa.array(ts, pa.int64()))
        .append_column("_chunk", pa.array(chunks, pa.int64()))
    )


def _transaction_timestamps(transactions: Any, ordinal: np.ndarray) -> np.ndarray:
    """Each row's commit timestamp: its own ``_ord``, or the first ``_ord`` of its transaction."""
    import pyarrow.compute as pc

    present = valid(transactions)
    if not present.any():
        return ordinal
    encoded = pc.dictionary_encode(transactions).combine_chunks()
    codes = numbers(encoded.indices, fill=-1).astype(np.int64)
    first = np.full(len(encoded.dictionary), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, codes[present], ordinal[present])
    return np.where(present, first[np.where(present, codes, 0)], ordinal)
