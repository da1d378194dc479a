"""Where each segment of a table stands for a query, from the timeline's picture (pure).

A segment is *read* when the query's visible set holds it. Otherwise its atomic update group
says why: overshadowed (a newer group covers its root range), standby (it is newer than what is
read, but not complete); a group the timeline calls visible may still sit in a time chunk no
query reads, because a newer complete major version covers it (overshadowed) or because its own
version is not complete yet (standby). Segments the broker found unreadable have left the
timeline; they are placed from their marks. A compaction record names the segments an input was
merged into.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from horizon_broker.broker.explain_key.verdicts import SegmentPlace
from horizon_broker.timeline.interval import format_instant
from horizon_broker.timeline.results import ChunkSnapshot, GroupSnapshot, TimelineSnapshot


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A segment the broker keeps out as unreadable, with its chunk and version, and why."""

    segment: str
    interval: str
    version: str
    reason: str


def group_words(chunk: ChunkSnapshot, group: GroupSnapshot) -> str:
    """An atomic update group in words: its chunk, version, root range, minor version, size."""
    size = group.atomic_update_group_size
    members = f"{len(group.segments)}/{size if size > 0 else '?'}"
    return (
        f"time chunk {format_instant(chunk.true_interval.start_ms)}/"
        f"{format_instant(chunk.true_interval.end_ms)} version {chunk.version}, group root "
        f"[{group.root_start}, {group.root_end}) minor {group.minor_version} ({members} segments)"
    )


def segment_places(
    timeline: TimelineSnapshot,
    read: Iterable[str],
    unreadable: Iterable[Unreadable] = (),
    compacted_into: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[str, SegmentPlace]:
    """``{segment id: place}`` for every segment of ``timeline`` and every unreadable one."""
    read_ids = set(read)
    lineage = compacted_into or {}
    places: dict[str, SegmentPlace] = {}
    for chunk in timeline.chunks:
        for group in chunk.groups:
            words = group_words(chunk, group)
            for segment in group.segments:
                key = str(segment.id)
                if key in read_ids:
                    places[key] = SegmentPlace(key, "read", words)
                    continue
                state, why = _not_read(timeline, chunk, group)
                places[key] = SegmentPlace(key, state, words, why, lineage.get(key, ()))
    for mark in unreadable:
        places[mark.segment] = SegmentPlace(
            mark.segment,
            "unreadable",
            f"time chunk {mark.interval} version {mark.version}",
            mark.reason,
        )
    return places


def _not_read(
    timeline: TimelineSnapshot, chunk: ChunkSnapshot, group: GroupSnapshot
) -> tuple[str, str]:
    """(state, why) of a segment the query does not read."""
    if group.state == "overshadowed":
        cover = _covering_group(chunk, group)
        by = (
            f"group root [{cover.root_start}, {cover.root_end}) minor {cover.minor_version} "
            f"({', '.join(str(s.id) for s in cover.segments)}) replaces it"
            if cover is not None
            else "a newer group of its time chunk covers its root range"
        )
        return "overshadowed", by
    if group.state == "standby":
        return "standby", (
            f"minor {group.minor_version} is newer than what is read but its group is not "
            f"complete ({len(group.segments)} of {group.atomic_update_group_size} segments)"
        )
    newer = _newer_complete(timeline, chunk)
    if newer is not None:
        return "overshadowed", (
            f"its time chunk's version {chunk.version} is overshadowed by the complete version "
            f"{newer}"
        )
    if not chunk.complete:
        return "standby", (
            f"its time chunk's version {chunk.version} is not complete (core partitions "
            f"[0, {chunk.core_partitions}) not all there): queries read an older complete one"
        )
    return "overshadowed", "the timeline does not read it"


def _covering_group(chunk: ChunkSnapshot, group: GroupSnapshot) -> GroupSnapshot | None:
    for other in chunk.groups:
        if (
            other.state == "visible"
            and other.minor_version > group.minor_version
            and other.root_start <= group.root_start
            and group.root_end <= other.root_end
        ):
            return other
    return None


def _newer_complete(timeline: TimelineSnapshot, chunk: ChunkSnapshot) -> str | None:
    interval = chunk.true_interval
    for other in timeline.chunks:
        if (
            other.version > chunk.version
            and other.complete
            and other.true_interval.start_ms < interval.end_ms
            and interval.start_ms < other.true_interval.end_ms
        ):
            return other.version
    return None
