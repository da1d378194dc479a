"""The versioned timeline of one table: Druid's semantics with Horizon's fixes.

Three structures, as in Druid: every time chunk keyed by (start, end, version); the *complete*
view (per instant, the highest version among complete chunks) that ``lookup`` reads; and the
*incomplete* view (per instant, the highest version among all chunks) that
``lookup_with_incomplete`` reads. A change re-settles only the chunk it touches and repaints the
views over that chunk's interval, from the chunks overlapping it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from horizon_broker._core.errors import InvalidArgument, SegmentConflict, WrongTable
from horizon_broker.timeline.chunk import TimeChunk
from horizon_broker.timeline.chunk_index import ChunkIndex, ChunkKey
from horizon_broker.timeline.coverage import Coverage, Piece
from horizon_broker.timeline.groups import GroupState
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.results import (
    ChunkSnapshot,
    GroupSnapshot,
    OvershadowedChunk,
    TimelineEntry,
    TimelineSnapshot,
)
from horizon_broker.timeline.segment import Segment, SegmentId

_MIN_MS = -(2**63)
_MAX_MS = 2**63 - 1


class Timeline:
    """Which segments of one table a query reads."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.generation = 0
        self._chunks = ChunkIndex()
        self._complete = Coverage()
        self._incomplete = Coverage()
        self._count = 0

    # -- changes -----------------------------------------------------------------------------

    def add(self, segment: Segment) -> bool:
        """Add one segment; False for an identical duplicate (the first copy is kept)."""
        return self.add_all((segment,)) == 1

    def add_all(self, segments: Iterable[Segment]) -> int:
        """Add a batch atomically; return how many were new.

        Completeness and the views are settled once per touched time chunk. If any segment is
        invalid or conflicting, nothing of the batch stays and the error is raised.
        """
        batch = list(segments)
        for segment in batch:
            self._check_table(segment)
        touched: dict[int, tuple[TimeChunk, bool, bool]] = {}
        stored: list[tuple[TimeChunk, Segment]] = []
        created: list[TimeChunk] = []
        try:
            for segment in batch:
                chunk = self._chunk_for(segment, touched, created)
                if chunk.store(segment):
                    stored.append((chunk, segment))
        except Exception:
            self._undo_add(touched, stored, created)
            raise
        for chunk, existed, was_complete in touched.values():
            chunk.refresh()
            self._settle_views(chunk, existed, was_complete)
        if stored:
            self._count += len(stored)
            self.generation += 1
        return len(stored)

    def _chunk_for(
        self,
        segment: Segment,
        touched: dict[int, tuple[TimeChunk, bool, bool]],
        created: list[TimeChunk],
    ) -> TimeChunk:
        """The segment's time chunk (made if new); a batch's first touch of a chunk records
        whether it existed and was complete, for settling the views once at the end."""
        key = _chunk_key(segment)
        chunk = self._chunks.get(key)
        if chunk is None:
            self._check_same_version_overlap(segment)
            chunk = TimeChunk(segment.interval, segment.version)
            self._insert_chunk(key, chunk)
            created.append(chunk)
            touched[id(chunk)] = (chunk, False, False)
        elif id(chunk) not in touched:
            touched[id(chunk)] = (chunk, True, chunk.complete)
        return chunk

    def _undo_add(
        self,
        touched: dict[int, tuple[TimeChunk, bool, bool]],
        stored: list[tuple[TimeChunk, Segment]],
        created: list[TimeChunk],
    ) -> None:
        """Take back a failed batch: its segments, its new chunks, and the old chunks' state."""
        for chunk, segment in reversed(stored):
            chunk.unstore(segment)
        for chunk in created:
            self._delete_chunk(chunk)
        for chunk, existed, _ in touched.values():
            if existed:
                chunk.refresh()

    def remove(self, segment: Segment) -> bool:
        """Remove the stored segment with this id; False if there is none.

        Raises :class:`SegmentConflict` if the stored segment has other shard fields.
        """
        return self.remove_all((segment,)) == 1

    def remove_all(self, segments: Iterable[Segment]) -> int:
        """Remove a batch of stored segments (by id) atomically; return how many were stored.

        Each touched time chunk is settled once, as :meth:`add_all` settles it: an update that
        replaces hundreds of segments of one chunk settled the chunk once per segment, each time
        over all its groups. Raises :class:`SegmentConflict` (removing nothing) if a stored
        segment with one of these ids has other shard fields.
        """
        found: dict[tuple[int, int], tuple[TimeChunk, Segment]] = {}
        for segment in segments:
            self._check_table(segment)
            chunk = self._chunks.get(_chunk_key(segment))
            if chunk is None or (stored := chunk.get(segment.partition)) is None:
                continue
            if not stored.same_shard(segment):
                raise SegmentConflict(
                    f"cannot remove {segment.id}: the stored segment with that id has other "
                    "shard fields"
                )
            found[(id(chunk), segment.partition)] = (chunk, stored)
        touched: dict[int, tuple[TimeChunk, bool]] = {}
        for chunk, stored in found.values():
            touched.setdefault(id(chunk), (chunk, chunk.complete))
            chunk.unstore(stored)
        for chunk, was_complete in touched.values():
            chunk.refresh()
            self._settle_views(chunk, True, was_complete)
        if found:
            self._count -= len(found)
            self.generation += 1
        return len(found)

    def remove_unreadable(self, segment_or_id: Segment | SegmentId) -> bool:
        """Say "this segment's file is unreadable": drop it so the timeline falls back (an
        overwrite segment falls back to the segments it overwrote, if they remain)."""
        segment_id = segment_or_id.id if isinstance(segment_or_id, Segment) else segment_or_id
        if segment_id.table != self.table:
            return False
        chunk = self._chunks.get(
            (segment_id.interval.start_ms, segment_id.interval.end_ms, segment_id.version)
        )
        if chunk is None or (stored := chunk.get(segment_id.partition)) is None:
            return False
        self._remove_stored(chunk, stored)
        return True

    # -- queries -----------------------------------------------------------------------------

    def lookup(self, interval: Interval) -> list[TimelineEntry]:
        """The latest complete time chunks over ``interval``, falling back to lower complete
        versions; only the first and last entries are clipped to the query."""
        return _entries(self._complete, interval)

    def lookup_with_incomplete(self, interval: Interval) -> list[TimelineEntry]:
        """The latest time chunks over ``interval`` even when incomplete."""
        return _entries(self._incomplete, interval)

    def visible_segments(self, interval: Interval | None = None) -> list[Segment]:
        """The segments ``lookup`` shows, over everything or one interval, each once, in time
        then partition order."""
        if interval is None:
            pieces: Iterable[Piece] = self._complete
        elif interval.is_empty:
            return []
        else:
            pieces = self._complete.overlapping(interval.start_ms, interval.end_ms)
        seen: set[int] = set()
        result: list[Segment] = []
        for piece in pieces:
            if id(piece.chunk) in seen:
                continue
            seen.add(id(piece.chunk))
            result.extend(piece.chunk.visible_segments())
        return result

    def is_overshadowed(self, segment: Segment) -> bool:
        """True when the complete view covers the segment's interval without a gap by higher
        versions, or by its own version through a visible group that overshadows it."""
        interval = segment.interval
        position = interval.start_ms
        for piece in self._complete.overlapping(interval.start_ms, interval.end_ms):
            if piece.start_ms > position:
                return False
            version = piece.chunk.version
            if version < segment.version:
                return False
            if version == segment.version and not piece.chunk.visible_group_overshadows(segment):
                return False
            position = piece.end_ms
            if position >= interval.end_ms:
                return True
        return False

    def state(self, segment: Segment | SegmentId) -> GroupState | None:
        """The state of the stored segment's atomic update group, or None if it is not stored."""
        segment_id = segment.id if isinstance(segment, Segment) else segment
        chunk = self._chunk_of(segment_id)
        if chunk is None or (stored := chunk.get(segment_id.partition)) is None:
            return None
        return chunk.state(stored)

    def find_fully_overshadowed(self) -> list[OvershadowedChunk]:
        """Time chunks shown by neither view (all their segments), and the overshadowed groups of
        chunks shown by the incomplete view (Druid's rule)."""
        shown_incomplete = {id(piece.chunk) for piece in self._incomplete}
        shown = shown_incomplete | {id(piece.chunk) for piece in self._complete}
        result: list[OvershadowedChunk] = []
        for chunk in self._chunks:
            if id(chunk) not in shown:
                result.append(
                    OvershadowedChunk(chunk.interval, chunk.version, tuple(chunk.segments()))
                )
            elif id(chunk) in shown_incomplete:
                hidden = chunk.overshadowed_segments()
                if hidden:
                    result.append(OvershadowedChunk(chunk.interval, chunk.version, tuple(hidden)))
        return result

    def get(self, segment_id: SegmentId) -> Segment | None:
        chunk = self._chunk_of(segment_id)
        return chunk.get(segment_id.partition) if chunk is not None else None

    def segments(self) -> Iterator[Segment]:
        """Every stored segment, overshadowed ones included, by time chunk."""
        for chunk in self._chunks:
            yield from chunk.segments()

    @property
    def is_empty(self) -> bool:
        """True when no segment is stored."""
        return self._count == 0

    def __len__(self) -> int:
        return self._count

    def snapshot(self) -> TimelineSnapshot:
        """Every time chunk with its completeness, where each view shows it, and its groups."""
        complete_pieces = _pieces_by_chunk(self._complete)
        incomplete_pieces = _pieces_by_chunk(self._incomplete)
        chunks = []
        for chunk in self._chunks:
            groups = tuple(
                GroupSnapshot(
                    root_start=group.root_start,
                    root_end=group.root_end,
                    minor_version=group.minor,
                    atomic_update_group_size=group.size,
                    full=group.full,
                    state=group.state,
                    segments=tuple(group.segments),
                )
                for group in chunk.groups()
            )
            chunks.append(
                ChunkSnapshot(
                    true_interval=chunk.interval,
                    version=chunk.version,
                    complete=chunk.complete,
                    core_partitions=chunk.core_partitions,
                    lookup_pieces=tuple(complete_pieces.get(id(chunk), ())),
                    lookup_with_incomplete_pieces=tuple(incomplete_pieces.get(id(chunk), ())),
                    groups=groups,
                )
            )
        return TimelineSnapshot(self.table, self.generation, self._count, tuple(chunks))

    def __repr__(self) -> str:
        return (
            f"Timeline({self.table!r}, segments={self._count}, chunks={len(self._chunks)}, "
            f"generation={self.generation})"
        )

    # -- internals ---------------------------------------------------------------------------

    def _check_table(self, segment: Segment) -> None:
        if not isinstance(segment, Segment):
            raise WrongTable(f"expected a timeline.Segment, got {type(segment).__name__}")
        if segment.table != self.table:
            raise WrongTable(
                f"segment {segment.id} belongs to table {segment.table!r}, not {self.table!r}"
            )
        interval = segment.interval
        if not (interval.start_ms >= _MIN_MS and interval.end_ms <= _MAX_MS):
            raise InvalidArgument(
                f"segment of table {segment.table!r}, version {segment.version!r}, partition "
                f"{segment.partition} has the interval [{interval.start_ms}, {interval.end_ms}) ms, "
                "outside 64-bit epoch milliseconds (what Druid and this timeline can hold)"
            )

    def _chunk_of(self, segment_id: SegmentId) -> TimeChunk | None:
        if segment_id.table != self.table:
            return None
        interval = segment_id.interval
        return self._chunks.get((interval.start_ms, interval.end_ms, segment_id.version))

    def _overlapping_chunks(self, start_ms: int, end_ms: int) -> Iterator[TimeChunk]:
        """Chunks whose true interval overlaps ``[start_ms, end_ms)``."""
        return self._chunks.overlapping(start_ms, end_ms)

    def _check_same_version_overlap(self, segment: Segment) -> None:
        """Q2: different time chunks of one version must not overlap, exact piece match or not."""
        interval = segment.interval
        for chunk in self._overlapping_chunks(interval.start_ms, interval.end_ms):
            if chunk.version == segment.version and chunk.interval != interval:
                raise SegmentConflict(
                    f"segment {segment.id} overlaps the time chunk {chunk.interval} of the same "
                    f"version {segment.version!r}; time chunks of one version must not overlap"
                )

    def _insert_chunk(self, key: ChunkKey, chunk: TimeChunk) -> None:
        self._chunks.insert(chunk)

    def _delete_chunk(self, chunk: TimeChunk) -> None:
        self._chunks.delete(chunk)

    def _remove_stored(self, chunk: TimeChunk, stored: Segment) -> None:
        was_complete = chunk.complete
        chunk.unstore(stored)
        chunk.refresh()
        self._settle_views(chunk, True, was_complete)
        self._count -= 1
        self.generation += 1

    def _settle_views(self, chunk: TimeChunk, existed: bool, was_complete: bool) -> None:
        """Q3/Q4: a chunk is in the incomplete view while it has any segment, in the complete
        view while it is complete; repaint its interval when either changes."""
        exists = len(chunk) > 0
        if not exists:
            self._delete_chunk(chunk)
        is_complete = exists and chunk.complete
        if exists != existed:
            self._repaint(self._incomplete, chunk, complete_only=False)
        if is_complete != was_complete:
            self._repaint(self._complete, chunk, complete_only=True)

    def _repaint(self, view: Coverage, chunk: TimeChunk, *, complete_only: bool) -> None:
        start_ms, end_ms = chunk.start_ms, chunk.end_ms
        candidates = [
            candidate
            for candidate in self._overlapping_chunks(start_ms, end_ms)
            if not complete_only or candidate.complete
        ]
        view.repaint(start_ms, end_ms, candidates)


def _chunk_key(segment: Segment) -> ChunkKey:
    return (segment.interval.start_ms, segment.interval.end_ms, segment.version)


def _entries(view: Coverage, interval: Interval) -> list[TimelineEntry]:
    if interval.is_empty:
        return []
    start_ms, end_ms = interval.start_ms, interval.end_ms
    pieces = view.overlapping(start_ms, end_ms)
    if not pieces:
        return []
    if len(pieces) == 1:
        return [pieces[0].entry(start_ms, end_ms)]
    entries = [pieces[0].entry(start_ms=start_ms)]
    entries.extend(piece.entry() for piece in pieces[1:-1])
    entries.append(pieces[-1].entry(end_ms=end_ms))
    return entries


def _pieces_by_chunk(view: Coverage) -> dict[int, list[Interval]]:
    result: dict[int, list[Interval]] = {}
    for piece in view:
        result.setdefault(id(piece.chunk), []).append(Interval(piece.start_ms, piece.end_ms))
    return result
