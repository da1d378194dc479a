"""Arrow columns as NumPy arrays, the way the columnar resolution reads them."""

from __future__ import annotations

from typing import Any

import numpy as np


def numpy_of(column: Any) -> np.ndarray:
    """An Arrow array or chunked array without nulls as a NumPy array."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        return np.asarray(column.to_numpy())
    return np.asarray(column.to_numpy(zero_copy_only=False))


def numbers(column: Any, fill: int = 0) -> np.ndarray:
    """An integer or boolean Arrow column as a NumPy array, nulls replaced by ``fill``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if column.null_count:
        column = pc.fill_null(column, pa.scalar(fill).cast(column.type))
    return numpy_of(column)


def valid(column: Any) -> np.ndarray:
    return numpy_of(column.is_valid())
