"""Unit tests: the rules of timeline.md and timeline-druid-rules.md, one behaviour per test."""

from __future__ import annotations

import pytest

from horizon_broker.timeline import (
    Interval,
    InvalidArgument,
    Segment,
    SegmentConflict,
    Timeline,
    TimelineSnapshot,
    WrongTable,
)

T = "t"


def iv(text: str) -> Interval:
    """Day-of-month shorthand: "01/10" is [2011-01-01, 2011-01-10)."""
    start, end = text.split("/")
    return Interval.parse(f"2011-01-{start}/2011-01-{end}")


def seg(interval: str, version: str, partition: int = 0, core: int = 0) -> Segment:
    return Segment(
        table=T, interval=iv(interval), version=version, partition=partition, core_partitions=core
    )


def ow(
    interval: str,
    version: str,
    partition: int,
    roots: tuple[int, int],
    minor: int,
    size: int,
    core: int = 0,
) -> Segment:
    return Segment(
        table=T,
        interval=iv(interval),
        version=version,
        partition=partition,
        core_partitions=core,
        root_start=roots[0],
        root_end=roots[1],
        minor_version=minor,
        atomic_update_group_size=size,
    )


def shape(entries) -> list[tuple[str, str]]:
    """(clipped interval as 'dd/dd', version) per entry."""
    return [
        (
            f"{e.interval.start_ms // 86_400_000 - 14974:02d}/{e.interval.end_ms // 86_400_000 - 14974:02d}",
            e.version,
        )
        for e in entries
    ]


def parts(entries) -> list[list[int]]:
    return [[s.partition for s in e.segments] for e in entries]


WHOLE = iv("01/31")


def timeline(*segments: Segment) -> Timeline:
    tl = Timeline(T)
    for segment in segments:
        tl.add(segment)
    return tl


# -- lookup shape --------------------------------------------------------------------------------


def test_higher_version_punches_a_hole_whatever_the_add_order() -> None:
    a, b, c = seg("01/10", "1"), seg("10/20", "1"), seg("05/15", "2")
    expected = [("01/05", "1"), ("05/15", "2"), ("15/20", "1")]
    assert shape(timeline(a, b, c).lookup(WHOLE)) == expected
    assert shape(timeline(c, b, a).lookup(WHOLE)) == expected


def test_lower_version_added_later_fills_only_the_gaps() -> None:
    tl = timeline(seg("01/15", "2"), seg("01/20", "1"))
    assert shape(tl.lookup(WHOLE)) == [("01/15", "2"), ("15/20", "1")]


def test_lookup_clips_only_the_first_and_last_entries() -> None:
    tl = timeline(seg("01/05", "1"), seg("05/10", "1"), seg("10/20", "1"))
    entries = tl.lookup(iv("03/12"))
    assert shape(entries) == [("03/05", "1"), ("05/10", "1"), ("10/12", "1")]
    assert [e.true_interval for e in entries] == [iv("01/05"), iv("05/10"), iv("10/20")]


def test_single_entry_is_clipped_on_both_sides() -> None:
    assert shape(timeline(seg("01/20", "1")).lookup(iv("05/06"))) == [("05/06", "1")]


def test_zero_length_lookup_returns_nothing() -> None:
    tl = timeline(seg("01/20", "1"))
    assert tl.lookup(Interval(iv("05/06").start_ms, iv("05/06").start_ms)) == []
    assert tl.lookup_with_incomplete(Interval(iv("01/02").start_ms, iv("01/02").start_ms)) == []


def test_holes_are_not_filled() -> None:
    tl = timeline(seg("01/05", "1"), seg("10/15", "1"))
    assert shape(tl.lookup(WHOLE)) == [("01/05", "1"), ("10/15", "1")]


def test_versions_compare_as_plain_strings() -> None:
    tl = timeline(seg("01/02", "1"), seg("01/02", "11"), seg("01/02", "2"), seg("01/02", "9"))
    assert shape(tl.lookup(WHOLE)) == [("01/02", "9")]
    tl.remove(seg("01/02", "9"))
    assert shape(tl.lookup(WHOLE)) == [("01/02", "2")]
    tl.remove(seg("01/02", "2"))
    assert shape(tl.lookup(WHOLE)) == [("01/02", "11")]


