"""When a query may read a timeline's fallback for an unreadable segment (pure)."""

from __future__ import annotations

import doctest

import horizon_broker.timeline.fallback
from horizon_broker.timeline.fallback import fallback_problem, merged_bound
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from horizon_broker.timeline.timeline import Timeline

DAY = Interval(0, 86_400_000)
NEXT_DAY = Interval(86_400_000, 2 * 86_400_000)


def first(
    partition: int, max_valid_from: int, interval: Interval = DAY, version: str = "v"
) -> Segment:
    return Segment(
        table="t",
        interval=interval,
        version=version,
        partition=partition,
        core_partitions=2,
        max_valid_from=max_valid_from,
    )


def overwrite(partition: int, roots: tuple[int, int], minor: int, applied: int | None) -> Segment:
    return Segment(
        table="t",
        interval=DAY,
        version="v",
        partition=partition,
        core_partitions=2,
        root_start=roots[0],
        root_end=roots[1],
        minor_version=minor,
        applied_through=applied,
    )


def visible_without(segments: list[Segment], lost: Segment) -> tuple[list[Segment], list[Segment]]:
    timeline = Timeline("t")
    timeline.add_all(segments)
    before = timeline.visible_segments()
    timeline.remove_unreadable(lost)
    return before, timeline.visible_segments()


def test_the_module_docstring_example_holds() -> None:
    outcome = doctest.testmod(horizon_broker.timeline.fallback, optionflags=doctest.ELLIPSIS)
    assert outcome.attempted > 0 and outcome.failed == 0


def test_a_first_generation_segment_holds_every_update_up_to_its_greatest_valid_from() -> None:
    assert first(0, 500).fallback_bound == 500
    unknown = Segment(table="t", interval=DAY, version="v", partition=0)
    assert unknown.fallback_bound is None
    assert overwrite(32768, (0, 1), 1, None).fallback_bound is None, "a rewrite must say"
    assert overwrite(32768, (0, 1), 1, 900).fallback_bound == 900


def test_a_merge_holds_the_updates_all_its_inputs_held() -> None:
    assert merged_bound([first(0, 500), overwrite(32768, (1, 2), 1, 900)]) == 500
    assert merged_bound([first(0, 500), overwrite(32768, (1, 2), 1, None)]) is None
    assert merged_bound([]) is None


def test_an_updater_rewrite_falls_back_to_its_input_only_below_the_inputs_bound() -> None:
    p0, p1 = first(0, 500), first(1, 600)
    rewrite = overwrite(32768, (0, 1), 1, 1000)
    before, after = visible_without([p0, p1, rewrite], rewrite)
    assert {s.partition for s in after} == {0, 1}
    assert fallback_problem([rewrite], before, after, snapshot=500) is None
    problem = fallback_problem([rewrite], before, after, snapshot=501)
    assert problem is not None and "up to 500 only" in problem and str(p0.id) in problem


def test_a_compaction_output_falls_back_to_its_inputs_up_to_their_lowest_bound() -> None:
    p0, p1 = first(0, 500), first(1, 600)
    compacted = overwrite(32768, (0, 2), 1, merged_bound([p0, p1]))
    before, after = visible_without([p0, p1, compacted], compacted)
    assert fallback_problem([compacted], before, after, snapshot=500) is None
    assert fallback_problem([compacted], before, after, snapshot=550) is not None


def test_a_lost_segment_with_nothing_under_it_fails_at_every_snapshot() -> None:
    p0, p1 = first(0, 500), first(1, 600)
    before, after = visible_without([p0, p1], p0)
    assert after == [], "an incomplete chunk is not read at all"
    for snapshot in (None, 0, 10**12):
        problem = fallback_problem([p0], before, after, snapshot)
        assert problem is not None and "no complete data is left" in problem


def test_an_append_table_reads_any_complete_fallback() -> None:
    p0, p1 = first(0, 500), first(1, 600)
    rewrite = overwrite(32768, (0, 1), 1, None)
    before, after = visible_without([p0, p1, rewrite], rewrite)
    assert fallback_problem([rewrite], before, after, snapshot=None) is None


def test_segments_already_read_before_the_loss_are_not_fallbacks() -> None:
    """Only what the fallback brought in is judged: p1 was read before and stays exact."""
    p0, p1 = first(0, 500), first(1, 100)
    rewrite = overwrite(32768, (0, 1), 1, 1000)
    before, after = visible_without([p0, p1, rewrite], rewrite)
    assert fallback_problem([rewrite], before, after, snapshot=400) is None


def test_a_lower_major_version_covering_the_chunk_is_judged_by_its_own_bound() -> None:
    old = [first(0, 300, version="v1"), first(1, 300, version="v1")]
    new = [first(0, 800, version="v2"), first(1, 800, version="v2")]
    before, after = visible_without([*old, *new], new[0])
    assert {s.version for s in after} == {"v1"}
    assert fallback_problem([new[0]], before, after, snapshot=300) is None
    assert fallback_problem([new[0]], before, after, snapshot=301) is not None


def test_coverage_is_judged_per_time_chunk() -> None:
    today = [first(0, 500), first(1, 500)]
    tomorrow = [first(0, 500, NEXT_DAY), first(1, 500, NEXT_DAY)]
    before, after = visible_without([*today, *tomorrow], tomorrow[1])
    problem = fallback_problem([tomorrow[1]], before, after, snapshot=400)
    assert problem is not None and str(NEXT_DAY) in problem
