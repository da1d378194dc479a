"""Decoded large row groups of segment files, kept for the key lookups that come back to them.

pyarrow reads no Parquet page index, so a lookup decodes whole the one row group that may hold
its key. An ingestion batch's row groups are small, but a compacted segment's reach 8 MiB (about
190,000 rows of a narrow table): decoding one costs about 10 ms, against a lookup of about 5 ms
otherwise. Segment files are immutable, so a row group decoded once stays true: row groups of at
least ``min_rows`` rows are kept whole (every column) within a memory budget, least recently used
dropped first, and a lookup in a kept row group only filters it. Small row groups are decoded each
time (cheap), so a table of many small files does not churn the cache.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from core.byte_lru import ByteBoundedLru

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
LARGE_ROW_GROUP_ROWS = 50_000
"""Row groups of this many rows or more are kept (decoding a smaller one takes about a
millisecond or less)."""


class RowGroupCache:
    """Whole decoded row groups by (path, row group)."""

    def __init__(
        self, max_bytes: int = DEFAULT_MAX_BYTES, min_rows: int = LARGE_ROW_GROUP_ROWS
    ) -> None:
        self.min_rows = min_rows
        self.decodes = 0
        """Row groups decoded for the cache (a test probe: a kept row group leaves it flat)."""
        self._groups: ByteBoundedLru[pa.Table] = ByteBoundedLru(max_bytes, lambda t: t.nbytes)

    def keeps(self, rows: int) -> bool:
        """Whether a row group of ``rows`` rows is read through this cache."""
        return rows >= self.min_rows

    def group(self, path: str, index: int, decode: Callable[[], pa.Table]) -> pa.Table:
        """Row group ``index`` of the file at ``path``, every column (``decode`` reads it when
        it is not kept; its errors pass through)."""
        found = self._groups.get((path, index))
        if found is not None:
            return found
        table = decode()
        self.decodes += 1
        self._groups.put((path, index), table)
        return table

    @property
    def bytes(self) -> int:
        return self._groups.bytes
