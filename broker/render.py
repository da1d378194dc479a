"""Terminal and picture output of the CLI: rich tables, JSON, and an SVG timeline picture."""

from __future__ import annotations

import json
from html import escape
from typing import Any

import pyarrow as pa
from google.protobuf.json_format import MessageToDict
from rich.console import Console
from rich.table import Table

from broker._proto.horizon.v1 import horizon_pb2 as pb
from timeline.interval import format_instant

STATE_NAMES = {
    pb.GROUP_STATE_VISIBLE: "visible",
    pb.GROUP_STATE_STANDBY: "standby",
    pb.GROUP_STATE_OVERSHADOWED: "overshadowed",
}
STATE_COLOURS = {"visible": "#2e9d4f", "standby": "#e0a526", "overshadowed": "#9a9a9a"}
STATE_STYLES = {"visible": "green", "standby": "yellow", "overshadowed": "bright_black"}


def to_dict(message: Any) -> dict[str, Any]:
    """A protobuf message as a JSON-ready dict (field names as in the .proto, ints as numbers)."""
    data = MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return _int64s_as_numbers(data)


def _int64s_as_numbers(value: Any) -> Any:
    # proto3 JSON writes int64 as strings; people reading HLCs want numbers.
    if isinstance(value, dict):
        return {key: _int64s_as_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_int64s_as_numbers(item) for item in value]
    if isinstance(value, str) and value.lstrip("-").isdigit() and len(value) < 20:
        return int(value)
    return value


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False, default=str)


def _interval(interval: pb.Interval) -> str:
    return f"{format_instant(interval.start_ms)}/{format_instant(interval.end_ms)}"


def _opt(message: Any, name: str) -> str:
    return str(getattr(message, name)) if message.HasField(name) else "-"


# -- queries --------------------------------------------------------------------------------------


def result_table(table: pa.Table, *, title: str | None = None, max_rows: int = 200) -> Table:
    view = Table(title=title, show_lines=False)
    for field in table.schema:
        view.add_column(f"{field.name}\n[dim]{field.type}[/dim]")
    for row in table.slice(0, max_rows).to_pylist():
        view.add_row(*("NULL" if value is None else str(value) for value in row.values()))
    if table.num_rows > max_rows:
        view.caption = f"{max_rows} of {table.num_rows} rows shown"
    return view


def print_result(console: Console, result: Any) -> None:
    console.print(result_table(result.table))
    metadata, timings = result.metadata, result.trailer.timings
    console.print(
        f"[dim]{result.table.num_rows} row(s) at snapshot {_opt(metadata, 'snapshot')} "
        f"({metadata.snapshot_reason}); {timings.total_ms:.0f} ms total, "
        f"{timings.spark_ms:.0f} ms Spark, {timings.rewrite_ms:.1f} ms rewrite; "
        f"cache {metadata.cache or '-'}"
        + (f"; waited {metadata.waited_ms:.0f} ms for the snapshot" if metadata.waited_ms else "")
        + "[/dim]"
    )
    if metadata.snapshot_token:
        console.print(f"[dim]snapshot token {metadata.snapshot_token}[/dim]", highlight=False)
    if metadata.retried:
        console.print(
            "[yellow]unreadable segment(s) removed, query retried:[/yellow] "
            + ", ".join(metadata.unreadable_segments)
        )


def result_json(result: Any) -> dict[str, Any]:
    return {
        "rows": result.table.to_pylist(),
        "metadata": to_dict(result.metadata),
        "trailer": to_dict(result.trailer),
    }


def print_explain(console: Console, explain: pb.ExplainQueryResponse) -> None:
    console.print("[bold]Rewritten SQL[/bold]")
    console.print(explain.rewritten_sql, highlight=False)
    metadata = explain.metadata
    console.print(
        f"\n[bold]Snapshot[/bold] {_opt(metadata, 'snapshot')}: {metadata.snapshot_reason}"
    )
    for table in explain.tables:
        read = table.read
        view = Table(
            title=f"{read.table} (view {read.view}, generation {read.timeline_generation}, "
            f"LWM {_opt(read, 'lwm')})",
            show_lines=True,
        )
        view.add_column("segment")
        view.add_column("files")
        view.add_column("rows", justify="right")
        view.add_column("why")
        for chosen in table.segments:
            segment = chosen.segment
            view.add_row(
                f"{_interval(segment.interval)}\nv {segment.version} p {segment.partition}",
                "\n".join(segment.location),
                str(segment.row_count),
                chosen.reason,
            )
        console.print(view)
    if explain.spark_plan:
        console.print("[bold]Spark plan[/bold]")
        console.print(explain.spark_plan, highlight=False)


# -- inspection -----------------------------------------------------------------------------------


def print_tables(console: Console, tables: list[pb.TableInfo]) -> None:
    view = Table(title="Tables")
    for column in ("table", "columns", "primary key", "LWM", "generation", "visible segments"):
        view.add_column(column)
    for table in tables:
        view.add_row(
            table.name,
            ", ".join(f"{c.name} {c.type}" for c in table.columns),
            ", ".join(table.primary_key),
            _opt(table, "lwm"),
            str(table.timeline_generation),
            str(table.visible_segments),
        )
    console.print(view)


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