def test_pieces_of_one_chunk_merge_back_after_the_higher_version_goes() -> None:
    tl = timeline(seg("01/20", "1"), seg("05/10", "2"))
    assert len(tl.lookup(WHOLE)) == 3
    tl.remove(seg("05/10", "2"))
    assert shape(tl.lookup(WHOLE)) == [("01/20", "1")]


def test_visible_segments_are_in_partition_order_and_each_once() -> None:
    tl = timeline(seg("01/20", "1", 1), seg("01/20", "1", 0), seg("05/10", "2"))
    assert [(s.version, s.partition) for s in tl.visible_segments()] == [
        ("1", 0),
        ("1", 1),
        ("2", 0),
    ]
    assert [s.version for s in tl.visible_segments(iv("06/07"))] == ["2"]


# -- completeness --------------------------------------------------------------------------------


def test_chunk_is_complete_only_with_all_core_partitions_in_any_order() -> None:
    tl = timeline(seg("01/02", "1", 2, core=3), seg("01/02", "1", 0, core=3))
    assert tl.lookup(WHOLE) == []
    assert shape(tl.lookup_with_incomplete(WHOLE)) == [("01/02", "1")]
    tl.add(seg("01/02", "1", 1, core=3))
    assert parts(tl.lookup(WHOLE)) == [[0, 1, 2]]


def test_appended_partitions_beyond_core_do_not_matter_even_with_gaps() -> None:
    tl = timeline(seg("01/02", "1", 0, core=2), seg("01/02", "1", 1, core=2))
    tl.add(seg("01/02", "1", 5, core=2))
    assert parts(tl.lookup(WHOLE)) == [[0, 1, 5]]


def test_core_zero_chunk_is_complete_as_soon_as_it_has_a_segment() -> None:
    tl = timeline(seg("01/02", "1", 7, core=0))
    assert parts(tl.lookup(WHOLE)) == [[7]]


def test_incomplete_newer_version_hides_complete_older_only_in_lookup_with_incomplete() -> None:
    tl = timeline(seg("01/10", "1", 0, core=1), seg("01/10", "2", 0, core=2))
    assert shape(tl.lookup(WHOLE)) == [("01/10", "1")]
    assert shape(tl.lookup_with_incomplete(WHOLE)) == [("01/10", "2")]


# -- remove and fallback across versions ---------------------------------------------------------


def test_removing_one_core_partition_makes_chunk_fall_back_to_lower_complete_version() -> None:
    tl = timeline(
        seg("01/10", "1"),
        seg("03/06", "2", 0, core=2),
        seg("03/06", "2", 1, core=2),
    )
    assert shape(tl.lookup(WHOLE)) == [("01/03", "1"), ("03/06", "2"), ("06/10", "1")]
    assert tl.remove(seg("03/06", "2", 1, core=2))
    assert shape(tl.lookup(WHOLE)) == [("01/10", "1")]
    assert shape(tl.lookup_with_incomplete(WHOLE)) == [
        ("01/03", "1"),
        ("03/06", "2"),
        ("06/10", "1"),
    ]


def test_removing_the_last_segment_drops_the_chunk_and_lower_versions_reappear() -> None:
    tl = timeline(seg("01/10", "1"), seg("01/10", "2"))
    tl.remove(seg("01/10", "2"))
    assert shape(tl.lookup(WHOLE)) == [("01/10", "1")]
    tl.remove(seg("01/10", "1"))
    assert tl.lookup(WHOLE) == [] and tl.is_empty and len(tl) == 0


def test_removing_an_unknown_segment_returns_false_and_changes_nothing() -> None:
    tl = timeline(seg("01/10", "1"))
    generation = tl.generation
    assert not tl.remove(seg("01/05", "1"))  # a contained interval is not enough
    assert not tl.remove(seg("01/10", "1", 3))
    assert tl.generation == generation


def test_re_adding_after_a_remove_works() -> None:
    tl = timeline(seg("01/10", "1"))
    tl.remove(seg("01/10", "1"))
    assert tl.add(seg("01/10", "1"))
    assert shape(tl.lookup(WHOLE)) == [("01/10", "1")]


# -- overshadow checks ---------------------------------------------------------------------------


def test_segment_covered_by_complete_higher_version_is_overshadowed() -> None:
    old = seg("01/02", "1")
    tl = timeline(old, seg("01/02", "2"))
    assert tl.is_overshadowed(old)
    assert not tl.is_overshadowed(seg("01/02", "2"))


