"""The pure pin rules against a simple reference: what a set of pins holds back."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from horizon_broker.pins.rules import Pin, capped_horizon, holds_release, oldest_pinned


def pin(snapshot: int, *, created: int = 0, expires: int = 10_000, tables=("t",)) -> Pin:
    return Pin(f"p{snapshot}-{created}", tuple(tables), snapshot, created, expires)


def test_an_expired_pin_holds_nothing_back():
    pins = [pin(100, expires=50)]
    assert oldest_pinned(pins, "t", now_ms=60) is None
    assert capped_horizon(500, 0, oldest_pinned(pins, "t", now_ms=60)) == 500
    assert not holds_release(pins, "t", released_ms=10, grace_ms=0, now_ms=60)


def test_a_pin_of_another_table_holds_nothing_back_here():
    pins = [pin(100, tables=("other",))]
    assert oldest_pinned(pins, "t", now_ms=0) is None


def test_a_pin_taken_within_the_grace_period_after_a_release_holds_the_released_files():
    pins = [pin(100, created=1_050)]
    assert holds_release(pins, "t", released_ms=1_000, grace_ms=100, now_ms=1_060)
    assert not holds_release(pins, "t", released_ms=800, grace_ms=100, now_ms=1_060)


@given(
    wanted=st.integers(0, 10_000),
    previous=st.integers(0, 10_000),
    pins=st.lists(st.tuples(st.integers(0, 10_000), st.booleans()), max_size=5),
)
def test_the_granted_horizon_never_passes_a_live_pin_nor_goes_down(wanted, previous, pins):
    now = 500
    stored = [
        pin(s, created=i, expires=now + 1 if live else now) for i, (s, live) in enumerate(pins)
    ]
    live = [s for s, alive in pins if alive]
    granted = capped_horizon(wanted, previous, oldest_pinned(stored, "t", now))
    assert granted >= previous
    assert granted <= max(previous, wanted)
    if live and min(live) >= previous:
        assert granted <= min(live)
    if not live:
        assert granted == max(previous, wanted)
