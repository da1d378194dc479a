"""The per-version verdicts of ExplainKey, against the visibility rule (pure: no Spark, no Redis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from horizon_broker.broker.explain_key.verdicts import (
    Holder,
    ReadPoint,
    SegmentPlace,
    StoredVersion,
    explain_versions,
    visible_by_rule,
)

READ = SegmentPlace("s-read", "read", "group root [0, 1) minor 0")


def _only(versions, places, point):
    return {
        (v.version.valid_from, v.version.segment): v
        for v in explain_versions(versions, places, point)
    }


def test_the_open_version_is_visible_and_the_one_it_replaced_is_superseded_by_it():
    old = StoredVersion(10, 20, "s-read", "f")
    new = StoredVersion(20, None, "s-read", "f")
    verdicts = _only([old, new], {"s-read": READ}, ReadPoint(snapshot=30, lwm=30))
    assert verdicts[(20, "s-read")].reason == "visible"
    assert verdicts[(10, "s-read")].reason == "superseded"
    assert verdicts[(10, "s-read")].superseded_by == new


def test_a_version_closed_with_no_successor_was_deleted():
    gone = StoredVersion(10, 20, "s-read", "f")
    [verdict] = explain_versions([gone], {"s-read": READ}, ReadPoint(snapshot=25, lwm=25))
    assert verdict.reason == "deleted"
    assert verdict.superseded_by is None


def test_above_the_lwm_names_the_partition_and_server_holding_it_back():
    late = StoredVersion(50, None, "s-read", "f")
    point = ReadPoint(snapshot=40, lwm=40, holder=Holder("s2", 1, 40))
    [verdict] = explain_versions([late], {"s-read": READ}, point)
    assert verdict.reason == "above_lwm"
    assert "partition 1 on server s2" in verdict.detail


def test_below_the_lwm_but_after_the_snapshot_is_written_after_the_snapshot():
    later = StoredVersion(35, None, "s-read", "f")
    [verdict] = explain_versions([later], {"s-read": READ}, ReadPoint(snapshot=30, lwm=40))
    assert verdict.reason == "written_after_snapshot"


def test_closed_at_or_below_the_retention_horizon_is_dropped_by_retention():
    old = StoredVersion(10, 20, "s-read", "f")
    new = StoredVersion(20, None, "s-read", "f")
    point = ReadPoint(snapshot=30, lwm=30, retention_horizon=25)
    verdicts = _only([old, new], {"s-read": READ}, point)
    assert verdicts[(10, "s-read")].reason == "dropped_by_retention"
    assert verdicts[(10, "s-read")].superseded_by == new  # still named


def test_unread_segments_give_their_own_reason_before_any_time_rule():
    places = {
        "s-over": SegmentPlace("s-over", "overshadowed", why="replaced"),
        "s-wait": SegmentPlace("s-wait", "standby", why="not complete"),
        "s-lost": SegmentPlace("s-lost", "unreadable", why="file missing"),
        "s-in": SegmentPlace("s-in", "overshadowed", compacted_into=("s-out",)),
        "s-out": READ.__class__("s-out", "read"),
    }
    versions = [StoredVersion(10, None, name, "f") for name in places]
    reasons = {
        v.version.segment: v.reason for v in explain_versions(versions, places, ReadPoint(20, 20))
    }
    assert reasons == {
        "s-over": "overshadowed",
        "s-wait": "standby",
        "s-lost": "unreadable_segment",
        "s-in": "compacted",
        "s-out": "visible",
    }


def test_a_version_a_compaction_left_out_below_the_horizon_was_dropped_by_retention():
    places = {
        "s-in": SegmentPlace("s-in", "overshadowed", compacted_into=("s-out",)),
        "s-out": SegmentPlace("s-out", "read"),
    }
    versions = [
        StoredVersion(10, 20, "s-in", "f"),
        StoredVersion(20, None, "s-in", "f"),
        StoredVersion(20, None, "s-out", "g"),
    ]
    point = ReadPoint(snapshot=30, lwm=30, retention_horizon=25)
    verdicts = _only(versions, places, point)
    assert verdicts[(10, "s-in")].reason == "dropped_by_retention"
    assert "compacted into s-out" in verdicts[(10, "s-in")].detail
    assert verdicts[(20, "s-in")].reason == "compacted"
    assert verdicts[(20, "s-out")].reason == "visible"


SEGMENTS = ("a", "b", "c")
STATES = ("read", "overshadowed", "standby", "unreadable")


@st.composite
def histories(draw):
    """A key's chain of versions (each closed by the next, or by a delete), copies of each in
    random segments, random segment states and lineage, and a snapshot a query may read."""
    times = sorted(draw(st.sets(st.integers(1, 60), min_size=1, max_size=6)))
    versions = []
    for index, start in enumerate(times):
        if index + 1 < len(times):
            end = draw(
                st.sampled_from(
                    [times[index + 1], start + (times[index + 1] - start) // 2 or start]
                )
            )
        else:
            end = draw(st.one_of(st.none(), st.integers(start, start + 10)))
        for segment in draw(st.sets(st.sampled_from(SEGMENTS), min_size=1)):
            versions.append(StoredVersion(start, end, segment, f"{segment}.parquet"))
    places = {}
    for segment in SEGMENTS:
        state = draw(st.sampled_from(STATES))
        into = tuple(
            draw(st.sets(st.sampled_from([s for s in SEGMENTS if s != segment]), max_size=1))
        )
        places[segment] = SegmentPlace(
            segment, state, compacted_into=into if state == "overshadowed" else ()
        )
    lwm = draw(st.integers(0, 80))
    horizon = draw(st.integers(0, lwm))
    snapshot = draw(st.integers(horizon, lwm))
    return versions, places, ReadPoint(snapshot, lwm, horizon, Holder("s1", 0, lwm))


@settings(max_examples=400, deadline=None)
@given(histories())
def test_visible_exactly_when_the_visibility_rule_reads_it_and_every_other_reason_holds(history):
    versions, places, point = history
    verdicts = explain_versions(versions, places, point)
    order = lambda v: (v.valid_from, v.valid_until or -1, v.segment)  # noqa: E731
    assert sorted((v.version for v in verdicts), key=order) == sorted(versions, key=order)
    for verdict in verdicts:
        version, place = verdict.version, verdict.place
        assert (verdict.reason == "visible") == visible_by_rule(version, place, point.snapshot)
        until = version.valid_until
        if verdict.reason in ("overshadowed", "standby", "unreadable_segment", "compacted"):
            assert place.state != "read"
            assert verdict.reason != "compacted" or place.compacted_into
            if verdict.reason in ("overshadowed", "standby", "unreadable_segment"):
                assert place.state == verdict.reason.removesuffix("_segment")
        elif verdict.reason == "dropped_by_retention":
            assert until is not None
            assert until <= point.retention_horizon or (
                place.state != "read" and until == version.valid_from
            )
        else:
            assert place.state == "read"
        if verdict.reason == "above_lwm":
            assert version.valid_from > point.lwm
        if verdict.reason == "written_after_snapshot":
            assert point.snapshot < version.valid_from <= point.lwm
        if verdict.reason in ("superseded", "deleted"):
            assert until is not None and until <= point.snapshot
            assert until > point.retention_horizon or point.retention_horizon == 0
        if verdict.reason == "superseded" and until != version.valid_from:
            assert verdict.superseded_by is not None
            assert verdict.superseded_by.valid_from == until
        if verdict.reason == "deleted":
            assert not any(v.valid_from == until for v in versions)


def test_a_copy_whose_compaction_output_was_rewritten_names_the_segment_holding_it_now():
    places = {
        "s-in": SegmentPlace("s-in", "overshadowed", compacted_into=("s-out",)),
        "s-out": SegmentPlace("s-out", "overshadowed"),
        "s-rewrite": SegmentPlace("s-rewrite", "read"),
    }
    versions = [
        StoredVersion(10, None, "s-in", "f"),
        StoredVersion(10, 40, "s-rewrite", "h"),
    ]
    verdicts = _only(versions, places, ReadPoint(snapshot=50, lwm=50))
    detail = verdicts[(10, "s-in")].detail
    assert verdicts[(10, "s-in")].reason == "compacted"
    assert "one is in s-rewrite" in detail
    assert "visible at no snapshot" not in detail


def test_a_copy_found_nowhere_after_its_compaction_says_so_without_blaming_the_compaction():
    places = {"s-in": SegmentPlace("s-in", "overshadowed", compacted_into=("s-out",))}
    verdicts = _only([StoredVersion(10, None, "s-in", "f")], places, ReadPoint(50, 50))
    detail = verdicts[(10, "s-in")].detail
    assert "no copy of this version is in s-out or any other segment" in detail