def test_segment_partly_covered_or_covered_by_incomplete_version_is_not_overshadowed() -> None:
    old = seg("01/10", "1")
    assert not timeline(old, seg("01/05", "2")).is_overshadowed(old)
    assert not timeline(old, seg("01/10", "2", 0, core=2)).is_overshadowed(old)


def test_segment_overshadowed_by_two_adjacent_higher_chunks() -> None:
    old = seg("01/10", "1")
    assert timeline(old, seg("01/05", "2"), seg("05/10", "3")).is_overshadowed(old)


def test_same_version_overwrite_group_overshadows_its_roots() -> None:
    root = seg("01/02", "1", 0, core=1)
    tl = timeline(root, ow("01/02", "1", 32768, (0, 1), 1, 1, core=1))
    assert tl.is_overshadowed(root)
    assert tl.state(root) == "overshadowed"


def test_find_fully_overshadowed_reports_hidden_chunks_only() -> None:
    tl = timeline(seg("01/10", "1"), seg("01/10", "2"), seg("01/05", "3"))
    found = {(c.interval, c.version) for c in tl.find_fully_overshadowed()}
    assert found == {(iv("01/10"), "1")}


def test_incomplete_newer_version_does_not_overshadow() -> None:
    tl = timeline(seg("01/10", "1"), seg("01/10", "2", 0, core=2))
    assert tl.find_fully_overshadowed() == []


def test_complete_older_hidden_by_incomplete_newer_is_not_overshadowed() -> None:
    tl = timeline(seg("01/10", "1"), seg("01/10", "2"), seg("01/10", "3", 0, core=2))
    assert {(c.version) for c in tl.find_fully_overshadowed()} == {"1"}


def test_find_fully_overshadowed_reports_overshadowed_groups_of_visible_chunks() -> None:
    root = seg("01/02", "1", 0, core=1)
    tl = timeline(root, ow("01/02", "1", 32768, (0, 1), 1, 1, core=1))
    [found] = tl.find_fully_overshadowed()
    assert found.segments == (root,)


# -- groups inside a time chunk ------------------------------------------------------------------


def test_incomplete_overwrite_group_waits_in_standby_while_roots_cover_it() -> None:
    roots = [seg("01/02", "1", p, core=2) for p in range(2)]
    first = ow("01/02", "1", 32768, (0, 2), 1, 2, core=2)
    tl = timeline(*roots, first)
    assert tl.state(first) == "standby"
    assert parts(tl.lookup(WHOLE)) == [[0, 1]]
    second = ow("01/02", "1", 32769, (0, 2), 1, 2, core=2)
    tl.add(second)
    assert [tl.state(s) for s in (*roots, first, second)] == [
        "overshadowed",
        "overshadowed",
        "visible",
        "visible",
    ]
    assert parts(tl.lookup(WHOLE)) == [[32768, 32769]]


def test_lone_incomplete_group_is_visible_but_chunk_incomplete() -> None:
    lone = ow("01/02", "1", 32768, (0, 2), 1, 2)
    tl = timeline(lone)
    assert tl.state(lone) == "visible"
    assert tl.lookup(WHOLE) == []
    assert parts(tl.lookup_with_incomplete(WHOLE)) == [[32768]]


def test_unknown_size_group_is_never_full() -> None:
    tl = timeline(ow("01/02", "1", 32768, (0, 1), 1, -1))
    assert tl.lookup(WHOLE) == []
    assert tl.snapshot().chunks[0].groups[0].full is False


def test_removing_a_visible_overwrite_falls_back_to_the_full_roots() -> None:
    roots = [seg("01/02", "1", p, core=2) for p in range(2)]
    overwrite = ow("01/02", "1", 32768, (0, 2), 1, 1, core=2)
    tl = timeline(*roots, overwrite)
    assert parts(tl.lookup(WHOLE)) == [[32768]]
    assert tl.remove(overwrite)
    assert parts(tl.lookup(WHOLE)) == [[0, 1]]
    assert [tl.state(r) for r in roots] == ["visible", "visible"]


def test_damaged_group_falls_back_to_standby_newer_group_when_nothing_full_remains() -> None:
    visible = [ow("01/02", "1", 32768 + i, (0, 2), 1, 2) for i in range(2)]
    waiting = ow("01/02", "1", 32770, (0, 2), 2, 2)
    tl = timeline(*visible, waiting)
    assert tl.state(waiting) == "standby"
    tl.remove(visible[0])
    assert tl.state(waiting) == "visible"
    assert tl.state(visible[1]) == "overshadowed"


