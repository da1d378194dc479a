"""Terminal and picture output of the CLI: rich tables, JSON, and an SVG timeline picture."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from google.protobuf.json_format import MessageToDict
from rich.console import Console
from rich.table import Table

from horizon_broker._core.hlc import format_snapshot
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker.api.timeline_picture import (
    STATE_NAMES,
    chunk_locks,
    interval_text,
    lock_summary,
)
from horizon_broker.timeline.interval import format_instant

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


def _opt(message: Any, name: str) -> str:
    return str(getattr(message, name)) if message.HasField(name) else "-"


def _snapshot(message: Any, name: str) -> str:
    """An optional snapshot field as people read it (the integer stays in ``--json``)."""
    return format_snapshot(getattr(message, name)) if message.HasField(name) else "-"


def _hlc(value: int) -> str:
    """A commit timestamp or watermark as time; 0 means none yet."""
    return format_snapshot(value) if value else "-"


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
        f"[dim]{result.table.num_rows} row(s) at snapshot {_snapshot(metadata, 'snapshot')} "
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


def subscription_json(message: Any) -> dict[str, Any]:
    """One Subscribe message (:class:`~horizon_broker.broker.subscribe.live.SubscriptionMessage`)
    as JSON: its kind, snapshots, strategy, key, rows and resume token."""
    return {
        "kind": message.kind,
        "strategy": message.strategy,
        "from_snapshot": message.from_snapshot,
        "to_snapshot": message.to_snapshot,
        "key": list(message.key),
        "rows": message.rows.to_pylist(),
        "resume_token": message.resume_token,
        "last_part": message.last_part,
    }


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
        f"\n[bold]Snapshot[/bold] {_snapshot(metadata, 'snapshot')}: {metadata.snapshot_reason}"
    )
    for table in explain.tables:
        read = table.read
        view = Table(
            title=f"{read.table} (view {read.view}, generation {read.timeline_generation}, "
            f"LWM {_snapshot(read, 'lwm')})",
            show_lines=True,
        )
        view.add_column("segment")
        view.add_column("files")
        view.add_column("rows", justify="right")
        view.add_column("why")
        for chosen in table.segments:
            segment = chosen.segment
            view.add_row(
                f"{interval_text(segment.interval)}\nv {segment.version} p {segment.partition}",
                "\n".join(segment.location),
                str(segment.row_count),
                chosen.reason,
            )
        console.print(view)
    if explain.subscribe_strategy_reason:
        console.print(
            f"[bold]Subscription strategy[/bold] {explain.subscribe_strategy_reason}",
            highlight=False,
        )
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
            _snapshot(table, "lwm"),
            str(table.timeline_generation),
            str(table.visible_segments),
        )
    console.print(view)


def print_locks(console: Console, held: pb.ListLocksResponse, *, table: str = "") -> None:
    """One line per lock (a table would wrap job ids and intervals on a terminal)."""
    if not held.locks:
        console.print(f"no locks held on {table}" if table else "no locks held")
        return
    console.print(f"[bold]{len(held.locks)} lock(s)[/bold]" + (f" on {table}" if table else ""))
    for lock in held.locks:
        style = "red" if lock.revoked else "magenta"
        console.print(
            f"[{style}]{lock.table}[/{style}] {interval_text(lock.interval)}: {lock_summary(lock)}",
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
                interval_text(chunk.interval) if index == 0 else "",
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
            f"[magenta]locked[/magenta] {interval_text(lock.interval)} by {lock_summary(lock)}",
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


PARTITION_STATE_NAMES = {
    pb.PARTITION_STATE_ACTIVE: "active",
    pb.PARTITION_STATE_IDLE: "[green]idle[/green]",
    pb.PARTITION_STATE_PARKED: "[cyan]parked[/cyan]",
}


def print_watermarks(console: Console, marks: pb.GetWatermarksResponse) -> None:
    laggard = (
        f"server {marks.laggard.server} partition {marks.laggard.partition}"
        + (
            f" ({PARTITION_STATE_NAMES[marks.laggard.state]})"
            if marks.laggard.state in (pb.PARTITION_STATE_IDLE, pb.PARTITION_STATE_PARKED)
            else ""
        )
        if marks.HasField("laggard")
        else "-"
    )
    console.print(
        f"[bold]{marks.table}[/bold]: LWM {_snapshot(marks, 'lwm')}, held back by {laggard}; "
        f"state staleness {marks.staleness_seconds:.1f}s"
        + ("; [red]queries blocked by the regression policy[/red]" if marks.queries_blocked else "")
    )
    view = Table(title="Partitions")
    for column in ("server", "partition", "ingested", "applied", "watermark", "state", "live"):
        view.add_column(column)
    for row in marks.partitions:
        state = PARTITION_STATE_NAMES.get(row.state, "-")
        if row.state_since_ms:
            state += f" since {format_instant(row.state_since_ms)}"
        view.add_row(
            row.server,
            str(row.partition),
            _hlc(row.ingested),
            _hlc(row.applied),
            _hlc(row.watermark),
            state,
            "yes"
            if row.live
            else ("-" if row.state == pb.PARTITION_STATE_PARKED else "[red]no[/red]"),
        )
    console.print(view)
    servers = [s for s in marks.servers if s.server]
    if servers:
        console.print(
            "servers: "
            + ", ".join(
                f"{s.server} {s.status or ('live' if s.live else 'stale')}" for s in servers
            )
            + (
                f"; idle partitions follow their server's clock, parked ones the state store's "
                f"({format_instant(marks.store_clock_ms)})"
                if marks.store_clock_ms
                else ""
            ),
            highlight=False,
        )
    if marks.stale_servers:
        console.print("[yellow]stale servers:[/yellow] " + ", ".join(marks.stale_servers))
    for regression in marks.regressions:
        console.print(
            f"[red]regression[/red] server {regression.server} partition "
            f"{regression.partition}: {_hlc(regression.from_watermark)} -> "
            f"{_hlc(regression.to_watermark)}"
        )
    if marks.pins_error:
        console.print(f"[yellow]pins unknown:[/yellow] {marks.pins_error}")
    if marks.pins:
        print_pins(console, marks.pins, title="Snapshot pins (retention stops at the oldest)")


def print_pins(console: Console, pins: Any, *, title: str = "Snapshot pins") -> None:
    view = Table(title=title)
    # A pin id is what the reader copies: never cut short, whatever the terminal's width.
    view.add_column(
        "pin", no_wrap=True, min_width=max((len(pin.pin_id) for pin in pins), default=3)
    )
    view.add_column("snapshot", no_wrap=True)
    for column in ("tables", "owner", "lease left"):
        view.add_column(column, overflow="fold")
    for pin in pins:
        view.add_row(
            pin.pin_id,
            _hlc(pin.snapshot),
            ", ".join(pin.tables),
            pin.owner or "-",
            f"{pin.lease_left_seconds:.0f}s",
        )
    console.print(view)


# -- the timeline picture -------------------------------------------------------------------------


KEY_REASON_NAMES = {
    value: name.removeprefix("KEY_VERSION_REASON_").lower().replace("_", " ")
    for name, value in pb.KeyVersionReason.items()
}


def print_key_explanation(console: Console, answer: pb.ExplainKeyResponse) -> None:
    """``horizon why``: the snapshot, every stored version of the key and why it is (not) read."""
    holder = (
        f"; held back by server {answer.holder.server} partition {answer.holder.partition}"
        if answer.HasField("holder")
        else ""
    )
    lwm = str(answer.lwm) if answer.HasField("lwm") else "none"
    console.print(
        f"[bold]{answer.table}[/bold] key {answer.key_json}\n  snapshot {answer.snapshot} "
        f"({answer.snapshot_reason})\n  LWM {lwm}{holder}; retention horizon "
        f"{answer.retention_horizon}\n{len(answer.versions)} stored copies of its versions, "
        "newest first:",
        highlight=False,
        soft_wrap=True,
    )
    for version in answer.versions:
        verdict = KEY_REASON_NAMES.get(version.reason, "?")
        shown = f"[green]{verdict}[/green]" if verdict == "visible" else f"[bold]{verdict}[/bold]"
        console.print(
            f"\n{shown}  validFrom {version.valid_from}  validUntil "
            f"{_opt(version, 'valid_until')}\n  row      {version.row_json}\n  segment  "
            f"{version.segment_id} ({version.segment_state})\n  group    {version.group}\n"
            f"  why      {version.detail}",
            highlight=False,
            soft_wrap=True,
        )
    console.print()
    for lost in answer.not_listed:
        console.print(f"[red]not listed[/red]: segment {lost.segment.id}: {lost.reason}")
    console.print(answer.summary, highlight=False)
