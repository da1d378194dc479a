"""Which keys each segment file holds: sorted arrays of an integer key column, cached by path.

Min/max statistics prune well only where files hold key ranges. Hash-partitioned ingestion writes
every batch's keys spread over its segments, so each file's key range spans the table and a
lookup would open every file of every batch. A file's key column, read once and kept sorted (the
files are immutable), answers "may this file hold one of these keys" with a bisection, without
opening the file; only files that do hold a key are read. Memory is bounded (least recently used
arrays are dropped past ``max_bytes``); a file whose keys are not cached is simply loaded again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from broker.spark.byte_lru import ByteBoundedLru

DEFAULT_MAX_BYTES = 256 * 1024 * 1024


def holds_any(keys: np.ndarray, values: np.ndarray) -> bool:
    """True when sorted ``keys`` contain one of ``values``.

    >>> holds_any(np.array([1, 5, 9]), np.array([4, 9]))
    True
    >>> holds_any(np.array([1, 5, 9]), np.array([0, 6, 10]))
    False
    """
    if len(keys) == 0 or len(values) == 0:
        return False
    if len(values) == 1:  # a point lookup: scalar steps, a few times faster than the array ones
        value = values[0]
        position = keys.searchsorted(value)
        return bool(position < len(keys) and keys[position] == value)
    positions = np.searchsorted(keys, values)
    found = positions < len(keys)
    return bool(np.any(keys[positions[found]] == values[found]))


class KeySets:
    """Sorted integer key arrays of files by (path, column), least recently used dropped first."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.loads = 0
        """Arrays read from files (a test probe: a cached file leaves it flat)."""
        self._arrays: ByteBoundedLru[np.ndarray] = ByteBoundedLru(max_bytes, lambda a: a.nbytes)

    def keys(self, path: str, column: str, open_file: Callable[[], pq.ParquetFile]) -> np.ndarray:
        """The sorted non-null values of ``column`` in the file at ``path`` (``open_file``
        opens it when they are not cached; its errors pass through)."""
        found = self._arrays.get((path, column))
        if found is not None:
            return found
        values = open_file().read(columns=[column], use_threads=False).column(0)
        values = pc.drop_null(values)
        array = np.sort(values.to_numpy() if values.num_chunks else np.zeros(0, np.int64))
        array = array.astype(np.int64, copy=False)
        self.loads += 1
        self._arrays.put((path, column), array)
        return array

    @property
    def bytes(self) -> int:
        return self._arrays.bytes


def lookup_values(values: Sequence[int]) -> np.ndarray:
    """A lookup's literal keys as the array :func:`holds_any` takes."""
    return np.asarray(sorted(set(values)), dtype=np.int64)