def test_damaged_group_stays_visible_when_there_is_no_fallback() -> None:
    members = [ow("01/02", "1", 32768 + i, (0, 2), 1, 2) for i in range(2)]
    tl = timeline(*members)
    tl.remove(members[0])
    assert tl.state(members[1]) == "visible"
    assert tl.lookup(WHOLE) == []
    assert parts(tl.lookup_with_incomplete(WHOLE)) == [[32769]]


def test_empty_visible_group_falls_back_to_newest_older_group_even_incomplete() -> None:
    older = ow("01/02", "1", 32768, (0, 2), 1, 2)
    newest = ow("01/02", "1", 32770, (0, 2), 2, 1)
    tl = timeline(older, newest)
    assert tl.state(older) == "overshadowed"
    tl.remove(newest)
    assert tl.state(older) == "visible"


def test_completing_an_older_group_takes_over_from_an_incomplete_newer_one() -> None:
    newer = ow("01/02", "1", 32770, (0, 2), 2, 2)
    older = [ow("01/02", "1", 32768 + i, (0, 2), 1, 2) for i in range(2)]
    tl = timeline(newer, older[0])
    assert tl.state(newer) == "visible"
    tl.add(older[1])
    assert tl.state(newer) == "standby"
    assert [tl.state(o) for o in older] == ["visible", "visible"]


def test_visible_segments_of_a_group_keep_insertion_order() -> None:
    second = ow("01/02", "1", 32769, (0, 1), 1, 2)
    first = ow("01/02", "1", 32768, (0, 1), 1, 2)
    tl = timeline(second, first)
    assert parts(tl.lookup(WHOLE)) == [[32769, 32768]]


# -- Horizon's differences -----------------------------------------------------------------------


def test_q1_fallback_finds_nested_full_tiling_preferring_higher_minor() -> None:
    roots = [seg("01/02", "1", p, core=3) for p in range(3)]
    mid = ow("01/02", "1", 32768, (0, 2), 1, 1, core=3)
    top = [ow("01/02", "1", 32769 + i, (0, 3), 2, 2, core=3) for i in range(2)]
    tl = timeline(*roots, mid, *top)
    assert parts(tl.lookup(WHOLE)) == [[32769, 32770]]
    tl.remove(top[0])  # Druid keeps the damaged group visible here; Horizon falls back
    assert parts(tl.lookup(WHOLE)) == [[32768, 2]]
    assert tl.state(mid) == "visible" and tl.state(roots[2]) == "visible"
    assert tl.state(roots[0]) == "overshadowed"
    assert tl.state(top[1]) == "standby"


def test_q1_fallback_uses_roots_where_the_nested_group_is_gone() -> None:
    roots = [seg("01/02", "1", p, core=3) for p in range(3)]
    top = [ow("01/02", "1", 32769 + i, (0, 3), 2, 2, core=3) for i in range(2)]
    tl = timeline(*roots, *top)
    tl.remove_unreadable(top[1].id)
    assert parts(tl.lookup(WHOLE)) == [[0, 1, 2]]


def test_q2_same_version_overlap_is_rejected_even_on_an_exact_piece_match() -> None:
    tl = timeline(seg("01/20", "1"), seg("05/10", "2"))
    with pytest.raises(SegmentConflict):
        tl.add(seg("05/10", "1"))  # equals a visible piece of version 1
    with pytest.raises(SegmentConflict):
        tl.add(seg("15/25", "1"))
    assert shape(tl.lookup(WHOLE)) == [("01/05", "1"), ("05/10", "2"), ("10/20", "1")]


def test_q3_an_add_that_makes_a_chunk_incomplete_demotes_it_at_once() -> None:
    tl = timeline(
        seg("01/02", "0"),
        seg("01/02", "1", 0, core=3),
        seg("01/02", "1", 1, core=3),
        seg("01/02", "1", 2, core=3),
    )
    assert shape(tl.lookup(WHOLE)) == [("01/02", "1")]
    tl.remove(seg("01/02", "1", 2, core=3))
    tl.add(ow("01/02", "1", 32768, (0, 3), 1, 2, core=3))  # visible, not full
    assert shape(tl.lookup(WHOLE)) == [("01/02", "0")]
    assert parts(tl.lookup_with_incomplete(WHOLE)) == [[32768]]


