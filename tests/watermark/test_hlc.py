from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from horizon_broker._core.hlc import (
    LOGICAL_MASK,
    HybridLogicalClock,
    format_snapshot,
    hlc_from_ms,
    hlc_logical,
    hlc_physical_ms,
    last_hlc_of_ms,
    parse_snapshot,
)


def test_hlc_packs_physical_ms_and_logical_counter() -> None:
    hlc = hlc_from_ms(1_700_000_000_123, 7)
    assert hlc == (1_700_000_000_123 << 16) | 7
    assert hlc_physical_ms(hlc) == 1_700_000_000_123
    assert hlc_logical(hlc) == 7
    assert last_hlc_of_ms(5) == (5 << 16) | 0xFFFF
    assert hlc_from_ms(5, 0xFFFF) < hlc_from_ms(6)


def test_hlc_rejects_out_of_range_parts() -> None:
    with pytest.raises(ValueError):
        hlc_from_ms(-1)
    with pytest.raises(ValueError):
        hlc_from_ms(1, 1 << 16)


def test_clock_is_strictly_increasing_even_when_the_wall_clock_stalls_or_goes_back() -> None:
    wall = [1000]
    clock = HybridLogicalClock(lambda: wall[0])
    first = clock.now()
    assert first == hlc_from_ms(1000)
    assert clock.now() == first + 1
    wall[0] = 900
    assert clock.now() == first + 2
    wall[0] = 2000
    assert clock.now() == hlc_from_ms(2000)


def test_clock_moves_above_observed_timestamps() -> None:
    clock = HybridLogicalClock(lambda: 1000)
    clock.observe(hlc_from_ms(5000, 3))
    assert clock.now() == hlc_from_ms(5000, 4)
    clock.observe(1)  # an older one changes nothing
    assert clock.now() == hlc_from_ms(5000, 5)


def test_logical_counter_overflow_carries_into_the_next_millisecond() -> None:
    clock = HybridLogicalClock(lambda: 10, start=last_hlc_of_ms(10))
    assert clock.now() == hlc_from_ms(11)


@given(
    physical=st.integers(min_value=0, max_value=253_402_300_799_999),  # through year 9999
    logical=st.integers(min_value=0, max_value=LOGICAL_MASK),
)
def test_a_snapshot_shown_as_time_reads_back_as_the_same_hlc(physical: int, logical: int) -> None:
    hlc = hlc_from_ms(physical, logical)
    text = format_snapshot(hlc)
    assert text.endswith(f"Z+{logical}")
    assert parse_snapshot(text) == hlc


def test_a_snapshot_is_shown_as_its_utc_millisecond_and_logical_counter() -> None:
    hlcs = [hlc_from_ms(1_795_545_850_123, 5), hlc_from_ms(1_795_545_850_123, 12),
            hlc_from_ms(1_795_545_850_124, 0)]  # fmt: skip
    shown = [format_snapshot(h) for h in hlcs]
    assert shown == ["2026-11-24T18:44:10.123Z+5", "2026-11-24T18:44:10.123Z+12",
                     "2026-11-24T18:44:10.124Z+0"]  # fmt: skip
    with pytest.raises(ValueError, match="not a snapshot"):
        parse_snapshot("2026-11-24T18:44:10Z")
