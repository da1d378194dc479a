"""Finding a batch's keys in a key index level without reading every key of the level.

Filtering a level by the batch's keys (``is_in``) hashes every key of the level, every batch: the
bottom level holds every key of its partitions, so the cost grew with the table (0.2 s a batch
per 4M string keys on 2 cores). A level never changes, so its keys' 64-bit codes are sorted once,
with the row of each (:class:`SortedKeys`, kept with the level's decoded entries), and a batch
finds its keys by binary search: the cost follows the batch, not the level. A code is the key
itself for integer and date keys and a hash of the bytes for string keys, computed from the
Arrow buffers with NumPy; rows whose code matches are compared key to key, so hash collisions
never match the wrong key.

Example::

    >>> import pyarrow as pa
    >>> level = pa.chunked_array([pa.array(["u7", "u1", "u30", "u4"])])
    >>> index = SortedKeys.of(level)
    >>> index.rows_holding(level, pa.chunked_array([pa.array(["u4", "u9", "u7"])])).tolist()
    [0, 3]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

_MULTIPLIER = np.uint64(0x100000001B3)
_SEED = np.uint64(0xCBF29CE484222325)
_CHUNK_ROWS = 1 << 20
"""Strings hashed at a time (their bytes widen to 8 bytes each while hashed)."""


def supports(kind: Any) -> bool:
    """Whether a key column of this Arrow type has codes (else a level is filtered by ``is_in``)."""
    import pyarrow as pa

    return bool(
        pa.types.is_integer(kind)
        or pa.types.is_date32(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    )


def _mix(values: np.ndarray) -> np.ndarray:
    """A 64-bit finalizer, so that nearby codes spread (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        values = values ^ (values >> np.uint64(33))
        values = values * np.uint64(0xFF51AFD7ED558CCD)
        values = values ^ (values >> np.uint64(33))
        values = values * np.uint64(0xC4CEB93FE1A85EC5)
        return values ^ (values >> np.uint64(33))


def _string_codes(array: Any) -> np.ndarray:
    """Hashes of a string or binary array's values from its offsets and bytes (no nulls)."""
    import pyarrow as pa

    wide = pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int64 if wide else np.int32)
    offsets = offsets[array.offset : array.offset + len(array) + 1].astype(np.int64)
    data = array.buffers()[2]
    raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    codes = np.empty(len(array), dtype=np.uint64)
    longest = int(np.diff(offsets).max(initial=0))
    with np.errstate(over="ignore"):
        powers = np.cumprod(np.full(max(longest, 1), _MULTIPLIER, dtype=np.uint64))
        for first in range(0, len(array), _CHUNK_ROWS):
            last = min(first + _CHUNK_ROWS, len(array))
            begin, end = int(offsets[first]), int(offsets[last])
            starts = offsets[first:last] - begin
            lengths = np.diff(offsets[first : last + 1])
            position = np.arange(end - begin) - np.repeat(starts, lengths)
            # A zero after the bytes: every start is a valid index, and ends the last range.
            weighted = np.concatenate(
                [raw[begin:end].astype(np.uint64) * powers[position], np.zeros(1, np.uint64)]
            )
            sums = np.add.reduceat(weighted, starts)
            sums[lengths == 0] = 0  # reduceat gives the next value for an empty range
            codes[first:last] = sums ^ (lengths.astype(np.uint64) * _SEED)
    return _mix(codes)


def key_codes(column: Any) -> np.ndarray:
    """Each key's 64-bit code: the value of an integer or date key, a hash of a string's bytes."""
    import pyarrow as pa

    array = _array(column)
    if pa.types.is_integer(array.type) or pa.types.is_date32(array.type):
        values = array.cast(pa.int64()) if not pa.types.is_int64(array.type) else array
        return np.asarray(values.to_numpy(zero_copy_only=False)).view(np.uint64)
    return _string_codes(array)


def _array(column: Any) -> Any:
    import pyarrow as pa

    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


@dataclass(frozen=True, slots=True)
class SortedKeys:
    """A level's key codes, sorted, with the row holding each."""

    codes: np.ndarray
    rows: np.ndarray

    @classmethod
    def of(cls, keys: Any) -> SortedKeys:
        codes = key_codes(keys)
        order = np.argsort(codes, kind="stable")
        return cls(codes[order], order.astype(np.int64))

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes + self.rows.nbytes)

    def rows_holding(self, level_keys: Any, wanted: Any, codes: np.ndarray | None = None) -> Any:
        """The rows of the level (ascending) whose key is one of ``wanted`` (distinct keys of
        the level's key type; ``codes``, their :func:`key_codes`, when known: sorted codes
        search fastest)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        codes = key_codes(wanted) if codes is None else codes
        low = np.searchsorted(self.codes, codes, side="left")
        high = np.searchsorted(self.codes, codes, side="right")
        counts = high - low
        if not counts.any():
            return np.zeros(0, dtype=np.int64)
        # Every (wanted key, level row) pair whose codes match: usually one per found key.
        which = np.repeat(np.arange(len(codes)), counts)
        within = np.arange(len(which)) - np.repeat(np.cumsum(counts) - counts, counts)
        candidates = self.rows[np.repeat(low, counts) + within]
        level = _array(level_keys).take(pa.array(candidates))
        asked = _array(wanted).take(pa.array(which))
        same = np.asarray(pc.equal(level, asked).to_numpy(zero_copy_only=False), dtype=bool)
        return np.sort(candidates[same])


def sorted_by_code(keys: Any) -> tuple[Any, np.ndarray]:
    """Distinct keys ordered by their codes, and the codes (for :meth:`SortedKeys.rows_holding`
    over many levels)."""
    import pyarrow as pa

    codes = key_codes(keys)
    order = np.argsort(codes)
    return _array(keys).take(pa.array(order)), codes[order]
