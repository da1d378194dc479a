"""One thread-safe least-recently-used map for every cache: bounded by entry count or by a weight
(bytes), with the counters the caches' metrics and test probes read.

What the caches keep is immutable or derived (answers at a fixed snapshot, footers and key arrays
of immutable files, schemas of a query shape): a value dropped or never kept is made again, so the
map only has to bound memory and keep what is used most.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")


def _one(_value: object) -> int:
    return 1


class Lru(Generic[_K, _V]):
    """Values by key, at most ``capacity`` of them: entries, or with ``weight`` the sum of each
    value's weight (its bytes). Past it the least recently used go first; a value heavier than
    ``max_entry_weight`` (at most, and by default, the capacity) is never kept.

    >>> cache = Lru(10, weight=len)
    >>> cache.put("a", "12345"), cache.put("b", "123456"), cache.get("a"), cache.weight
    (True, True, None, 6)
    >>> cache.hits, cache.misses, cache.evictions
    (0, 1, 1)
    """

    def __init__(
        self,
        capacity: int,
        weight: Callable[[_V], int] | None = None,
        *,
        max_entry_weight: int | None = None,
    ) -> None:
        self.capacity = capacity
        self.max_entry_weight = (
            capacity if max_entry_weight is None else min(max_entry_weight, capacity)
        )
        self._weigh = weight or _one
        self._entries: OrderedDict[_K, tuple[_V, int]] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        """Entries dropped to make room (not those replaced or discarded)."""

    def get(self, key: _K) -> _V | None:
        """The value under ``key``, now the most recently used (None: not held); counted as a
        hit or a miss."""
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return found[0]

    def peek(self, key: _K) -> _V | None:
        """The value under ``key`` without using it: no reordering, no count."""
        with self._lock:
            found = self._entries.get(key)
            return None if found is None else found[0]

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    def put(self, key: _K, value: _V) -> bool:
        """Hold ``value`` under ``key`` as the most recently used, replacing any value there;
        False (and nothing changed) when it is too heavy to keep."""
        weight = self._weigh(value)
        if weight > self.max_entry_weight:
            return False
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._weight -= old[1]
            self._insert(key, value, weight)
            return True

    def keep(self, key: _K, value: _V) -> _V:
        """The value held under ``key``, untouched; else ``value``, held when it fits. The first
        of two threads that made the same value wins, and both go on with its value."""
        weight = self._weigh(value)
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                return found[0]
            if weight <= self.max_entry_weight:
                self._insert(key, value, weight)
            return value

    def get_or_load(self, key: _K, load: Callable[[], _V]) -> _V:
        """The value under ``key``, or ``load()`` (called outside the lock; its errors pass
        through) kept as :meth:`keep` keeps it."""
        found = self.get(key)
        if found is not None:
            return found
        return self.keep(key, load())

    def discard(self, key: _K) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._weight -= old[1]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._weight = 0

    def _insert(self, key: _K, value: _V, weight: int) -> None:
        """Under the lock: ``key`` is not held; hold it last and drop the oldest past capacity
        (never the new entry, which weighs no more than the capacity)."""
        self._entries[key] = (value, weight)
        self._weight += weight
        while self._weight > self.capacity:
            _, (_, dropped) = self._entries.popitem(last=False)
            self._weight -= dropped
            self.evictions += 1

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[_K]:
        """The keys held, least recently used first (a copy: the map may change meanwhile)."""
        with self._lock:
            return iter(list(self._entries))

    @property
    def weight(self) -> int:
        """The held values' total weight (their count when unweighted)."""
        return self._weight

    @property
    def bytes(self) -> int:
        """:attr:`weight`, by the name of a cache weighed in bytes."""
        return self._weight
