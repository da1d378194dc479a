"""The result cache: an answer at a fixed snapshot over fixed timelines cannot change.

The key is the rewritten SQL (which names the snapshot and the segment views), the snapshot and
timeline generation of every table read (and its change-feed windows), and the row cap. A query
that reads no upsert table at a snapshot, or calls anything whose value is not a function of the
data (``rand()``, ``current_timestamp``, ``uuid()``, ``TABLESAMPLE`` ...), is never cached. The
cache is an LRU bounded in bytes (Arrow buffer sizes); an answer over the per-entry limit is not
kept. Grants are not part of the key: the engine checks them on every call, hit or miss.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from horizon_broker._core.lru import Lru

HIT = "hit"
MISS = "miss"
OFF = "off"
BYPASSED = "bypassed"


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    schema: pa.Schema
    batches: tuple[pa.RecordBatch, ...]
    nbytes: int


def cache_key(prepared: Any, max_rows: int) -> tuple[Hashable | None, str]:
    """``(key, "")`` for a cacheable prepared query, else ``(None, why not)``."""
    reads = [t for t in prepared.tables if t.snapshot is not None or t.change_windows]
    if not reads:
        return None, "it reads no table at a snapshot"
    reason = prepared.plan.shape.uncacheable
    if reason is not None:
        return None, reason
    tables = tuple(
        sorted((t.table.lower(), t.generation, t.snapshot, t.change_windows) for t in reads)
    )
    return (prepared.sql, tables, max_rows), ""


def cache_decision(
    cache: ResultCache | None, prepared: Any, max_rows: int, *, use_cache: bool
) -> tuple[Hashable | None, str]:
    """The cache key of ``prepared`` (None: not cached) and what the metadata says of it."""
    if cache is None:
        return None, OFF
    if not use_cache:
        return None, BYPASSED
    key, reason = cache_key(prepared, max_rows)
    return (key, MISS) if key is not None else (None, f"not cached: {reason}")


class ResultCache:
    """A byte-bounded LRU of answers (thread-safe)."""

    def __init__(self, max_bytes: int, max_entry_bytes: int) -> None:
        self._entries: Lru[Hashable, CachedAnswer] = Lru(
            max_bytes, lambda answer: answer.nbytes, max_entry_weight=max_entry_bytes
        )
        self.max_bytes = max_bytes
        self.max_entry_bytes = self._entries.max_entry_weight

    @property
    def hits(self) -> int:
        return self._entries.hits

    @property
    def misses(self) -> int:
        return self._entries.misses

    @property
    def evictions(self) -> int:
        return self._entries.evictions

    @property
    def nbytes(self) -> int:
        return self._entries.weight

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> CachedAnswer | None:
        return self._entries.get(key)

    def contains(self, key: Hashable) -> bool:
        """Whether ``key`` is held (explain's question; no LRU touch, no count)."""
        return key in self._entries

    def put(self, key: Hashable, schema: pa.Schema, batches: Sequence[pa.RecordBatch]) -> bool:
        """Keep an answer; False when it is over the per-entry limit."""
        nbytes = sum(batch.nbytes for batch in batches)
        return self._entries.put(key, CachedAnswer(schema, tuple(batches), nbytes))

    def recorder(self, key: Hashable, schema: pa.Schema) -> Recorder:
        return Recorder(self, key, schema)


class Recorder:
    """Collects a miss's batches as they stream out; kept only when the stream ends whole and
    stays under the per-entry limit (a cancelled or failed stream is never cached)."""

    def __init__(self, cache: ResultCache, key: Hashable, schema: pa.Schema) -> None:
        self._cache = cache
        self._key = key
        self._schema = schema
        self._batches: list[pa.RecordBatch] | None = []
        self._bytes = 0

    def add(self, batch: pa.RecordBatch) -> None:
        if self._batches is None:
            return
        self._bytes += batch.nbytes
        if self._bytes > self._cache.max_entry_bytes:
            self._batches = None  # too big to keep: let the memory go now
        else:
            self._batches.append(batch)

    def finish(self) -> bool:
        if self._batches is None:
            return False
        return self._cache.put(self._key, self._schema, self._batches)
