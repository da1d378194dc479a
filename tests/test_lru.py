"""The generic LRU every cache uses: what it keeps, what it drops first, and its counters."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from horizon_broker._core.lru import Lru


def test_the_least_recently_used_entry_goes_first_and_a_read_makes_an_entry_recent() -> None:
    cache: Lru[str, int] = Lru(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    cache.put("c", 3)
    assert list(cache) == ["a", "c"], "b, least recently used, was dropped"
    assert (cache.hits, cache.misses, cache.evictions) == (1, 0, 1)


def test_a_weighted_cache_holds_at_most_its_capacity_in_weight_and_never_an_oversized_value() -> (
    None
):
    cache: Lru[str, bytes] = Lru(10, weight=len)
    assert cache.put("a", b"x" * 6)
    assert cache.put("b", b"x" * 4)
    assert cache.put("c", b"x" * 3)
    assert list(cache) == ["b", "c"] and cache.bytes == 7
    assert not cache.put("huge", b"x" * 11), "heavier than the whole capacity"
    assert "huge" not in cache and cache.weight == 7


def test_an_entry_over_the_per_entry_limit_is_refused_and_leaves_the_old_value() -> None:
    cache: Lru[str, bytes] = Lru(100, weight=len, max_entry_weight=5)
    cache.put("a", b"old")
    assert not cache.put("a", b"x" * 6)
    assert cache.peek("a") == b"old"


def test_keep_returns_the_value_already_held_and_does_not_make_it_recent() -> None:
    cache: Lru[str, str] = Lru(2)
    cache.put("a", "first")
    cache.put("b", "b")
    assert cache.keep("a", "second") == "first"
    cache.put("c", "c")
    assert "a" not in cache, "keep did not use a: it stayed least recent"


def test_get_or_load_loads_once_and_counts_the_miss() -> None:
    cache: Lru[str, int] = Lru(4)
    loads: list[str] = []

    def load() -> int:
        loads.append("x")
        return 7

    assert cache.get_or_load("x", load) == 7
    assert cache.get_or_load("x", load) == 7
    assert loads == ["x"] and (cache.hits, cache.misses) == (1, 1)


def test_peek_and_contains_neither_reorder_nor_count() -> None:
    cache: Lru[str, int] = Lru(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.peek("a") == 1 and "a" in cache and cache.peek("z") is None
    cache.put("c", 3)
    assert list(cache) == ["b", "c"] and (cache.hits, cache.misses) == (0, 0)


def test_threads_putting_and_getting_keep_the_weight_equal_to_what_is_held() -> None:
    """The caches are shared by query threads, the warming thread and the combined-keys
    builder: their bookkeeping must not tear."""
    cache: Lru[int, bytes] = Lru(60, weight=len)
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(20_000):
                cache.put((i + offset) % 3, b"x" * (i % 40))
                cache.get(i % 5)
        except BaseException as error:  # a torn OrderedDict raises in the thread
            errors.append(error)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show
    try:
        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors
    assert cache.weight == sum(len(cache.peek(key) or b"") for key in cache) <= 60
    assert cache.hits + cache.misses == 4 * 20_000


@dataclass
class _ListLru:
    """The reference: a list, least recently used first, searched from end to end. Each value
    is its own weight, or weighs 1 when ``counted``."""

    capacity: int
    max_entry: int
    counted: bool
    items: list[tuple[int, int]] = field(default_factory=list)
    hits: int = 0
    misses: int = 0
    evictions: int = 0

    def weigh(self, value: int) -> int:
        return 1 if self.counted else value

    def weight(self) -> int:
        return sum(self.weigh(v) for _, v in self.items)

    def _find(self, key: int) -> int | None:
        return next((i for i, (k, _) in enumerate(self.items) if k == key), None)

    def get(self, key: int) -> int | None:
        at = self._find(key)
        if at is None:
            self.misses += 1
            return None
        self.hits += 1
        self.items.append(self.items.pop(at))
        return self.items[-1][1]

    def _hold(self, key: int, value: int) -> None:
        self.items.append((key, value))
        while self.weight() > self.capacity:
            self.items.pop(0)
            self.evictions += 1

    def put(self, key: int, value: int) -> bool:
        if self.weigh(value) > self.max_entry:
            return False
        self.discard(key)
        self._hold(key, value)
        return True

    def keep(self, key: int, value: int) -> int:
        at = self._find(key)
        if at is not None:
            return self.items[at][1]
        if self.weigh(value) <= self.max_entry:
            self._hold(key, value)
        return value

    def discard(self, key: int) -> None:
        at = self._find(key)
        if at is not None:
            self.items.pop(at)


_operations = st.lists(
    st.tuples(
        st.sampled_from(["get", "put", "keep", "discard", "load"]),
        st.integers(0, 6),
        st.integers(0, 12),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(
    capacity=st.integers(1, 20),
    max_entry=st.integers(0, 25),
    weighted=st.booleans(),
    operations=_operations,
)
def test_eviction_order_and_counters_match_a_list_based_lru(
    capacity: int, max_entry: int, weighted: bool, operations: list[tuple[str, int, int]]
) -> None:
    cache: Lru[int, int] = Lru(
        capacity, weight=(lambda v: v) if weighted else None, max_entry_weight=max_entry
    )
    model = _ListLru(capacity, min(capacity, max_entry), counted=not weighted)
    for name, key, value in operations:
        if name == "get":
            assert cache.get(key) == model.get(key)
        elif name == "put":
            assert cache.put(key, value) == model.put(key, value)
        elif name == "keep":
            assert cache.keep(key, value) == model.keep(key, value)
        elif name == "load":
            expected = model.get(key)
            loaded = cache.get_or_load(key, lambda v=value: v)  # type: ignore[misc]
            assert loaded == (expected if expected is not None else model.keep(key, value))
        else:
            cache.discard(key)
            model.discard(key)
        assert list(cache) == [k for k, _ in model.items]
        assert [cache.peek(k) for k in cache] == [v for _, v in model.items]
        assert (cache.hits, cache.misses, cache.evictions) == (
            model.hits,
            model.misses,
            model.evictions,
        )
        assert cache.weight == model.weight() and len(cache) == len(model.items)
