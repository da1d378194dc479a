"""The timeline as a picture: one SVG of a table's time chunks (across), root partitions (down)
and atomic update groups coloured by state, locked chunks and unreadable segments marked. Pure
(an API message in, SVG text out): the ``horizon timeline --picture`` command and the web console
draw the same picture."""

from __future__ import annotations

from html import escape
from typing import Any

from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.timeline.interval import format_instant

STATE_NAMES = {
    pb.GROUP_STATE_VISIBLE: "visible",
    pb.GROUP_STATE_STANDBY: "standby",
    pb.GROUP_STATE_OVERSHADOWED: "overshadowed",
}
STATE_COLOURS = {"visible": "#2e9d4f", "standby": "#e0a526", "overshadowed": "#9a9a9a"}


def interval_text(interval: pb.Interval) -> str:
    return f"{format_instant(interval.start_ms)}/{format_instant(interval.end_ms)}"


def chunk_locks(timeline: pb.GetTimelineResponse, chunk: pb.TimeChunk) -> list[pb.Lock]:
    """The locks held on part of ``chunk``'s interval: it is being written or compacted."""
    return [
        lock
        for lock in timeline.locks
        if lock.interval.start_ms < chunk.interval.end_ms
        and chunk.interval.start_ms < lock.interval.end_ms
    ]


def lock_summary(lock: pb.Lock) -> str:
    """A short description: holder, priority, what is locked, state of the lease."""
    if lock.granularity == pb.LOCK_GRANULARITY_SEGMENT:
        what = f"segments {_partitions(lock.partitions)} of {lock.version}"
    else:
        what = "time chunk"
    state = (
        f"revoked by {lock.revoked_by}" if lock.revoked else f"{lock.lease_left_seconds:.0f}s left"
    )
    return f"{lock.job} (priority {lock.priority}, {_MODES.get(lock.mode, '?')} {what}, {state})"


def _partitions(partitions: Any) -> str:
    values = sorted(partitions)
    if values and values == list(range(values[0], values[-1] + 1)) and len(values) > 2:
        return f"{values[0]}-{values[-1]}"
    return ",".join(str(value) for value in values)


_MODES = {pb.LOCK_MODE_EXCLUSIVE: "exclusive", pb.LOCK_MODE_SHARED: "shared"}


_LOCKED_COLOUR = "#b0309a"
_UNREADABLE_COLOUR = "#d0231b"
_CELL_W = 36
_ROW_H = 22
_LEFT = 70
_TOP = 40
_BOTTOM = 130


def _group_detail(group: pb.AtomicUpdateGroup) -> str:
    """A group's segments, one line each (the console shows it when the group is clicked)."""
    return "\n".join(
        f"{segment.id}: partition {segment.partition}, {segment.row_count} rows, "
        f"{len(segment.location)} file(s), server {segment.server or '-'}"
        for segment in group.segments
    )


_LABEL_CHAR_W = 5.0
"""About the width of a character of a 9 px sans-serif chunk label."""


def _chunk_label(chunk: pb.TimeChunk, locked: bool) -> str:
    return (
        f"{interval_text(chunk.interval)} v {chunk.version}"
        + ("" if chunk.complete else " (incomplete)")
        + (" (locked)" if locked else "")
    )


