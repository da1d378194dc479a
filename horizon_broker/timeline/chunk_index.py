"""Every time chunk of a timeline, by key and by start.

A dict finds a chunk by ``(start, end, version)``; a two-level sorted list of distinct starts
(machine-integer arrays in blocks, like :class:`horizon_broker.timeline.coverage.Coverage`) finds the chunks that can
overlap an interval. Both cost the same in a timeline of a thousand or a million chunks, and a
lookup reads a few contiguous buffers rather than chasing a pointer per comparison.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator

from horizon_broker.timeline.chunk import TimeChunk

ChunkKey = tuple[int, int, str]


def chunk_key(chunk: TimeChunk) -> ChunkKey:
    return (chunk.start_ms, chunk.end_ms, chunk.version)


class ChunkIndex:
    """Time chunks by key, and in (start, end, version) order."""

    __slots__ = ("_at", "_by_key", "_durations", "_firsts", "_starts", "max_duration")

    _LOAD = 256

    def __init__(self) -> None:
        self._by_key: dict[ChunkKey, TimeChunk] = {}
        self._firsts: array[int] = array("q")  # first start of every block
        self._starts: list[array[int]] = []  # distinct starts, sorted, in blocks
        self._at: list[list[list[TimeChunk]]] = []  # per start: its chunks by (end, version)
        self._durations: dict[int, int] = {}
        self.max_duration = 0

    def __len__(self) -> int:
        return len(self._by_key)

    def get(self, key: ChunkKey) -> TimeChunk | None:
        return self._by_key.get(key)

    def __iter__(self) -> Iterator[TimeChunk]:
        """Every chunk in (start, end, version) order."""
        for block in self._at:
            for chunks in block:
                yield from chunks

    def overlapping(self, start_ms: int, end_ms: int) -> Iterator[TimeChunk]:
        """Chunks sharing an instant with ``[start_ms, end_ms)``, by start.

        Only chunks starting after ``start_ms - longest duration`` can reach the interval, so the
        scan is local as long as chunk lengths are alike.
        """
        if not self._firsts:
            return
        lowest = start_ms - self.max_duration + 1
        block = max(bisect_right(self._firsts, lowest) - 1, 0)
        index = bisect_left(self._starts[block], lowest)
        while block < len(self._starts):
            starts = self._starts[block]
            at = self._at[block]
            while index < len(starts):
                if starts[index] >= end_ms:
                    return
                for chunk in at[index]:
                    if chunk.end_ms > start_ms:
                        yield chunk
                index += 1
            block += 1
            index = 0

    def insert(self, chunk: TimeChunk) -> None:
        key = chunk_key(chunk)
        self._by_key[key] = chunk
        duration = chunk.end_ms - chunk.start_ms
        self._durations[duration] = self._durations.get(duration, 0) + 1
        if duration > self.max_duration:
            self.max_duration = duration
        start = chunk.start_ms
        if not self._starts:
            self._firsts.append(start)
            self._starts.append(array("q", (start,)))
            self._at.append([[chunk]])
            return
        block, index = self._locate(start)
        starts = self._starts[block]
        at = self._at[block]
        if index < len(starts) and starts[index] == start:
            same_start = at[index]
            order = [(other.end_ms, other.version) for other in same_start]
            same_start.insert(bisect_left(order, (chunk.end_ms, chunk.version)), chunk)
            return
        starts.insert(index, start)
        at.insert(index, [chunk])
        if index == 0:
            self._firsts[block] = start
        if len(starts) > 2 * self._LOAD:
            half = self._LOAD
            self._firsts.insert(block + 1, starts[half])
            self._starts.insert(block + 1, starts[half:])
            self._at.insert(block + 1, at[half:])
            del starts[half:]
            del at[half:]

    def delete(self, chunk: TimeChunk) -> bool:
        """Remove this very chunk; False if the index holds another one (or none) by its key."""
        key = chunk_key(chunk)
        if self._by_key.get(key) is not chunk:
            return False
        del self._by_key[key]
        duration = chunk.end_ms - chunk.start_ms
        left = self._durations[duration] - 1
        if left:
            self._durations[duration] = left
        else:
            del self._durations[duration]
            if duration == self.max_duration:
                self.max_duration = max(self._durations, default=0)
        block, index = self._locate(chunk.start_ms)
        same_start = self._at[block][index]
        same_start.remove(chunk)
        if same_start:
            return True
        starts = self._starts[block]
        del starts[index]
        del self._at[block][index]
        if not starts:
            del self._firsts[block]
            del self._starts[block]
            del self._at[block]
        elif index == 0:
            self._firsts[block] = starts[0]
        return True

    def _locate(self, start: int) -> tuple[int, int]:
        block = max(bisect_right(self._firsts, start) - 1, 0)
        return block, bisect_left(self._starts[block], start)