def test_q4_chunk_without_visible_groups_falls_back_to_remaining_groups() -> None:
    left = ow("01/02", "1", 32768, (0, 2), 1, 1)
    right = ow("01/02", "1", 32769, (1, 3), 2, 1)
    top = ow("01/02", "1", 32770, (0, 3), 3, 1)
    tl = timeline(left, right, top)
    assert parts(tl.lookup(WHOLE)) == [[32770]]
    tl.remove(top)
    entries = tl.lookup_with_incomplete(WHOLE)
    assert len(entries) == 1 and entries[0].segments  # not dropped
    assert tl.state(right) == "visible"
    assert len(tl) == 2


def test_q5_completeness_is_by_coverage_whatever_the_order_of_numbered_and_overwrite() -> None:
    tl = timeline(
        seg("01/02", "1", 0, core=3),
        ow("01/02", "1", 32768, (1, 3), 1, 1, core=3),
        seg("01/02", "1", 1, core=3),
        seg("01/02", "1", 2, core=3),
    )
    assert parts(tl.lookup(WHOLE)) == [[0, 32768]]


def test_q5_not_complete_when_coverage_has_a_gap() -> None:
    tl = timeline(seg("01/02", "1", 0, core=4), ow("01/02", "1", 32768, (2, 4), 1, 1, core=4))
    assert tl.lookup(WHOLE) == []


def test_q8_duplicate_add_is_a_no_op_and_keeps_the_first_copy() -> None:
    first = seg("01/02", "1")
    copy = Segment(table=T, interval=iv("01/02"), version="1", partition=0, server="other")
    tl = timeline(first)
    generation = tl.generation
    assert tl.add(copy) is False
    assert tl.generation == generation and len(tl) == 1
    assert tl.get(first.id) is first
    assert tl.lookup(WHOLE)[0].segments[0] is first
    overwrite = ow("01/02", "1", 32768, (0, 1), 1, 2)
    tl.add(overwrite)
    assert tl.add(ow("01/02", "1", 32768, (0, 1), 1, 2)) is False
    assert len(tl) == 2


# -- errors --------------------------------------------------------------------------------------


def test_same_id_with_other_shard_fields_is_a_conflict() -> None:
    tl = timeline(seg("01/02", "1", 0, core=2))
    with pytest.raises(SegmentConflict):
        tl.add(seg("01/02", "1", 0, core=3))
    with pytest.raises(SegmentConflict):
        tl.remove(seg("01/02", "1", 0, core=3))


def test_group_size_mismatch_is_a_conflict() -> None:
    tl = timeline(ow("01/02", "1", 32768, (0, 2), 1, 2))
    with pytest.raises(SegmentConflict, match="has 3 segments"):
        tl.add(ow("01/02", "1", 32769, (0, 2), 1, 3))


def test_adding_to_a_full_group_is_a_conflict() -> None:
    tl = timeline(ow("01/02", "1", 32768, (0, 2), 1, 1))
    with pytest.raises(SegmentConflict, match="already full"):
        tl.add(ow("01/02", "1", 32769, (0, 2), 1, 1))


def test_segment_of_another_table_is_rejected() -> None:
    other = Segment(table="other", interval=iv("01/02"), version="1", partition=0)
    with pytest.raises(WrongTable):
        Timeline(T).add(other)


def test_conflict_errors_are_invalid_arguments() -> None:
    assert issubclass(SegmentConflict, InvalidArgument)
    assert issubclass(WrongTable, InvalidArgument)


def test_failed_batch_leaves_the_timeline_unchanged() -> None:
    tl = timeline(seg("01/10", "1"))
    before = tl.snapshot()
    batch = [seg("10/20", "1"), seg("01/10", "2"), seg("05/15", "1")]  # the last one conflicts
    with pytest.raises(SegmentConflict):
        tl.add_all(batch)
    assert tl.snapshot() == before
    assert tl.get(seg("10/20", "1").id) is None


def test_batch_counts_new_segments_and_bumps_generation_once() -> None:
    tl = Timeline(T)
    assert tl.add_all([seg("01/02", "1", p, core=3) for p in range(3)]) == 3
    assert tl.generation == 1
    assert tl.add_all([seg("01/02", "1", 0, core=3)]) == 0
    assert tl.generation == 1


