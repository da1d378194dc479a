"""The pure lock rules (Druid's task locking, ``001_*.txt``)."""

from __future__ import annotations

import pytest

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.locks.rules import (
    Granularity,
    HeldLock,
    LockRequest,
    Mode,
    conflicts,
    covers,
    decide,
)
from horizon_broker.timeline.interval import Interval

DAY = Interval(0, 86_400_000)
NEXT_DAY = Interval(86_400_000, 2 * 86_400_000)


def chunk_lock(job: str, priority: int = 25, interval: Interval = DAY, mode=Mode.EXCLUSIVE):
    return LockRequest("t", job, Granularity.TIME_CHUNK, interval, priority, mode)


def segment_lock(job: str, partitions, priority: int = 25, mode=Mode.EXCLUSIVE, version="v1"):
    return LockRequest(
        "t", job, Granularity.SEGMENT, DAY, priority, mode, version, frozenset(partitions)
    )


def held(request: LockRequest, expires_ms: int = 1_000, **extra) -> HeldLock:
    return HeldLock(f"{request.job}#1", request, acquired_ms=0, expires_ms=expires_ms, **extra)


def test_segment_locks_on_different_partitions_of_one_chunk_do_not_conflict():
    assert not conflicts(segment_lock("compact", [0, 1, 2]), segment_lock("ingest", [3]))
    assert conflicts(segment_lock("compact", [0, 1, 2]), segment_lock("update", [2]))


def test_a_segment_lock_and_a_time_chunk_lock_on_overlapping_intervals_always_conflict():
    assert conflicts(segment_lock("a", [0], mode=Mode.SHARED), chunk_lock("b", mode=Mode.SHARED))
    assert not conflicts(segment_lock("a", [0]), chunk_lock("b", interval=NEXT_DAY))


def test_shared_locks_of_one_kind_coexist_and_exclusive_ones_do_not():
    assert not conflicts(chunk_lock("a", mode=Mode.SHARED), chunk_lock("b", mode=Mode.SHARED))
    assert conflicts(chunk_lock("a", mode=Mode.SHARED), chunk_lock("b"))
    assert not conflicts(
        segment_lock("a", [1], mode=Mode.SHARED), segment_lock("b", [1], mode=Mode.SHARED)
    )


def test_one_job_never_conflicts_with_itself_and_other_versions_are_other_segments():
    assert not conflicts(chunk_lock("a"), chunk_lock("a"))
    assert not conflicts(segment_lock("a", [0]), segment_lock("b", [0], version="v2"))


def test_a_higher_priority_request_revokes_every_lower_priority_conflicting_lock():
    low = held(segment_lock("compact", [0, 1], priority=25))
    other = held(segment_lock("compact2", [7], priority=25))
    decision = decide(chunk_lock("major", priority=50), [low, other], now_ms=10)
    assert decision.granted and {lock.request.job for lock in decision.revoke} == {
        "compact",
        "compact2",
    }


def test_an_equal_or_higher_priority_holder_blocks_and_nothing_is_revoked():
    low = held(segment_lock("compact", [0], priority=25))
    equal = held(segment_lock("ingest", [1], priority=75))
    decision = decide(chunk_lock("batch", priority=75), [low, equal], now_ms=10)
    assert not decision.granted
    assert decision.revoke == () and [lock.request.job for lock in decision.blockers] == ["ingest"]


def test_expired_and_revoked_locks_hold_nothing():
    expired = held(chunk_lock("a", priority=90), expires_ms=10)
    revoked = held(chunk_lock("b", priority=90), revoked_by="c", revoked_ms=5)
    assert decide(chunk_lock("d", priority=1), [expired, revoked], now_ms=10).granted


def test_time_chunk_locks_cover_contained_segments_and_segment_locks_their_partitions():
    assert covers(chunk_lock("a"), "t", Interval(0, 3_600_000), "any", 40_000)
    assert not covers(chunk_lock("a"), "t", Interval(0, 2 * 86_400_000), "v1", 0)
    lock = segment_lock("a", [0, 32_768])
    assert covers(lock, "t", DAY, "v1", 32_768)
    assert not covers(lock, "t", DAY, "v1", 1)
    assert not covers(lock, "t", DAY, "v2", 0)
    assert not covers(lock, "other", DAY, "v1", 0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"granularity": Granularity.SEGMENT, "version": "", "partitions": frozenset({1})},
        {"granularity": Granularity.SEGMENT, "version": "v1", "partitions": frozenset()},
        {"granularity": Granularity.TIME_CHUNK, "version": "v1"},
        {"granularity": Granularity.TIME_CHUNK, "interval": Interval(5, 5)},
        {"granularity": Granularity.TIME_CHUNK, "priority": 1.5},
    ],
)
def test_malformed_lock_requests_are_refused(kwargs):
    base = {"table": "t", "job": "j", "interval": DAY, "priority": 25}
    with pytest.raises(InvalidArgument):
        LockRequest(**{**base, **kwargs})
