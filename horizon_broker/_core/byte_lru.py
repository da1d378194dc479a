"""A thread-safe least-recently-used map bounded by the bytes of its values.

The caches of immutable files (the reader's key sets and decoded row groups, ingestion's decoded
key index entries) keep what lookups use most within a memory budget; a value dropped or never
kept is simply read again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

_V = TypeVar("_V")


class ByteBoundedLru(Generic[_V]):
    """Values by key, at most ``max_bytes`` of them (``size`` of each), least recently used
    dropped first; a value larger than the whole budget is never kept.

    >>> cache = ByteBoundedLru(10, size=len)
    >>> cache.put("a", "12345"); cache.put("b", "123456"); cache.get("a") is None, cache.bytes
    (True, 6)
    """

    def __init__(self, max_bytes: int, size: Callable[[_V], int]) -> None:
        self.max_bytes = max_bytes
        self._size = size
        self._values: OrderedDict[Hashable, tuple[_V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> _V | None:
        with self._lock:
            found = self._values.get(key)
            if found is None:
                return None
            self._values.move_to_end(key)
            return found[0]

    def put(self, key: Hashable, value: _V) -> None:
        nbytes = self._size(value)
        with self._lock:
            if key in self._values or nbytes > self.max_bytes:
                return
            self._values[key] = (value, nbytes)
            self._bytes += nbytes
            while self._bytes > self.max_bytes:
                _, (_, dropped) = self._values.popitem(last=False)
                self._bytes -= dropped

    @property
    def bytes(self) -> int:
        with self._lock:
            return self._bytes
