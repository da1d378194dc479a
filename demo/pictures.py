"""Terminal pictures of a timeline for the demo: time chunks by root partitions, coloured by
state, so a reader sees overwrites and compactions replace segments."""

from __future__ import annotations

import time
from typing import Any

from rich.table import Table
from rich.text import Text

from horizon_broker.broker.api.timeline_picture import chunk_locks


def timeline_picture(timeline: Any, state_names: dict[int, str], *, title: str = "") -> Table:
    """Time chunks (rows) x root partitions (columns), one block per root partition: green for a
    visible first-generation segment, cyan for a visible overwrite of one root partition (the
    updater's), magenta for a compacted segment covering several, yellow for standby; then the
    visible segments, the overshadowed groups kept under them, and the locks held on the chunk."""
    view = Table(
        "time chunk",
        "root partitions",
        "visible segments",
        "overshadowed",
        "locked by",
        title=title or "timeline picture",
    )
    for chunk in timeline.chunks:
        width = max([group.root_end for group in chunk.groups] + [1])
        cells = [Text(" ", style="dim")] * width
        hidden = visible = 0
        for group in chunk.groups:
            state = state_names.get(group.state, "standby")
            if state == "overshadowed":
                hidden += 1
                continue
            if state == "visible":
                visible += len(group.segments)
            if state == "standby":
                style = "yellow"
            elif group.root_end - group.root_start > 1:
                style = "magenta"
            else:
                style = "cyan" if group.minor_version else "green"
            for root in range(group.root_start, group.root_end):
                cells[root] = Text("█", style=style)
        holders = sorted({lock.job for lock in chunk_locks(timeline, chunk)})
        view.add_row(
            day(chunk.interval.start_ms),
            Text.assemble(*cells),
            str(visible),
            str(hidden),
            ", ".join(holders),
        )
    view.caption = (
        "[green]█[/] first generation  [cyan]█[/] overwrite (updated)  "
        "[magenta]█[/] compacted  [yellow]█[/] standby"
    )
    return view


def day(epoch_ms: int) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(epoch_ms / 1000))
