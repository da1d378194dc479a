"""The chunk index and the views at sizes that span many blocks, against brute force."""

from __future__ import annotations

import random

import pytest

from horizon_broker.timeline import Interval, InvalidArgument, Segment, Timeline
from horizon_broker.timeline.chunk import TimeChunk
from horizon_broker.timeline.chunk_index import ChunkIndex, chunk_key

HOUR = 3_600_000
BASE = 1_293_840_000_000


def _chunk(start_hour: int, hours: int, version: str) -> TimeChunk:
    start = BASE + start_hour * HOUR
    return TimeChunk(Interval(start, start + hours * HOUR), version)


def _brute_overlapping(chunks: list[TimeChunk], start_ms: int, end_ms: int) -> list[ChunkKey]:
    return sorted(
        chunk_key(chunk) for chunk in chunks if chunk.start_ms < end_ms and start_ms < chunk.end_ms
    )


ChunkKey = tuple[int, int, str]


def test_chunk_index_finds_overlapping_chunks_and_keeps_order_across_many_blocks() -> None:
    rnd = random.Random(5)
    index = ChunkIndex()
    chunks: dict[ChunkKey, TimeChunk] = {}
    for _ in range(3_000):
        chunk = _chunk(rnd.randrange(2_000), rnd.choice((1, 1, 1, 2, 24)), rnd.choice("abc"))
        if chunk_key(chunk) in chunks:
            continue
        chunks[chunk_key(chunk)] = chunk
        index.insert(chunk)
    for step in range(2):
        assert len(index) == len(chunks)
        assert [chunk_key(chunk) for chunk in index] == sorted(chunks)
        for key, chunk in chunks.items():
            assert index.get(key) is chunk
        for _ in range(300):
            start = BASE + rnd.randrange(-30, 2_030) * HOUR + rnd.randrange(HOUR)
            end = start + rnd.randrange(1, 5 * HOUR)
            found = sorted(chunk_key(chunk) for chunk in index.overlapping(start, end))
            assert found == _brute_overlapping(list(chunks.values()), start, end)
        if step == 0:
            for key in rnd.sample(sorted(chunks), len(chunks) * 2 // 3):
                assert index.delete(chunks.pop(key))
    assert max(chunk.end_ms - chunk.start_ms for chunk in chunks.values()) == index.max_duration


def test_chunk_index_delete_ignores_a_different_chunk_with_the_same_key() -> None:
    index = ChunkIndex()
    stored = _chunk(0, 1, "a")
    index.insert(stored)
    assert not index.delete(_chunk(0, 1, "a"))
    assert index.get(chunk_key(stored)) is stored
    assert index.delete(stored)
    assert len(index) == 0 and list(index.overlapping(0, BASE * 2)) == []


def _hourly(hour: int, version: str, partition: int = 0, core: int = 1) -> Segment:
    start = BASE + hour * HOUR
    return Segment(
        table="t",
        interval=Interval(start, start + HOUR),
        version=version,
        partition=partition,
        core_partitions=core,
    )


def test_lookup_over_thousands_of_chunks_falls_back_and_returns_after_random_changes() -> None:
    rnd = random.Random(9)
    timeline = Timeline("t")
    hours = 2_500
    timeline.add_all(_hourly(hour, "v1") for hour in range(hours))
    newer: dict[int, list[Segment]] = {}
    for hour in rnd.sample(range(hours), 800):
        # a newer version of two partitions: complete only while both are there
        newer[hour] = [_hourly(hour, "v2", partition, core=2) for partition in range(2)]
        timeline.add_all(newer[hour])
    for hour in rnd.sample(sorted(newer), 400):
        timeline.remove(newer[hour].pop())
    for _ in range(200):
        first = rnd.randrange(hours - 5)
        query = Interval(BASE + first * HOUR + 1, BASE + (first + 5) * HOUR - 1)
        entries = timeline.lookup(query)
        expected = [
            "v2" if len(newer.get(hour, ())) == 2 else "v1" for hour in range(first, first + 5)
        ]
        assert [entry.version for entry in entries] == expected
        assert entries[0].interval.start_ms == query.start_ms
        assert entries[-1].interval.end_ms == query.end_ms
        assert all(entry.interval == entry.true_interval for entry in entries[1:-1])
        incomplete = timeline.lookup_with_incomplete(query)
        assert [entry.version for entry in incomplete] == [
            "v2" if newer.get(hour) else "v1" for hour in range(first, first + 5)
        ]


def test_segments_with_instants_beyond_64_bit_milliseconds_are_rejected() -> None:
    timeline = Timeline("t")
    with pytest.raises(InvalidArgument, match="64-bit"):
        timeline.add(Segment(table="t", interval=Interval(0, 2**63), version="v", partition=0))
    assert timeline.is_empty
