"""Which segments an updater rewrite merges: :mod:`horizon_broker.ingest.rewrite_groups`.

The property tests build a time chunk's visible segments (first-generation ones with gaps
between their root partitions, some merged earlier into overwrites), choose the segments updates
are for, and check the groups against the rules: each group a gap-free run of one chunk and
version that holds a segment to rewrite, merged neighbours small and this server's, the target
kept; and, through the real timeline, that publishing the groups' rewrites hides exactly the
segments they replace and leaves every root partition covered as before.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from horizon_broker.ingest.rewrite_groups import SMALL_SHARE, rewrite_groups
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from horizon_broker.timeline.timeline import Timeline
from tests.compaction.test_plan import DAY, first

TARGET_ROWS = 1_000
TARGET_BYTES = 10_000


def seg(partition: int, rows: int, *, day: int = 0, server: str = "s", **extra) -> Segment:
    return first(partition, day, rows, rows * 10, server=server, **extra)


def ranges(groups: list[tuple[Segment, ...]]) -> list[tuple[int, int]]:
    return [(group[0].root_range[0], group[-1].root_range[1]) for group in groups]


def groups_of(visible: list[Segment], rewritten: list[Segment], **kwargs) -> list[tuple[Segment, ...]]:  # fmt: skip
    options = {"server": "s", "target_rows": TARGET_ROWS, "target_bytes": TARGET_BYTES, **kwargs}
    return rewrite_groups(visible, rewritten, **options)


def test_a_batchs_small_segments_are_merged_into_the_rewrite_next_to_them():
    big = [seg(p, 700) for p in range(3)]
    small = [seg(p, 100) for p in range(3, 9)]
    groups = groups_of([*big, *small], [*big, small[0]])
    # Up to the target of 1,000 rows; [6, 9) holds no segment to rewrite and stays.
    assert ranges(groups) == [(0, 1), (1, 2), (2, 6)]


def test_without_a_target_every_segment_is_rewritten_alone():
    segments = [seg(p, 10) for p in range(4)]
    assert ranges(groups_of(segments, segments, target_rows=0)) == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_a_run_stops_at_a_root_no_visible_segment_covers():
    segments = [seg(0, 10), seg(1, 10), seg(3, 10)]  # 2 may be a batch still writing
    assert ranges(groups_of(segments, segments)) == [(0, 2), (3, 4)]


def test_large_segments_nothing_updates_and_other_servers_segments_stay():
    segments = [seg(0, 10), seg(1, TARGET_ROWS // 2), seg(2, 10), seg(3, 10, server="other")]
    assert ranges(groups_of(segments, [segments[0], segments[2]])) == [(0, 1), (2, 3)]


def test_a_segment_of_unknown_size_is_rewritten_alone():
    unknown = Segment(table="t", interval=Interval(0, DAY), version="v", partition=1)
    segments = [seg(0, 10), unknown, seg(2, 10)]
    assert ranges(groups_of(segments, segments)) == [(0, 1), (1, 2), (2, 3)]


def test_chunks_and_major_versions_are_never_merged():
    segments = [seg(0, 10), seg(1, 10, day=1), seg(2, 10, day=1)]
    other = Segment(table="t", interval=Interval(DAY, 2 * DAY), version="w", partition=3,
                    row_count=10, size_bytes=100, server="s")  # fmt: skip
    groups = groups_of([*segments, other], [*segments, other])
    assert [(g[0].interval.start_ms, g[0].version, len(g)) for g in groups] == [
        (0, "v", 1), (DAY, "v", 2), (DAY, "w", 1)
    ]  # fmt: skip


def test_a_segment_to_rewrite_that_is_not_visible_goes_alone():
    hidden = seg(5, 10)
    assert ranges(groups_of([seg(0, 10)], [hidden])) == [(5, 6)]


@st.composite
def chunks(draw: st.DrawFn) -> tuple[list[Segment], list[Segment]]:
    """A chunk's visible segments (roots with gaps, some earlier overwrites over runs of them,
    mixed servers, sizes, some unknown) and the ones updates are for."""
    count = draw(st.integers(1, 14))
    roots = sorted(draw(st.sets(st.integers(0, 20), min_size=count, max_size=count)))
    visible: list[Segment] = []
    overwrite = 32_768
    i = 0
    while i < len(roots):
        run = 1
        while i + run < len(roots) and roots[i + run] == roots[i] + run and draw(st.booleans()):
            run += 1
        rows = draw(st.sampled_from([0, 5, 50, 200, 260, 400, 900, 1_500]))
        server = draw(st.sampled_from(["s", "s", "other"]))
        sized = {"row_count": rows, "size_bytes": rows * 10, "server": server}
        if run == 1 and draw(st.booleans()):
            visible.append(Segment(table="t", interval=Interval(0, DAY), version="v",
                                   partition=roots[i], **sized))  # fmt: skip
        else:
            visible.append(
                Segment(
                    table="t",
                    interval=Interval(0, DAY),
                    version="v",
                    partition=overwrite,
                    root_start=roots[i],
                    root_end=roots[i] + run,
                    minor_version=draw(st.integers(1, 3)),
                    **sized,
                )
            )
            overwrite += 1
        i += run
    rewritten = draw(st.lists(st.sampled_from(visible), unique_by=lambda s: s.id))
    return visible, rewritten


@settings(max_examples=300, deadline=None)
@given(chunks())
def test_groups_follow_the_rules_and_their_rewrites_replace_exactly_them(chunk) -> None:
    visible, rewritten = chunk
    groups = groups_of(visible, rewritten)
    must = {s.id for s in rewritten}
    members = [s.id for group in groups for s in group]
    assert len(members) == len(set(members))
    assert must <= set(members)
    for group in groups:
        assert any(s.id in must for s in group)
        assert len({(s.interval, s.version) for s in group}) == 1
        for left, right in itertools.pairwise(group):
            assert left.root_range[1] == right.root_range[0]
        if len(group) > 1:
            assert sum(s.row_count for s in group) <= TARGET_ROWS
            assert sum(s.size_bytes for s in group) <= TARGET_BYTES
            for s in group:
                assert s.row_count > 0 and s.size_bytes > 0
                if s.id not in must:
                    assert s.server == "s" and s.row_count * SMALL_SHARE <= TARGET_ROWS

    # Publish the rewrites as the updater does (add the outputs, withdraw the inputs).
    timeline = Timeline("t")
    timeline.add_all(visible)
    before = {root for s in timeline.visible_segments() for root in range(*s.root_range)}
    outputs = []
    for number, group in enumerate(groups):
        outputs.append(
            Segment(
                table="t",
                interval=group[0].interval,
                version=group[0].version,
                partition=40_000 + number,
                root_start=group[0].root_range[0],
                root_end=group[-1].root_range[1],
                minor_version=max(s.minor_version for s in group) + 1,
                row_count=1,
                size_bytes=1,
            )
        )
    timeline.add_all(outputs)
    for group in groups:
        for s in group:
            timeline.remove(s)
    after = list(timeline.visible_segments())
    untouched = {s.id for s in visible} - set(members)
    assert {s.id for s in after} == untouched | {s.id for s in outputs}
    covered = [root for s in after for root in range(*s.root_range)]
    assert sorted(covered) == sorted(before)


@settings(max_examples=200, deadline=None)
@given(chunks())
def test_groups_are_packed_greedily(chunk) -> None:
    """Two adjacent groups could not have been one: the second's first segment did not fit."""
    visible, rewritten = chunk
    groups = groups_of(visible, rewritten)
    for left, right in itertools.pairwise(groups):
        if left[-1].root_range[1] != right[0].root_range[0]:
            continue
        nxt = right[0]
        if not all(s.row_count > 0 for s in (*left, nxt)):
            continue
        assert (
            sum(s.row_count for s in left) + nxt.row_count > TARGET_ROWS
            or sum(s.size_bytes for s in left) + nxt.size_bytes > TARGET_BYTES
        )
