"""Why each visible segment was chosen, in words (pure: timeline snapshot in, sentences out)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from horizon_broker.broker.spark.scan_layout import CLOSED, OPEN, SETTLED, ScanLayout
from horizon_broker.timeline.interval import format_instant


def _interval(interval: Any) -> str:
    return f"{format_instant(interval.start_ms)}/{format_instant(interval.end_ms)}"


def _overlaps(a: Any, b: Any) -> bool:
    return a.start_ms < b.end_ms and b.start_ms < a.end_ms


def segment_reasons(snapshot: Any, visible: Iterable[Any]) -> dict[str, str]:
    """``{segment id: reason}`` for every visible segment found in ``snapshot``.

    The reason names the time chunk and its completeness, the segment's atomic update group, what
    that group overshadows inside the chunk, and newer chunk versions that were passed over
    because they are incomplete (the fallback a reader would otherwise wonder about).
    """
    wanted = {str(segment.id) for segment in visible}
    chunks = tuple(snapshot.chunks) if snapshot is not None else ()
    reasons: dict[str, str] = {}
    for chunk in chunks:
        chunk_ids = {str(s.id) for group in chunk.groups for s in group.segments}
        if not chunk_ids & wanted:
            continue
        completeness = (
            f"complete (core partitions [0, {chunk.core_partitions}) covered)"
            if chunk.complete
            else "incomplete, read because no complete version covers it"
        )
        skipped = sorted(
            other.version
            for other in chunks
            if other.version > chunk.version
            and _overlaps(other.true_interval, chunk.true_interval)
            and not other.complete
        )
        older = sorted(
            other.version
            for other in chunks
            if other.version < chunk.version and _overlaps(other.true_interval, chunk.true_interval)
        )
        chunk_text = f"time chunk {_interval(chunk.true_interval)} version {chunk.version}, "
        chunk_text += completeness
        if skipped:
            chunk_text += f"; newer version(s) {', '.join(skipped)} incomplete, so not read"
        if older:
            chunk_text += f"; overshadows older version(s) {', '.join(older)}"
        for group in chunk.groups:
            replaced = [
                other
                for other in chunk.groups
                if other is not group
                and other.state == "overshadowed"
                and group.root_start <= other.root_start
                and other.root_end <= group.root_end
                and other.minor_version < group.minor_version
            ]
            group_text = (
                f"atomic update group root [{group.root_start}, {group.root_end}) minor "
                f"{group.minor_version} is {group.state}"
                + (" and full" if group.full else " but not full")
            )
            if replaced:
                group_text += (
                    f", replacing {sum(len(g.segments) for g in replaced)} segment(s) of minor "
                    + ", ".join(sorted({str(g.minor_version) for g in replaced}))
                )
            for segment in group.segments:
                key = str(segment.id)
                if key in wanted:
                    reasons[key] = f"{chunk_text}; {group_text}"
    for key in wanted - reasons.keys():
        reasons[key] = "visible in the timeline (changed since the query was planned)"
    return reasons


def view_notes(layout: ScanLayout | None, lwm: int | None) -> dict[str, str]:
    """``{segment id: note}`` saying which temp view reads each segment's files and what it
    tests, when a table's files are split between views (``horizon_broker.broker.spark.scan_layout``); empty when the
    table has one view. The bounds quoted are the layout's own T and C, which the SQL uses."""
    if layout is None or len(layout.parts) < 2:
        return {}
    threshold, closed_through = layout.settled_through, layout.closed_through
    notes: dict[str, list[str]] = {}
    for part in layout.parts:
        for segment in part.segments:
            mine = [path for path in part.files if path in segment.location]
            files = f"{len(mine)} file{'s' if len(mine) != 1 else ''}"
            known = segment.max_valid_from
            if part.kind == OPEN:
                note = (
                    f"{files} of open versions read through view {part.name}: settled "
                    f"(greatest validFrom {known} <= LWM {lwm}), so at snapshots >= {threshold} "
                    "nothing is tested"
                )
            elif part.kind == SETTLED:
                note = (
                    f"{files} read through view {part.name}: settled (greatest validFrom "
                    f"{known} <= LWM {lwm}), so at snapshots >= {threshold} only validUntil "
                    "is tested"
                )
            elif part.kind == CLOSED:
                note = (
                    f"{files} of closed versions read through view {part.name} (greatest "
                    f"validUntil {segment.max_valid_until}), not read at snapshots >= "
                    f"{closed_through}"
                )
            else:
                why = (
                    "greatest validFrom unknown" if known is None else f"greatest validFrom {known}"
                )
                note = (
                    f"{files} read through view {part.name} with the full visibility "
                    f"predicate ({why})"
                )
            notes.setdefault(str(segment.id), []).append(note)
    return {key: "; ".join(texts) for key, texts in notes.items()}