def test_a_batch_removal_leaves_every_chunk_as_removals_one_by_one_do() -> None:
    segments = [
        *[seg("01/02", "1", p, core=3) for p in range(3)],
        *[seg("02/03", "1", p, core=2) for p in range(2)],
        seg("01/03", "2"),
        *[ow("01/02", "1", 32768 + p, (0, 3), 1, 2, core=3) for p in range(2)],
    ]
    gone = [segments[0], segments[4], segments[6], seg("05/06", "1")]  # the last is not stored
    one_by_one, batched = timeline(*segments), timeline(*segments)
    for segment in gone:
        one_by_one.remove(segment)
    generation = batched.generation
    assert batched.remove_all(gone) == 3
    assert batched.generation == generation + 1
    assert batched.snapshot().chunks == one_by_one.snapshot().chunks
    assert batched.lookup(iv("01/03")) == one_by_one.lookup(iv("01/03"))
    assert len(batched) == len(one_by_one) == len(segments) - 3
    assert batched.remove_all(gone) == 0 and batched.generation == generation + 1


def test_a_batch_removal_naming_a_twin_with_other_shard_fields_removes_nothing() -> None:
    tl = timeline(seg("01/02", "1", 0, core=2), seg("01/02", "1", 1, core=2))
    before = tl.snapshot()
    with pytest.raises(SegmentConflict):
        tl.remove_all([seg("01/02", "1", 1, core=2), seg("01/02", "1", 0, core=3)])
    assert tl.snapshot() == before


def test_generation_bumps_on_every_change_and_not_on_no_ops() -> None:
    tl = Timeline(T)
    tl.add(seg("01/02", "1"))
    tl.add(seg("01/02", "1"))
    tl.remove(seg("01/03", "1"))
    assert tl.generation == 1
    tl.remove(seg("01/02", "1"))
    assert tl.generation == 2


# -- remove_unreadable, snapshot, accessors ------------------------------------------------------


def test_unreadable_overwrite_segment_falls_back_to_the_segments_it_overwrote() -> None:
    roots = [seg("01/02", "1", p, core=2) for p in range(2)]
    rewritten = ow("01/02", "1", 32768, (0, 2), 1, 1, core=2)
    tl = timeline(*roots, rewritten)
    assert tl.remove_unreadable(rewritten.id)
    assert parts(tl.lookup(WHOLE)) == [[0, 1]]
    assert not tl.remove_unreadable(rewritten)


def test_unreadable_segment_without_fallback_leaves_a_lower_version_or_nothing() -> None:
    tl = timeline(seg("01/02", "1"), seg("01/02", "2", 0, core=1))
    tl.remove_unreadable(seg("01/02", "2", 0, core=1))
    assert shape(tl.lookup(WHOLE)) == [("01/02", "1")]


def test_snapshot_shows_chunks_groups_states_and_where_each_view_shows_them() -> None:
    roots = [seg("01/02", "1", p, core=2) for p in range(2)]
    half = ow("01/02", "1", 32768, (0, 2), 1, 2, core=2)
    tl = timeline(*roots, half, seg("01/02", "0"))
    snapshot = tl.snapshot()
    assert isinstance(snapshot, TimelineSnapshot)
    assert snapshot.segment_count == 4 and snapshot.generation == tl.generation
    old, current = snapshot.chunks
    assert (old.version, old.visible_in_lookup, old.lookup_pieces) == ("0", False, ())
    assert current.complete and current.lookup_pieces == (iv("01/02"),)
    assert current.lookup_with_incomplete_pieces == (iv("01/02"),)
    assert [
        (g.root_start, g.root_end, g.minor_version, g.state, g.full) for g in current.groups
    ] == [
        (0, 1, 0, "visible", True),
        (0, 2, 1, "standby", False),
        (1, 2, 0, "visible", True),
    ]
    assert current.groups[1].segments == (half,)
    assert snapshot.to_dict()["chunks"][1]["groups"][1]["state"] == "standby"


def test_state_is_none_for_a_segment_not_stored() -> None:
    assert timeline(seg("01/02", "1")).state(seg("01/02", "1", 1)) is None


def test_segments_get_and_len_cover_overshadowed_ones() -> None:
    a, b = seg("01/02", "1"), seg("01/02", "2")
    tl = timeline(a, b)
    assert set(tl.segments()) == {a, b} and len(tl) == 2
    assert tl.get(a.id) is a and tl.get(seg("01/03", "1").id) is None
    assert tl.table == T and not tl.is_empty