def timeline_svg(timeline: pb.GetTimelineResponse) -> str:
    """An SVG picture: one column band per time chunk (x), root partitions (y), one sub-column per
    atomic update group layer (minor version), coloured by state; incomplete chunks are dashed."""
    chunks = list(timeline.chunks)
    max_root = max(
        [group.root_end for chunk in chunks for group in chunk.groups]
        + [chunk.core_partitions for chunk in chunks]
        + [1]
    )
    layouts = []
    x = _LEFT
    for chunk in chunks:
        minors = sorted({group.minor_version for group in chunk.groups}) or [0]
        width = _CELL_W * len(minors)
        layouts.append((chunk, x, minors))
        x += width + 12
    # Chunk labels slant down to the right under their chunk: the picture grows to hold the
    # longest one, so none runs into the legend or off the edge.
    label_px = max((len(_chunk_label(chunk, False)) + 9 for chunk in chunks), default=0)
    label_px = label_px * _LABEL_CHAR_W
    last_left = layouts[-1][1] if layouts else _LEFT
    width_total = max(
        x + 20, _LEFT + len(STATE_COLOURS) * 120 + 230, int(last_left + label_px * 0.87) + 30
    )
    height = _TOP + max_root * _ROW_H + max(_BOTTOM, int(label_px * 0.5) + 60)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width_total}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<text x="{_LEFT}" y="20" font-size="14" font-weight="bold">'
        f"Timeline of {escape(timeline.table)} (generation {timeline.timeline_generation})</text>",
    ]
    for root in range(max_root):
        y = _TOP + root * _ROW_H + _ROW_H * 0.65
        parts.append(f'<text x="{_LEFT - 8}" y="{y:.0f}" text-anchor="end">root {root}</text>')
    for chunk, left, minors in layouts:
        band_width = _CELL_W * len(minors)
        dash = "" if chunk.complete else ' stroke-dasharray="4 3"'
        held = chunk_locks(timeline, chunk)
        stroke = f'stroke="{_LOCKED_COLOUR}" stroke-width="3"' if held else 'stroke="#333"'
        parts.append(
            f'<rect class="chunk" data-locked="{int(bool(held))}" x="{left - 3}" y="{_TOP - 3}" '
            f'width="{band_width + 6}" height="{max_root * _ROW_H + 6}" fill="none" {stroke}{dash}>'
            + (
                f"<title>locked: {escape('; '.join(lock_summary(lock) for lock in held))}</title>"
                if held
                else ""
            )
            + "</rect>"
        )
        for group in chunk.groups:
            state = STATE_NAMES.get(group.state, "standby")
            gx = left + minors.index(group.minor_version) * _CELL_W
            gy = _TOP + group.root_start * _ROW_H
            gh = (group.root_end - group.root_start) * _ROW_H - 2
            title = (
                f"{state}: minor {group.minor_version}, root [{group.root_start}, "
                f"{group.root_end}), {len(group.segments)} segment(s)"
                + ("" if group.full else ", not full")
            )
            parts.append(
                f'<rect class="group" data-state="{state}" data-segments="{len(group.segments)}" '
                f'data-detail="{escape(_group_detail(group))}" x="{gx + 1}" y="{gy + 1}" '
                f'width="{_CELL_W - 2}" height="{gh}" fill="{STATE_COLOURS[state]}" stroke="#222">'
                f"<title>{escape(title)}</title></rect>"
            )
            parts.append(
                f'<text x="{gx + _CELL_W / 2:.0f}" y="{gy + 14}" text-anchor="middle" '
                f'fill="#fff" pointer-events="none">m{group.minor_version}</text>'
            )
        bad = [
            mark
            for mark in timeline.unreadable
            if mark.segment.interval == chunk.interval and mark.segment.version == chunk.version
        ]
        if bad:
            reasons = "; ".join(f"{mark.segment.id}: {mark.reason}" for mark in bad)
            parts.append(
                f'<text class="unreadable" data-segments="{len(bad)}" x="{left}" y="{_TOP - 8}" '
                f'fill="{_UNREADABLE_COLOUR}" font-weight="bold">&#x2715; {len(bad)} unreadable'
                f"<title>{escape(reasons)}</title></text>"
            )
        label_y = _TOP + max_root * _ROW_H + 16
        label = _chunk_label(chunk, bool(held))
        parts.append(
            f'<text transform="translate({left + 4},{label_y}) rotate(30)" '
            f'font-size="9">{escape(label)}</text>'
        )
    legend_y = height - 14
    for index, (state, colour) in enumerate(STATE_COLOURS.items()):
        lx = _LEFT + index * 120
        parts.append(
            f'<rect x="{lx}" y="{legend_y - 10}" width="12" height="12" fill="{colour}"/>'
            f'<text x="{lx + 16}" y="{legend_y}">{state}</text>'
        )
    lx = _LEFT + len(STATE_COLOURS) * 120
    parts.append(
        f'<rect x="{lx}" y="{legend_y - 10}" width="12" height="12" fill="none" '
        f'stroke="{_LOCKED_COLOUR}" stroke-width="3"/>'
        f'<text x="{lx + 16}" y="{legend_y}">locked (ingesting or compacting)</text>'
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