def print_locks(console: Console, held: pb.ListLocksResponse, *, table: str = "") -> None:
    """One line per lock (a table would wrap job ids and intervals on a terminal)."""
    if not held.locks:
        console.print(f"no locks held on {table}" if table else "no locks held")
        return
    console.print(f"[bold]{len(held.locks)} lock(s)[/bold]" + (f" on {table}" if table else ""))
    for lock in held.locks:
        style = "red" if lock.revoked else "magenta"
        console.print(
            f"[{style}]{lock.table}[/{style}] {_interval(lock.interval)}: {lock_summary(lock)}",
            highlight=False,
        )


def print_queries(console: Console, queries: list[pb.QueryInfo]) -> None:
    """Running and recent queries, newest first: state, who, how long, where the time went."""
    if not queries:
        console.print("no queries running or recently finished")
        return
    view = Table(title="Queries (running first, then the most recent)")
    for column in ("query", "identity", "state", "status", "rows", "ms", "spark ms", "jobs", "sql"):
        view.add_column(column)
    for query in queries:
        jobs = str(query.spark_jobs_running) if query.HasField("spark_jobs_running") else ""
        view.add_row(
            query.query_id,
            query.identity,
            query.state,
            query.status,
            str(query.row_count),
            f"{query.timings.total_ms:.1f}",
            f"{query.timings.spark_ms:.1f}",
            jobs,
            (query.sql[:60] + "...") if len(query.sql) > 60 else query.sql,
        )
    console.print(view)


def print_timeline(console: Console, timeline: pb.GetTimelineResponse) -> None:
    view = Table(title=f"Timeline of {timeline.table} (generation {timeline.timeline_generation})")
    for column in ("time chunk", "version", "complete", "read", "group", "state", "segments"):
        view.add_column(column)
    view.add_column("locked")
    for chunk in timeline.chunks:
        held = "yes" if chunk_locks(timeline, chunk) else ""
        for index, group in enumerate(chunk.groups):
            state = STATE_NAMES.get(group.state, "?")
            view.add_row(
                _interval(chunk.interval) if index == 0 else "",
                chunk.version if index == 0 else "",
                (f"yes (core {chunk.core_partitions})" if chunk.complete else "no")
                if index == 0
                else "",
                ("yes" if chunk.queried else "no") if index == 0 else "",
                f"root [{group.root_start}, {group.root_end}) minor {group.minor_version}"
                + ("" if group.full else " (not full)"),
                f"[{STATE_STYLES[state]}]{state}[/]" if state in STATE_STYLES else state,
                ", ".join(str(segment.partition) for segment in group.segments),
                f"[magenta]{held}[/magenta]" if index == 0 and held else "",
            )
    console.print(view)
    for lock in timeline.locks:
        console.print(
            f"[magenta]locked[/magenta] {_interval(lock.interval)} by {lock_summary(lock)}",
            highlight=False,
        )
    for entry in timeline.unreadable:
        checked = (
            f", still unreadable at {format_instant(entry.checked_ms)}" if entry.checked_ms else ""
        )
        console.print(
            f"[red]unreadable[/red] segment {entry.segment.id} since "
            f"{format_instant(entry.since_ms)}{checked}: {entry.reason}",
            highlight=False,
        )
    if timeline.locks_error:
        console.print(f"[yellow]locks unknown:[/yellow] {timeline.locks_error}")


def print_watermarks(console: Console, marks: pb.GetWatermarksResponse) -> None:
    laggard = (
        f"server {marks.laggard.server} partition {marks.laggard.partition}"
        if marks.HasField("laggard")
        else "-"
    )
    console.print(
        f"[bold]{marks.table}[/bold]: LWM {_opt(marks, 'lwm')}, held back by {laggard}; "
        f"state staleness {marks.staleness_seconds:.1f}s"
        + ("; [red]queries blocked by the regression policy[/red]" if marks.queries_blocked else "")
    )
    view = Table(title="Partitions")
    for column in ("server", "partition", "ingested", "applied", "watermark", "live"):
        view.add_column(column)
    for row in marks.partitions:
        view.add_row(
            row.server,
            str(row.partition),
            str(row.ingested),
            str(row.applied),
            str(row.watermark),
            "yes" if row.live else "[red]no[/red]",
        )
    console.print(view)
    if marks.stale_servers:
        console.print("[yellow]stale servers:[/yellow] " + ", ".join(marks.stale_servers))
    for regression in marks.regressions:
        console.print(
            f"[red]regression[/red] server {regression.server} partition "
            f"{regression.partition}: {regression.from_watermark} -> {regression.to_watermark}"
        )
    if marks.pins_error:
        console.print(f"[yellow]pins unknown:[/yellow] {marks.pins_error}")
    if marks.pins:
        print_pins(console, marks.pins, title="Snapshot pins (retention stops at the oldest)")


def print_pins(console: Console, pins: Any, *, title: str = "Snapshot pins") -> None:
    view = Table(title=title)
    for column in ("pin", "snapshot", "tables", "owner", "lease left"):
        view.add_column(column)
    for pin in pins:
        view.add_row(
            pin.pin_id,
            str(pin.snapshot),
            ", ".join(pin.tables),
            pin.owner or "-",
            f"{pin.lease_left_seconds:.0f}s",
        )
    console.print(view)


# -- the timeline picture -------------------------------------------------------------------------

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
    width_total = max(x + 20, _LEFT + len(STATE_COLOURS) * 120 + 230)
    height = _TOP + max_root * _ROW_H + _BOTTOM
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
        label = (
            f"{_interval(chunk.interval)} v {chunk.version}"
            + ("" if chunk.complete else " (incomplete)")
            + (" (locked)" if held else "")
        )
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
