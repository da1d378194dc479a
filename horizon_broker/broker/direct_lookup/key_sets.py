"""Which keys each segment file holds: sorted arrays of an integer key column, cached by path.

Min/max statistics prune well only where files hold key ranges. Hash-partitioned ingestion writes
every batch's keys spread over its segments, so each file's key range spans the table and a
lookup would open every file of every batch. A file's key column, read once and kept sorted (the
files are immutable), answers "may this file hold one of these keys" with a bisection, without
opening the file; only files that do hold a key are read. Memory is bounded (least recently used
arrays are dropped past ``max_bytes``); a file whose keys are not cached is simply loaded again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from horizon_broker._core.lru import Lru

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
        self._arrays: Lru[tuple[str, str], np.ndarray] = Lru(max_bytes, lambda a: a.nbytes)

    def keys(self, path: str, column: str, open_file: Callable[[], pq.ParquetFile]) -> np.ndarray:
        """The sorted non-null values of ``column`` in the file at ``path`` (``open_file``
        opens it when they are not cached; its errors pass through)."""
        return self._arrays.get_or_load((path, column), lambda: self._load(column, open_file))

    def _load(self, column: str, open_file: Callable[[], pq.ParquetFile]) -> np.ndarray:
        values = open_file().read(columns=[column], use_threads=False).column(0)
        values = pc.drop_null(values)
        array = np.sort(values.to_numpy() if values.num_chunks else np.zeros(0, np.int64))
        self.loads += 1
        return array.astype(np.int64, copy=False)

    @property
    def bytes(self) -> int:
        return self._arrays.bytes


def entries_for(keys: np.ndarray, entries: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The ``entries`` (one per key of sorted ``keys``) of the keys equal to one of ``values``,
    in the order of ``values`` and then of ``keys``.

    >>> entries_for(np.array([1, 5, 5, 9]), np.array([10, 20, 21, 30]), np.array([5, 7])).tolist()
    [20, 21]
    """
    low = np.searchsorted(keys, values, side="left")
    high = np.searchsorted(keys, values, side="right")
    runs = [entries[a:b] for a, b in zip(low.tolist(), high.tolist(), strict=True) if b > a]
    return np.concatenate(runs) if runs else entries[:0]


def lookup_values(values: Sequence[int]) -> np.ndarray:
    """A lookup's literal keys as the array :func:`holds_any` takes."""
    return np.asarray(sorted(set(values)), dtype=np.int64)


class CombinedKeys:
    """Every key of a set of files in one sorted array, with the number of the file holding it.

    Per-file key sets still cost one check per file a lookup's statistics cannot rule out: with
    keys hashed over a thousand segments, that loop was most of a lookup. Over the combined array,
    "which files hold one of these keys" is two bisections per key, whatever the number of files.
    Files without a key set (another column type) are ``unindexed``: they may hold any key.

    >>> combined = CombinedKeys.of({0: np.array([1, 5]), 2: np.array([5, 7])}, files=3)
    >>> combined.files_holding(np.array([5])).tolist(), combined.files_holding(np.array([6])).tolist()
    ([0, 1, 2], [1])
    """

    def __init__(self, keys: np.ndarray, files: np.ndarray, unindexed: np.ndarray) -> None:
        self.keys = keys
        self.files = files
        self.unindexed = unindexed

    @staticmethod
    def of(arrays: Mapping[int, np.ndarray], files: int) -> CombinedKeys:
        """From each indexed file number's sorted keys; ``files`` numbers the whole set."""
        numbers = sorted(arrays)
        parts = [arrays[number] for number in numbers]
        keys = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        owners = np.repeat(np.asarray(numbers, dtype=np.int32), [len(part) for part in parts])
        # Stable on runs that are each sorted already: a merge of the files' arrays.
        order = np.argsort(keys, kind="stable")
        unindexed = np.setdiff1d(np.arange(files, dtype=np.int32), np.asarray(numbers, np.int32))
        return CombinedKeys(keys[order], owners[order], unindexed)

    def files_holding(self, values: np.ndarray) -> np.ndarray:
        """The sorted numbers of the files that may hold one of ``values``: those whose key set
        holds one, and every unindexed file."""
        return np.unique(
            np.concatenate([entries_for(self.keys, self.files, values), self.unindexed])
        )

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.files.nbytes + self.unindexed.nbytes)


class ConcatenatedKeys:
    """Several files' sorted key arrays laid end to end, searched for all the files at once.

    Until a set's :class:`CombinedKeys` are built (in the background, once the set proved it is
    looked up often), a lookup checked each candidate file's key set in a loop, about 2
    microseconds a file: 1.6 ms of a lookup over the 800 segments of a day that ingestion rewrites
    every batch. Laying the arrays end to end costs a copy (no sort), and one bisection in every
    file's slice at once is a dozen vector steps whatever the number of files.

    >>> laid = ConcatenatedKeys.of([3, 8], [np.array([1, 5, 9]), np.array([2, 5])])
    >>> laid.holding(np.array([5])).tolist(), laid.holding(np.array([9, 4])).tolist()
    ([3, 8], [3])
    """

    def __init__(self, numbers: np.ndarray, keys: np.ndarray, starts: np.ndarray) -> None:
        self.numbers = numbers
        """The file numbers covered, ascending."""
        self.keys = keys
        self.starts = starts
        """Where each covered file's keys start in ``keys`` (one more entry: the end)."""
        lengths = np.diff(starts)
        self._steps = int(lengths.max()).bit_length() if len(lengths) else 0

    @staticmethod
    def of(numbers: Sequence[int], arrays: Sequence[np.ndarray]) -> ConcatenatedKeys:
        """From ascending file ``numbers`` and each one's sorted keys."""
        lengths = np.fromiter((len(array) for array in arrays), np.int64, len(arrays))
        starts = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        keys = np.concatenate(arrays) if len(arrays) else np.zeros(0, np.int64)
        return ConcatenatedKeys(np.asarray(numbers, dtype=np.int64), keys, starts)

    def holding(self, values: np.ndarray) -> np.ndarray:
        """The covered file numbers (ascending) whose keys hold one of ``values``."""
        if len(self.keys) == 0 or len(values) == 0:
            return np.zeros(0, np.int64)
        ends = self.starts[1:]
        last = len(self.keys) - 1
        held = np.zeros(len(self.numbers), dtype=bool)
        for value in values.tolist():
            low, high = self.starts[:-1].copy(), ends.copy()
            for _ in range(self._steps):  # the first position in each slice not below value
                active = low < high
                middle = (low + high) >> 1
                below = active & (self.keys[np.minimum(middle, last)] < value)
                low = np.where(below, middle + 1, low)
                high = np.where(active & ~below, middle, high)
            held |= (low < ends) & (self.keys[np.minimum(low, last)] == value)
        return self.numbers[held]

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.starts.nbytes + self.numbers.nbytes)
