"""Key index entries of level files, kept decoded between batches.

A batch resolved as columns looks its keys up in every level of its partitions. Reading and
decoding the levels (4.3M entries in 7 levels on the benchmark's table after 15 batches) cost up
to 0.6 s a batch, growing with the table. A level file never changes once written (each has a
name of its own), so the ingestion process keeps its entries decoded, at most
:data:`LEVEL_CACHE_BYTES` of them, the least recently used dropped first; a batch puts the entries
of the level it writes, so the next batch reads none of it from disk. A level dropped from the
cache (or never read) is simply read again.

A level looked up a second time while cached also keeps its keys' sorted codes
(:class:`horizon_broker.ingest.driver_columns.key_lookup.SortedKeys`), after which a batch finds its keys in it by
binary search instead of filtering every entry. Not on first use: building them costs about 3x a
filter, which only pays off over later batches (a cache too small for the index would pay it on
every batch).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from horizon_broker._core.lru import Lru
from horizon_broker.ingest.driver_columns.key_lookup import SortedKeys, supports
from horizon_broker.ingest.table import TableDefinition

LEVEL_CACHE_BYTES = 768 * 1024 * 1024
"""Decoded key index entries the ingestion process keeps (about 60 bytes an entry with a short
string key and its sorted code: some 13M entries)."""


@dataclass(slots=True)
class CachedLevel:
    """A level file's entries, and its keys' sorted codes once looked up twice."""

    entries: Any
    uses: int = 0
    keys: SortedKeys | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def nbytes(self) -> int:
        # The codes' bytes are reserved from the start: the cache cannot resize an entry.
        return int(self.entries.nbytes) + 16 * self.entries.num_rows

    def sorted_keys(self, key: str) -> SortedKeys | None:
        """The sorted codes of the one-column key ``key``, built on the second call; None
        before (or when the key type has none)."""
        with self.lock:
            self.uses += 1
            if (
                self.keys is None
                and self.uses >= 2
                and supports(self.entries.schema.field(key).type)
            ):
                self.keys = SortedKeys.of(self.entries[key])
            return self.keys


_levels: Lru[tuple[Any, ...], CachedLevel] = Lru(LEVEL_CACHE_BYTES, lambda level: level.nbytes)


def _key(path: str, table: TableDefinition) -> tuple[Any, ...]:
    # What a level's entries are derived with: the comparison and delete columns name them.
    return (os.path.abspath(path), table.comparison_columns, table.delete_column)


def cached_level(path: str, table: TableDefinition, read: Callable[[], Any]) -> CachedLevel:
    """The level file at ``path`` (an operating system path): cached, or its entries ``read()``
    and kept."""
    return _levels.get_or_load(_key(path, table), lambda: CachedLevel(read()))


def remember(path: str, table: TableDefinition, entries: Any) -> None:
    """Keep the entries of a level file just written."""
    _levels.keep(_key(path, table), CachedLevel(entries))
