"""What minor and major compactions pick (pure), against the segments a timeline shows."""

from __future__ import annotations

from horizon_broker.compaction.plan import CompactionSettings, due, plan_major, plan_minor, tiling
from horizon_broker.compaction.reclaim import ReclaimSettings, SegmentHistory, plan_steps
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment

DAY = 86_400_000


def first(partition: int, day: int = 0, rows: int = 10, size: int = 100, **extra) -> Segment:
    return Segment(
        table="t",
        interval=Interval(day * DAY, (day + 1) * DAY),
        version="v",
        partition=partition,
        row_count=rows,
        size_bytes=size,
        location=(f"d{day}/p{partition}",),
        **extra,
    )


def test_runs_stop_at_a_root_partition_no_visible_segment_covers():
    targets = plan_minor("t", [first(p) for p in (0, 1, 2, 4, 5, 7)], CompactionSettings())
    assert [t.root_range for t in targets] == [(0, 3), (4, 6)]


def test_runs_are_packed_up_to_the_target_size_and_big_segments_stay_alone():
    segments = [first(0, rows=40), first(1, rows=40), first(2, rows=40), first(3, rows=500)]
    targets = plan_minor("t", segments, CompactionSettings(target_rows=100))
    assert [t.root_range for t in targets] == [(0, 2)]


def test_the_output_takes_the_next_minor_version_over_the_inputs_root_range():
    rewritten = Segment(
        table="t", interval=Interval(0, DAY), version="v", partition=32_768, root_start=1,
        root_end=2, minor_version=3, row_count=10, location=("x",),
    )  # fmt: skip
    [target] = plan_minor("t", [first(0), first(1), rewritten, first(2)], CompactionSettings())
    assert (target.root_range, target.minor_version) == ((0, 3), 4)
    assert rewritten in target.inputs and first(1) not in target.inputs  # overshadowed


def test_the_policy_waits_for_enough_segments_or_small_files_and_skips_the_newest_chunks():
    segments = [first(p, day) for day in range(3) for p in range(3)]
    assert not plan_minor("t", segments, CompactionSettings(min_segments=4))
    assert due(segments[:3], CompactionSettings(min_segments=4, min_small_files=3))
    targets = plan_minor("t", segments, CompactionSettings(min_segments=3), skip_newest=1)
    assert sorted({t.interval.start_ms // DAY for t in targets}) == [0, 1]
    only = plan_minor("t", segments, CompactionSettings(), interval=Interval(DAY, DAY + 1))
    assert {t.interval.start_ms // DAY for t in only} == {1}


def test_a_major_compaction_tiles_every_old_root_in_a_new_higher_version():
    [target] = plan_major(
        "t", [first(p, rows=30) for p in (0, 1, 2, 5)], CompactionSettings(target_rows=60), "m"
    )
    assert target.version == "v.m" > "v" and target.core == 6
    starts = [g.root_range[0] for g in target.groups]
    assert tiling(starts, target.core) == [(0, 2), (2, 6)]


def test_reclaim_steps_take_the_most_history_first_within_the_row_and_file_budgets():
    histories = [
        SegmentHistory(first(p, rows=50), reclaim) for p, reclaim in enumerate((5, 40, 0, 20))
    ]
    steps = plan_steps(histories, ReclaimSettings(max_rows_per_step=100, max_files_per_step=1))
    assert [[s.partition for s in step] for step in steps] == [[1], [3], [0]]
