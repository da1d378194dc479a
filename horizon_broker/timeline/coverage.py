"""A view: non-overlapping pieces of time, each showing one time chunk, sorted by start.

The complete view and the incomplete view are both of this kind. Every piece is a maximal run of
one time chunk. Finding the pieces of an interval costs O(log n + answer); repainting a region
costs O(log n + pieces and candidates in the region), whatever the size of the rest of the view.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator

from horizon_broker.timeline.chunk import TimeChunk
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.results import TimelineEntry


class Piece:
    """``[start_ms, end_ms)`` of the view shows ``chunk``."""

    __slots__ = ("chunk", "end_ms", "start_ms")

    def __init__(self, start_ms: int, end_ms: int, chunk: TimeChunk) -> None:
        self.start_ms = start_ms
        self.end_ms = end_ms
        self.chunk = chunk

    def entry(self, start_ms: int | None = None, end_ms: int | None = None) -> TimelineEntry:
        """The lookup entry of this piece, clipped to ``[start_ms, end_ms)`` when given.

        Built on demand and not cached: it is cheap (the chunk keeps its visible segments, and a
        piece showing its whole chunk reuses the chunk's interval), and objects created by a
        lookup die young instead of growing the heap the garbage collector scans."""
        chunk = self.chunk
        low = self.start_ms if start_ms is None or start_ms < self.start_ms else start_ms
        high = self.end_ms if end_ms is None or end_ms > self.end_ms else end_ms
        true_interval = chunk.interval
        if low == true_interval.start_ms and high == true_interval.end_ms:
            interval = true_interval
        else:
            interval = Interval(low, high)
        return TimelineEntry(interval, true_interval, chunk.version, chunk.visible_segments())

    def __repr__(self) -> str:
        return f"Piece([{self.start_ms},{self.end_ms}) {self.chunk.version})"


class Coverage:
    """Pieces in blocks of sorted starts (a two-level sorted list): finding where an instant
    falls is two bisects on short lists, and an insert or delete moves at most one block.

    Starts are kept in machine-integer arrays: a bisect then reads one contiguous buffer instead
    of following a pointer to a separate int object per probe, which matters once the view is too
    large for the CPU caches."""

    __slots__ = ("_blocks", "_firsts", "_size", "_starts")

    _LOAD = 256

    def __init__(self) -> None:
        self._starts: list[array[int]] = []
        self._blocks: list[list[Piece]] = []
        self._firsts: array[int] = array("q")
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Piece]:
        for block in self._blocks:
            yield from block

    def overlapping(self, start_ms: int, end_ms: int) -> list[Piece]:
        """Pieces sharing an instant with ``[start_ms, end_ms)``, in time order."""
        starts = self._starts
        if not starts:
            return []
        block = max(bisect_right(self._firsts, start_ms) - 1, 0)
        index = bisect_right(starts[block], start_ms) - 1
        if index < 0:
            index = 0
        elif self._blocks[block][index].end_ms <= start_ms:
            index += 1
        result: list[Piece] = []
        while block < len(starts):
            keys = starts[block]
            pieces = self._blocks[block]
            while index < len(keys):
                if keys[index] >= end_ms:
                    return result
                result.append(pieces[index])
                index += 1
            block += 1
            index = 0
        return result

    def repaint(self, start_ms: int, end_ms: int, candidates: Iterable[TimeChunk]) -> None:
        """Show, on every instant of ``[start_ms, end_ms)``, the highest version among the
        candidates covering it (nothing where none does); leave the rest of the view alone."""
        for piece in self.overlapping(start_ms, end_ms):
            self._delete(piece.start_ms)
            if piece.start_ms < start_ms:
                self._put(Piece(piece.start_ms, start_ms, piece.chunk))
            if piece.end_ms > end_ms:
                self._put(Piece(end_ms, piece.end_ms, piece.chunk))
        for low, high, chunk in paint(start_ms, end_ms, candidates):
            self._put(Piece(low, high, chunk))
        self._merge_at(start_ms)
        self._merge_at(end_ms)

    # -- the two-level sorted list -------------------------------------------------------------

    def _locate(self, key: int) -> tuple[int, int]:
        block = max(bisect_right(self._firsts, key) - 1, 0)
        return block, bisect_left(self._starts[block], key)

    def _put(self, piece: Piece) -> None:
        key = piece.start_ms
        if not self._starts:
            self._starts.append(array("q", (key,)))
            self._blocks.append([piece])
            self._firsts.append(key)
            self._size = 1
            return
        block, index = self._locate(key)
        keys = self._starts[block]
        pieces = self._blocks[block]
        if index < len(keys) and keys[index] == key:
            pieces[index] = piece
            return
        keys.insert(index, key)
        pieces.insert(index, piece)
        if index == 0:
            self._firsts[block] = key
        self._size += 1
        if len(keys) > 2 * self._LOAD:
            half = self._LOAD
            self._starts.insert(block + 1, keys[half:])
            self._blocks.insert(block + 1, pieces[half:])
            self._firsts.insert(block + 1, keys[half])
            del keys[half:]
            del pieces[half:]

    def _delete(self, key: int) -> None:
        block, index = self._locate(key)
        keys = self._starts[block]
        del keys[index]
        del self._blocks[block][index]
        self._size -= 1
        if not keys:
            del self._starts[block]
            del self._blocks[block]
            del self._firsts[block]
        elif index == 0:
            self._firsts[block] = keys[0]

    def _merge_at(self, instant: int) -> None:
        """Join the piece ending at ``instant`` with the one starting there if they show one chunk."""
        if not self._starts:
            return
        block, index = self._locate(instant)
        keys = self._starts[block]
        if index >= len(keys) or keys[index] != instant:
            return
        after = self._blocks[block][index]
        if index > 0:
            before = self._blocks[block][index - 1]
        elif block > 0:
            before = self._blocks[block - 1][-1]
        else:
            return
        if before.end_ms == instant and before.chunk is after.chunk:
            before.end_ms = after.end_ms
            self._delete(instant)


def paint(
    start_ms: int, end_ms: int, candidates: Iterable[TimeChunk]
) -> list[tuple[int, int, TimeChunk]]:
    """Give each instant of the region to the highest-version candidate covering it."""
    uncovered = [(start_ms, end_ms)]
    painted: list[tuple[int, int, TimeChunk]] = []
    for chunk in sorted(candidates, key=lambda candidate: candidate.version, reverse=True):
        low_limit = max(chunk.start_ms, start_ms)
        high_limit = min(chunk.end_ms, end_ms)
        if low_limit >= high_limit:
            continue
        remaining = []
        for low, high in uncovered:
            part_low, part_high = max(low, low_limit), min(high, high_limit)
            if part_low >= part_high:
                remaining.append((low, high))
                continue
            painted.append((part_low, part_high, chunk))
            if low < part_low:
                remaining.append((low, part_low))
            if part_high < high:
                remaining.append((part_high, high))
        uncovered = remaining
        if not uncovered:
            break
    return painted
