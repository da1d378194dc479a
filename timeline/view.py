"""A view: non-overlapping pieces of time, each showing one time chunk, sorted by start.

The complete view and the incomplete view are both of this kind. Every piece is a maximal run of
one time chunk. Finding the pieces of an interval costs O(log n + answer); repainting a region
costs O(log n + pieces and candidates in the region), whatever the size of the rest of the view.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from sortedcontainers import SortedDict

from timeline.chunk import TimeChunk
from timeline.interval import Interval


class Piece:
    """``[start_ms, end_ms)`` of the view shows ``chunk``."""

    __slots__ = ("_interval", "chunk", "end_ms", "start_ms")

    def __init__(self, start_ms: int, end_ms: int, chunk: TimeChunk) -> None:
        self.start_ms = start_ms
        self.end_ms = end_ms
        self.chunk = chunk
        self._interval: Interval | None = None

    @property
    def interval(self) -> Interval:
        """Built once and reused by every lookup that shows the whole piece."""
        interval = self._interval
        if interval is None or interval.end_ms != self.end_ms:
            interval = self._interval = Interval(self.start_ms, self.end_ms)
        return interval

    def __repr__(self) -> str:
        return f"Piece([{self.start_ms},{self.end_ms}) {self.chunk.version})"


class View:
    """Pieces keyed by start."""

    __slots__ = ("_pieces",)

    def __init__(self) -> None:
        self._pieces: SortedDict = SortedDict()

    def __len__(self) -> int:
        return len(self._pieces)

    def __iter__(self) -> Iterator[Piece]:
        return iter(self._pieces.values())

    def overlapping(self, start_ms: int, end_ms: int) -> Iterator[Piece]:
        """Pieces sharing an instant with ``[start_ms, end_ms)``, in time order."""
        pieces = self._pieces
        slot = pieces.bisect_right(start_ms) - 1
        first_key = start_ms
        if slot >= 0:
            key, piece = pieces.peekitem(slot)
            if piece.end_ms > start_ms:
                first_key = key
        for key in pieces.irange(first_key, end_ms, inclusive=(True, False)):
            yield pieces[key]

    def repaint(self, start_ms: int, end_ms: int, candidates: Iterable[TimeChunk]) -> None:
        """Show, on every instant of ``[start_ms, end_ms)``, the highest version among the
        candidates covering it (nothing where none does); leave the rest of the view alone."""
        pieces = self._pieces
        for piece in list(self.overlapping(start_ms, end_ms)):
            del pieces[piece.start_ms]
            if piece.start_ms < start_ms:
                self._put(piece.start_ms, start_ms, piece.chunk)
            if piece.end_ms > end_ms:
                self._put(end_ms, piece.end_ms, piece.chunk)
        for low, high, chunk in paint(start_ms, end_ms, candidates):
            self._put(low, high, chunk)
        self._merge_at(start_ms)
        self._merge_at(end_ms)

    def _put(self, start_ms: int, end_ms: int, chunk: TimeChunk) -> None:
        self._pieces[start_ms] = Piece(start_ms, end_ms, chunk)

    def _merge_at(self, instant: int) -> None:
        """Join the piece ending at ``instant`` with the one starting there if they show one chunk."""
        pieces = self._pieces
        after = pieces.get(instant)
        if after is None:
            return
        slot = pieces.bisect_left(instant) - 1
        if slot < 0:
            return
        before = pieces.peekitem(slot)[1]
        if before.end_ms == instant and before.chunk is after.chunk:
            before.end_ms = after.end_ms
            del pieces[instant]


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
