"""Decoded large row groups of segment files, kept for the key lookups that come back to them.

pyarrow reads no Parquet page index, so a lookup decodes whole the one row group that may hold
its key. An ingestion batch's row groups are small, but a compacted segment's reach 8 MiB (about
190,000 rows of a narrow table): decoding one costs about 10 ms, against a lookup of about 5 ms
otherwise. Segment files are immutable, so a row group decoded once stays true: row groups of at
least ``min_rows`` rows are kept whole (every column) within a memory budget, least recently used
dropped first, and a lookup in a kept row group only filters it. Small row groups are decoded each
time (cheap), so a table of many small files does not churn the cache.

Filtering a kept group still looks at each of its rows; a lookup by an integer key instead bisects
the group's :class:`KeyPositions` (its keys sorted, with their rows), built once per group and
column, and filters only the rows that hold the key.

A group larger than ``max_whole_bytes`` uncompressed as its footer says (1/32 of the budget by
default, 8 MiB; decoded, about three times that: a wide table's compacted group) is read instead
by pages, only the rows holding a lookup's integer key
(:mod:`horizon_broker.broker.direct_lookup.page_rows`, about 8 ms at scale factor 1's lineitem,
against 37 ms to decode its 8 MiB group whole, of which the budget keeps five). A group read by
pages ``promote_after`` times among the last ``PAGE_READS_WINDOW`` reads by pages (a rate, so
that random lookups over many groups never make them all hot in time) and no larger than a sixth
of the budget (decoded, about half of it at most) is hot: it is then decoded and kept like the
others.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from horizon_broker._core.lru import Lru
from horizon_broker.broker.direct_lookup.key_sets import entries_for

_Counts = TypeVar("_Counts", int, np.ndarray)

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
LARGE_ROW_GROUP_ROWS = 50_000
"""Row groups of this many rows or more are kept (decoding a smaller one takes about a
millisecond or less)."""
PROMOTE_AFTER = 8
"""Reads by pages of one row group, among the last :data:`PAGE_READS_WINDOW`, after which it is
decoded and kept (a hot group)."""
PAGE_READS_WINDOW = 64
"""The recent reads by pages a group's heat is counted over."""


@dataclass(frozen=True, slots=True)
class KeyPositions:
    """An integer column's non-null values in a kept row group, sorted, with their rows.

    >>> index = KeyPositions.of(pa.chunked_array([[7, None, 3, 7]]))
    >>> index.rows_holding(np.array([7])).tolist(), index.rows_holding(np.array([4])).tolist()
    ([0, 3], [])
    """

    keys: np.ndarray
    rows: np.ndarray

    @staticmethod
    def of(column: pa.ChunkedArray) -> KeyPositions:
        valid = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        values = np.asarray(pc.fill_null(column, 0).to_numpy(), dtype=np.int64)
        rows = np.flatnonzero(valid)
        order = np.argsort(values[rows], kind="stable")
        return KeyPositions(values[rows][order], rows[order])

    def rows_holding(self, values: np.ndarray) -> np.ndarray:
        """The rows (ascending) whose key is one of the sorted distinct ``values``."""
        return np.sort(entries_for(self.keys, self.rows, values))

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.rows.nbytes)


class RowGroupCache:
    """Whole decoded row groups by (path, row group), with key positions of their integer keys."""

    def __init__(
        self,
        max_bytes: int = DEFAULT_MAX_BYTES,
        min_rows: int = LARGE_ROW_GROUP_ROWS,
        max_whole_bytes: int | None = None,
        promote_after: int = PROMOTE_AFTER,
        promote_window: int = PAGE_READS_WINDOW,
    ) -> None:
        self.min_rows = min_rows
        self.max_whole_bytes = max_bytes // 32 if max_whole_bytes is None else max_whole_bytes
        self.max_promoted_bytes = max(self.max_whole_bytes, max_bytes // 6)
        self.promote_after = promote_after
        self._recent_pages: deque[tuple[str, int]] = deque(maxlen=promote_window)
        self._recent_counts: Counter[tuple[str, int]] = Counter()
        self._recent_lock = threading.Lock()
        self.decodes = 0
        """Row groups decoded for the cache (a test probe: a kept row group leaves it flat)."""
        self.indexed = 0
        """Key positions built (a test probe)."""
        self.page_reads = 0
        """Row-group runs read by pages (a test probe)."""
        self._groups: Lru[tuple[str, int], pa.Table] = Lru(max_bytes, lambda t: t.nbytes)
        self._positions: Lru[tuple[str, int, str], KeyPositions] = Lru(
            max(1, max_bytes // 4), lambda index: index.nbytes
        )

    def keeps(self, rows: int) -> bool:
        """Whether a row group of ``rows`` rows is a large one (kept, or read by pages)."""
        return rows >= self.min_rows

    def reads_pages(self, rows: _Counts, stored_bytes: _Counts) -> _Counts:
        """Which row groups (``rows`` rows, ``stored_bytes`` uncompressed, as their footers
        say) are too large to keep whole at first: a lookup by integer key reads only its rows
        of them (unless one is hot and kept: :meth:`hot`).

        >>> RowGroupCache(max_bytes=3200, min_rows=10).reads_pages(
        ...     np.array([5, 50, 50]), np.array([500, 100, 101])).tolist()
        [False, False, True]
        """
        return (rows >= self.min_rows) & (stored_bytes > self.max_whole_bytes)

    def hot(self, path: str, index: int, stored_bytes: int) -> bool:
        """Whether row group ``index`` of ``path``, read by pages, is kept or now should be: it
        is, or it is small enough and this read (counted) makes :attr:`promote_after` among the
        last :data:`PAGE_READS_WINDOW` reads by pages."""
        key = (path, index)
        if key in self._groups:  # the read that follows counts the hit
            return True
        if stored_bytes > self.max_promoted_bytes:
            return False
        with self._recent_lock:
            if len(self._recent_pages) == self._recent_pages.maxlen:
                oldest = self._recent_pages[0]
                self._recent_counts[oldest] -= 1
                if not self._recent_counts[oldest]:
                    del self._recent_counts[oldest]
            self._recent_pages.append(key)
            self._recent_counts[key] += 1
            return self._recent_counts[key] >= self.promote_after

    def group(self, path: str, index: int, decode: Callable[[], pa.Table]) -> pa.Table:
        """Row group ``index`` of the file at ``path``, every column (``decode`` reads it when
        it is not kept; its errors pass through)."""
        return self._groups.get_or_load((path, index), lambda: self._decoded(decode))

    def _decoded(self, decode: Callable[[], pa.Table]) -> pa.Table:
        table = decode()
        self.decodes += 1
        return table

    def positions(self, path: str, index: int, column: str, table: pa.Table) -> KeyPositions:
        """The :class:`KeyPositions` of integer ``column`` of kept row group ``index`` of the
        file at ``path``, decoded as ``table`` (built on first use)."""
        return self._positions.get_or_load(
            (path, index, column), lambda: self._indexed(table.column(column))
        )

    def _indexed(self, column: pa.ChunkedArray) -> KeyPositions:
        self.indexed += 1
        return KeyPositions.of(column)

    @property
    def bytes(self) -> int:
        """Bytes of the kept row groups (their key positions have a quarter of the budget more)."""
        return self._groups.bytes
