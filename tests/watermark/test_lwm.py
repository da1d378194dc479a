"""Pure low-watermark arithmetic."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from horizon_broker.watermark.lwm import (
    Laggard,
    MonotonicLwm,
    PartitionProgress,
    TableProgress,
    breakdown,
    compute_lwm,
    is_live,
    no_lwm_error,
)


def test_pinot_example_three_servers_at_1200_1100_900_give_900() -> None:
    progress = {
        0: PartitionProgress("server1", 1200, 1200),
        1: PartitionProgress("server2", 1100, 1100),
        2: PartitionProgress("server3", 900, 900),
    }
    assert compute_lwm(progress) == Laggard("server3", 2, 900)
    assert TableProgress(progress).minimum() == Laggard("server3", 2, 900)


def test_partition_lwm_is_the_min_of_ingested_and_applied() -> None:
    assert PartitionProgress("s", 500, 300).lwm == 300
    assert PartitionProgress("s", 200, 300).lwm == 200
    progress = TableProgress(
        {0: PartitionProgress("s", 1000, 400), 1: PartitionProgress("t", 600, 700)}
    )
    assert progress.minimum() == Laggard("s", 0, 400)


def test_unowned_partitions_do_not_count() -> None:
    progress = TableProgress(
        {
            0: PartitionProgress(None, 10, 10),  # released by a decommissioned server
            2: PartitionProgress("t", 50, 60),
        }
    )
    assert progress.minimum() == Laggard("t", 2, 50)
    assert TableProgress({0: PartitionProgress(None, 10, 10)}).minimum() is None


def test_an_owned_partition_without_a_report_leaves_the_table_without_a_computed_lwm() -> None:
    progress = TableProgress({1: PartitionProgress("s"), 2: PartitionProgress("t", 50, 60)})
    assert progress.minimum() == Laggard("s", 1, None)
    progress.set(1, PartitionProgress("s", 70, 80))
    assert progress.minimum() == Laggard("t", 2, 50)


def test_a_pending_partition_holds_the_served_lwm_where_it_is() -> None:
    tracker = MonotonicLwm("t")
    assert tracker.observe(Laggard("s", 1, None), 1.0) is None
    assert tracker.observe(Laggard("t", 2, 50), 2.0) == 50
    assert tracker.observe(Laggard("u", 3, None), 3.0) == 50
    assert tracker.active is None


def test_table_without_reports_has_a_clear_error() -> None:
    error = no_lwm_error("orders")
    assert "orders" in str(error) and "no server has reported progress" in str(error)


def test_breakdown_marks_stale_servers_but_keeps_their_contribution() -> None:
    progress = TableProgress(
        {
            0: PartitionProgress("live", 900, 900, 9_000),
            1: PartitionProgress("dead", 100, 100, 1_000),
        }
    )
    result = breakdown(progress, {"live": 9_500, "dead": 1_000}, frozenset(), 10_000, 5_000)
    assert result.stale_servers == ("dead",)
    assert result.computed == 100 and result.laggard == Laggard("dead", 1, 100)
    rows = {row.partition: row for row in result.partitions}
    assert rows[1].live is False and rows[1].report_age_s == pytest.approx(9.0)
    assert rows[0].live is True and rows[0].report_age_s == pytest.approx(1.0)


def test_liveness_needs_a_fresh_heartbeat_and_no_decommission() -> None:
    assert is_live("s", {"s": 1000}, frozenset(), 5000, 5000)
    assert not is_live("s", {"s": 1000}, frozenset(), 6001, 5000)
    assert not is_live("s", {"s": 1000}, frozenset({"s"}), 1000, 5000)
    assert not is_live("s", {}, frozenset(), 1000, 5000)


def test_served_lwm_never_decreases_and_records_the_regression() -> None:
    tracker = MonotonicLwm("t")
    assert tracker.observe(Laggard("a", 0, 1000), 1.0) == 1000
    assert tracker.observe(Laggard("a", 0, 700), 2.0) == 1000
    assert tracker.active is not None
    assert (tracker.active.server, tracker.active.partition) == ("a", 0)
    assert (tracker.active.from_lwm, tracker.active.to_lwm, tracker.active.at) == (1000, 700, 2.0)
    tracker.observe(Laggard("a", 0, 700), 3.0)  # the same regression is recorded once
    assert len(tracker.history) == 1
    assert tracker.observe(Laggard("a", 0, 1200), 4.0) == 1200
    assert tracker.active is None and len(tracker.history) == 1


def test_served_lwm_keeps_its_value_when_nothing_counts_any_more() -> None:
    tracker = MonotonicLwm("t")
    tracker.observe(Laggard("a", 0, 50), 1.0)
    assert tracker.observe(None, 2.0) == 50


updates = st.lists(
    st.tuples(
        st.integers(0, 7),
        st.sampled_from([None, "a", "b", "c"]),
        st.one_of(st.none(), st.integers(0, 50)),
        st.integers(0, 50),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(updates)
def test_incremental_minimum_matches_a_full_scan(steps: list) -> None:
    progress = TableProgress()
    model: dict[int, PartitionProgress] = {}
    for partition, owner, ingested, applied in steps:
        entry = PartitionProgress(owner, ingested, None if ingested is None else applied)
        progress.set(partition, entry)
        model[partition] = entry
        found, expected = progress.minimum(), compute_lwm(model)
        assert (found is None) == (expected is None)
        if found is not None and expected is not None:
            assert found == expected or (found.lwm == expected.lwm and found.lwm is not None)
            assert model[found.partition].lwm == found.lwm
