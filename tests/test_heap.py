"""The server's start-up heap is frozen out of full collections; what is made later is still
collected."""

from __future__ import annotations

import gc
import weakref

from horizon_broker._core.heap import settle_startup_heap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_the_start_up_heap_is_frozen_and_cycles_made_later_are_still_collected() -> None:
    lived = _Node()
    try:
        frozen = settle_startup_heap()
        # Other threads of the test process may free frozen objects meanwhile; none are added.
        assert 0 < gc.get_freeze_count() <= frozen
        assert not any(item is lived for item in gc.get_objects())  # out of every collection
        first, second = _Node(), _Node()
        first.other, second.other = second, first
        gone = weakref.ref(first)
        del first, second
        gc.collect()
        assert gone() is None  # a cycle made after the freeze is collected
    finally:
        gc.unfreeze()
