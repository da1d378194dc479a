"""Finding a batch's keys in a key index level without reading every key of the level.

Filtering a level by the batch's keys (``is_in``) hashes every key of the level, every batch: the
bottom level holds every key of its partitions, so the cost grew with the table (0.2 s a batch
per 4M string keys on 2 cores). A level never changes, so its keys' 64-bit codes are sorted once,
with the row of each (:class:`SortedKeys`, kept with the level's decoded entries), and a batch
finds its keys by binary search: the cost follows the batch, not the level. A code is the key
itself for integer and date keys and a hash of the bytes for string keys, computed from the
Arrow buffers (padded by Arrow for short keys) with NumPy; rows whose code matches are compared
key to key, so hash collisions never match the wrong key.

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

from horizon_broker._core.errors import Internal

_MULTIPLIER = np.uint64(0x100000001B3)
_SEED = np.uint64(0xCBF29CE484222325)
_CHUNK_ROWS = 1 << 20
"""Long strings hashed at a time (their bytes widen to 8 bytes each while hashed)."""
_SHORT_BYTES = 16
"""Values up to this many bytes are hashed as two padded 64-bit words."""


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


def _string_codes(array: Any) -> np.ndarray:
    """Hashes of a string or binary array's values (no nulls), each a function of the value's
    bytes alone (a level's codes and a batch's must agree whatever else their arrays hold): of
    the bytes padded to 16 for values up to :data:`_SHORT_BYTES` long (:func:`_short_codes`),
    of every byte for longer ones (:func:`_long_codes`)."""
    import pyarrow as pa

    lengths = np.diff(_offsets(array))
    short = lengths <= _SHORT_BYTES
    if short.all():
        return _short_codes(array, lengths)
    codes = np.empty(len(array), dtype=np.uint64)
    for rows, hashed in ((short, _short_codes), (~short, _long_codes)):
        at = np.flatnonzero(rows)
        if len(at):
            codes[at] = hashed(array.take(pa.array(at)), lengths[at])
    return codes


def _offsets(array: Any) -> np.ndarray:
    import pyarrow as pa

    wide = pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int64 if wide else np.int32)
    return offsets[array.offset : array.offset + len(array) + 1].astype(np.int64)


def _short_codes(array: Any, lengths: np.ndarray) -> np.ndarray:
    """Codes of values of at most :data:`_SHORT_BYTES` bytes: Arrow pads each with zero bytes to
    16 (one pass in C++), and the two 64-bit words of each are mixed with its length, so that
    ``"a"`` and ``"a\\0"`` differ. A fifth of the time of hashing every byte with NumPy (0.67 s
    for a 7M-key level), :data:`_CHUNK_ROWS` values at a time."""
    import pyarrow as pa
    import pyarrow.compute as pc

    wide = pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)
    # A binary array viewed as text: the ASCII padding counts bytes and checks no encoding.
    text = array.view(pa.large_string() if wide else pa.string())
    codes = np.empty(len(array), dtype=np.uint64)
    for first in range(0, len(array), _CHUNK_ROWS):
        chunk = text.slice(first, _CHUNK_ROWS)
        padded = pc.ascii_rpad(chunk, width=_SHORT_BYTES, padding="\x00")
        begin, size = int(_offsets(padded)[0]), _SHORT_BYTES * len(chunk)
        raw = np.frombuffer(padded.buffers()[2], dtype=np.uint8)[begin : begin + size]
        if len(raw) != size:
            raise Internal("padded keys are not all 16 bytes long")
        words = raw.view(np.uint64).reshape(-1, 2)
        with np.errstate(over="ignore"):
            code = lengths[first : first + len(chunk)].astype(np.uint64) * _SEED
            code ^= words[:, 1]
            _mix_in_place(code)
            code ^= words[:, 0]
            codes[first : first + len(chunk)] = _mix_in_place(code)
    return codes


def _mix_in_place(values: np.ndarray) -> np.ndarray:
    """A 64-bit finalizer (wrapping arithmetic), so that nearby codes spread; in place, without a
    new array per step (half the time on a million codes)."""
    shifted = np.empty_like(values)
    with np.errstate(over="ignore"):
        for multiplier in (np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB93FE1A85EC5), None):
            np.right_shift(values, np.uint64(33), out=shifted)
            values ^= shifted
            if multiplier is not None:
                values *= multiplier
    return values


def _long_codes(array: Any, lengths: np.ndarray) -> np.ndarray:
    """Codes of longer values: a polynomial hash of their bytes from the Arrow offsets and data
    buffers, mixed."""
    offsets = _offsets(array)
    data = array.buffers()[2]
    raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    codes = np.empty(len(array), dtype=np.uint64)
    longest = int(lengths.max(initial=0))
    with np.errstate(over="ignore"):
        powers = np.cumprod(np.full(max(longest, 1), _MULTIPLIER, dtype=np.uint64))
        for first in range(0, len(array), _CHUNK_ROWS):
            last = min(first + _CHUNK_ROWS, len(array))
            begin, end = int(offsets[first]), int(offsets[last])
            starts = offsets[first:last] - begin
            counts = np.diff(offsets[first : last + 1])
            position = np.arange(end - begin) - np.repeat(starts, counts)
            # A zero after the bytes: every start is a valid index, and ends the last range.
            weighted = np.concatenate(
                [raw[begin:end].astype(np.uint64) * powers[position], np.zeros(1, np.uint64)]
            )
            sums = np.add.reduceat(weighted, starts)
            sums[counts == 0] = 0  # reduceat gives the next value for an empty range
            codes[first:last] = sums ^ (counts.astype(np.uint64) * _SEED)
    return _mix_in_place(codes)


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
        # Not a stable sort: rows of one code are all compared and returned in row order (see
        # rows_holding), and NumPy's default sort took a third of the stable one's 0.84 s for
        # a 7M-key level.
        order = np.argsort(codes)
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
