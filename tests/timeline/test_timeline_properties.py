"""The incremental timeline equals a from-scratch reference after every step of random histories."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from horizon_broker.timeline import Interval, Segment, SegmentConflict, Timeline
from tests.timeline.reference_model import ReferenceTimeline

TABLE = "t"
INTERVALS = [Interval(0, 10), Interval(10, 20), Interval(5, 15), Interval(0, 20), Interval(15, 30)]
VERSIONS = ["1", "2", "3", "11"]
WHOLE = Interval(-5, 40)

# Overwrite groups: (root_start, root_end, minor, size); ranges nest like segment locking's.
OVERWRITE_GROUPS = [
    (0, 1, 1, 1),
    (1, 2, 1, -1),
    (0, 2, 1, 2),
    (0, 2, 2, 1),
    (2, 3, 1, 2),
    (0, 3, 2, 2),
    (0, 3, 3, 1),
]


def _core(interval: Interval, version: str) -> int:
    return (interval.start_ms + int(version)) % 4  # 0..3: core 0 included


def _universe() -> list[Segment]:
    universe = []
    for interval in INTERVALS:
        for version in VERSIONS:
            core = _core(interval, version)
            for partition in range(4):  # 3 is appended when core < 4
                universe.append(
                    Segment(
                        table=TABLE,
                        interval=interval,
                        version=version,
                        partition=partition,
                        core_partitions=core,
                    )
                )
            next_partition = 32_768
            for root_start, root_end, minor, size in OVERWRITE_GROUPS:
                for _ in range(abs(size) if size > 0 else 2):
                    universe.append(
                        Segment(
                            table=TABLE,
                            interval=interval,
                            version=version,
                            partition=next_partition,
                            core_partitions=core,
                            root_start=root_start,
                            root_end=root_end,
                            minor_version=minor,
                            atomic_update_group_size=size,
                        )
                    )
                    next_partition += 1
            # a conflicting twin: same id as partition 0, other core count
            universe.append(
                Segment(
                    table=TABLE,
                    interval=interval,
                    version=version,
                    partition=0,
                    core_partitions=core + 1,
                )
            )
    return universe


UNIVERSE = _universe()
# Concentrate on two versions of two overlapping intervals most of the time: richer interplay.
FOCUS = [
    index
    for index, segment in enumerate(UNIVERSE)
    if segment.interval in (INTERVALS[0], INTERVALS[2]) and segment.version in ("1", "2")
]

NARROW = [i for i in FOCUS if UNIVERSE[i].interval == INTERVALS[0]]
slots = st.one_of(
    st.sampled_from(NARROW),
    st.sampled_from(NARROW),
    st.sampled_from(FOCUS),
    st.integers(0, len(UNIVERSE) - 1),
)
operations = st.one_of(
    st.tuples(st.just("add"), slots),
    st.tuples(st.just("add"), slots),
    st.tuples(st.just("remove"), slots),
    st.tuples(st.just("unreadable"), slots),
    st.tuples(st.just("batch"), st.lists(slots, min_size=1, max_size=6)),
    st.tuples(st.just("remove_batch"), st.lists(slots, min_size=1, max_size=6)),
)


def _lookup_view(entries) -> list[tuple]:
    return [
        (e.interval, e.true_interval, e.version, tuple(s.id for s in e.segments)) for e in entries
    ]


def _assert_same(timeline: Timeline, reference: ReferenceTimeline) -> None:
    assert _lookup_view(timeline.lookup(WHOLE)) == reference.lookup(WHOLE, complete_only=True)
    assert _lookup_view(timeline.lookup_with_incomplete(WHOLE)) == reference.lookup(
        WHOLE, complete_only=False
    )
    probe = Interval(7, 16)
    assert _lookup_view(timeline.lookup(probe)) == reference.lookup(probe, complete_only=True)
    assert len(timeline) == len(reference.stored)
    assert {s.id for s in timeline.segments()} == set(reference.stored)
    for segment in reference.stored.values():
        assert timeline.get(segment.id) is segment
        assert timeline.state(segment) == reference.state(segment), segment.id
        assert timeline.is_overshadowed(segment) == reference.is_overshadowed(segment), segment.id
    found = {
        (chunk.interval, chunk.version, frozenset(s.id for s in chunk.segments))
        for chunk in timeline.find_fully_overshadowed()
    }
    assert found == reference.fully_overshadowed()
    snapshot = timeline.snapshot()
    chunks = reference.chunks()
    assert {(c.true_interval, c.version) for c in snapshot.chunks} == set(chunks)
    for chunk in snapshot.chunks:
        assert chunk.complete == reference.complete(chunks[(chunk.true_interval, chunk.version)])


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(operations, min_size=5, max_size=60))
def test_incremental_timeline_matches_from_scratch_reference_after_every_step(steps) -> None:
    timeline = Timeline(TABLE)
    reference = ReferenceTimeline(TABLE)
    for kind, argument in steps:
        before = timeline.generation
        if kind in ("add", "batch"):
            batch = [UNIVERSE[argument]] if kind == "add" else [UNIVERSE[i] for i in argument]
            changed = _add_step(timeline, reference, batch)
        elif kind == "remove_batch":
            changed = _remove_batch_step(timeline, reference, [UNIVERSE[i] for i in argument])
        else:
            changed = _remove_one_step(timeline, reference, kind, UNIVERSE[argument])
        assert timeline.generation == before + (1 if changed else 0)
        _assert_same(timeline, reference)


def _add_step(timeline: Timeline, reference: ReferenceTimeline, batch: list[Segment]) -> bool:
    """Add a batch to both; the timeline refuses exactly what the reference refuses. Whether
    anything changed."""
    try:
        expected = reference.add_all(batch)
    except SegmentConflict as expected_error:
        try:
            timeline.add_all(batch)
        except SegmentConflict:
            return False
        raise AssertionError(f"timeline accepted {batch}: {expected_error}") from None
    assert timeline.add_all(batch) == expected
    return expected > 0


def _remove_batch_step(
    timeline: Timeline, reference: ReferenceTimeline, batch: list[Segment]
) -> bool:
    """Remove a batch from both (a different-shard twin in it fails the whole batch)."""
    if any(
        reference.stored.get(s.id) is not None and not reference.stored[s.id].same_shard(s)
        for s in batch
    ):
        with pytest.raises(SegmentConflict):
            timeline.remove_all(batch)
        return False
    expected = sum(reference.remove_id(i) for i in dict.fromkeys(s.id for s in batch))
    assert timeline.remove_all(batch) == expected
    return expected > 0


def _remove_one_step(
    timeline: Timeline, reference: ReferenceTimeline, kind: str, segment: Segment
) -> bool:
    """Remove one segment (or mark it unreadable) in both."""
    stored = reference.stored.get(segment.id)
    if kind == "remove" and stored is not None and not stored.same_shard(segment):
        with pytest.raises(SegmentConflict):
            timeline.remove(segment)
        return False
    call = timeline.remove if kind == "remove" else timeline.remove_unreadable
    removed = call(segment)
    assert removed == reference.remove_id(segment.id)
    return removed


ONE_CHUNK = [
    index
    for index, segment in enumerate(UNIVERSE)
    if segment.interval == INTERVALS[0] and segment.version == "2" and index not in (0,)
]
ONE_CHUNK = [
    i for i in ONE_CHUNK if UNIVERSE[i].core_partitions == UNIVERSE[ONE_CHUNK[0]].core_partitions
]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(ONE_CHUNK), min_size=1, max_size=25), st.randoms())
def test_group_states_of_one_chunk_follow_the_rules_and_ignore_arrival_order(picks, rnd) -> None:
    chosen = list(dict.fromkeys(picks))
    timeline = Timeline(TABLE)
    reference = ReferenceTimeline(TABLE)
    for index in chosen:
        timeline.add(UNIVERSE[index])
        reference.add_all([UNIVERSE[index]])
        _assert_same(timeline, reference)
    shuffled = chosen[:]
    rnd.shuffle(shuffled)
    other = Timeline(TABLE)
    other.add_all(UNIVERSE[index] for index in shuffled)
    for index in chosen:
        assert other.state(UNIVERSE[index]) == timeline.state(UNIVERSE[index])
    # within a group, segments keep their arrival order; which segments are visible does not vary
    assert [(e.interval, sorted(s.id for s in e.segments)) for e in other.lookup(WHOLE)] == [
        (e.interval, sorted(s.id for s in e.segments)) for e in timeline.lookup(WHOLE)
    ]
    for index in reversed(shuffled):
        timeline.remove(UNIVERSE[index])
        reference.remove_id(UNIVERSE[index].id)
        _assert_same(timeline, reference)
