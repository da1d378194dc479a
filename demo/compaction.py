"""The demo's compaction step: a minor compaction of the accounts table while queries run.

Readers keep querying pinned snapshots (the current LWM and an older one) through the gRPC
broker while the compactor locks, merges and publishes; every answer, during and after, must be
the one read before the compaction started. The timeline pictures before and after show the
many small segments of each day replaced by compacted ones (and the locks held meanwhile).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from demo.pictures import timeline_picture
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb

SNAPSHOT_SQL = (
    "SELECT COUNT(*) AS accounts, SUM(balance) AS total, "
    "SUM(balance * (account_id % 9973 + 1)) AS checksum FROM accounts VERSION AS OF {snapshot}"
)
Check = Callable[[str, bool, str], None]


@dataclass
class _Readers:
    """Threads querying pinned snapshots until told to stop; what they saw."""

    client: Any
    expected: dict[int, dict[str, Any]]
    answers: int = 0
    mismatches: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock_holders: set[str] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            for snapshot, expected in self.expected.items():
                try:
                    got = self.client.query(SNAPSHOT_SQL.format(snapshot=snapshot)).to_pylist()[0]
                    self.lock_holders |= {lock.job for lock in self.client.locks("accounts").locks}
                except Exception as error:
                    self.errors.append(f"{type(error).__name__}: {error}")
                    continue
                self.answers += 1
                if got != expected:
                    self.mismatches.append(f"at {snapshot}: {got} instead of {expected}")


def compaction_while_querying(
    *,
    spark: Any,
    client: Any,
    redis_url: str,
    table: Any,
    snapshots: list[int],
    console: Console,
    check: Check,
    picture: Path,
) -> None:
    """Compact ``table`` (every day with at least two visible segments) while readers query the
    given snapshots; record the checks."""
    from horizon_broker.broker.api.timeline_picture import STATE_NAMES, timeline_svg
    from horizon_broker.compaction.plan import CompactionSettings
    from horizon_broker.compaction.run import Compactor
    from horizon_broker.watermark.server import ServerClient

    before = client.timeline("accounts", include_overshadowed=True)
    console.print(timeline_picture(before, STATE_NAMES, title="before compaction"))
    expected = {
        snapshot: client.query(SNAPSHOT_SQL.format(snapshot=snapshot)).to_pylist()[0]
        for snapshot in snapshots
    }
    readers = _Readers(client, expected)
    thread = threading.Thread(target=readers.run, name="demo-readers", daemon=True)
    compactor_client = ServerClient(redis_url, "demo-compactor")
    try:
        compactor = Compactor(
            spark,
            table,
            compactor_client,
            settings=CompactionSettings(min_segments=2),
            progress=lambda message: console.print(f"  [dim]{message}[/dim]"),
        )
        thread.start()
        started = time.perf_counter()
        report = compactor.compact()
        seconds = time.perf_counter() - started
        outputs = {str(segment.id) for segment in report.outputs}
        _wait_until_visible(client, outputs)
        time.sleep(0.5)  # a few more reads against the compacted timeline
    finally:
        readers.stop.set()
        thread.join(timeout=60)
        compactor_client.close()
    after = client.timeline("accounts", include_overshadowed=True)
    console.print(timeline_picture(after, STATE_NAMES, title="after compaction"))
    picture.write_text(timeline_svg(after))
    console.print(f"  picture after compaction written to {picture}")
    _print_report(console, report, seconds, readers)

    segments_before = _visible_segments(before)
    segments_after = _visible_segments(after)
    check(
        "compaction published while queries ran",
        report.outcome == "published" and segments_after < segments_before,
        f"{len(report.inputs)} segments -> {len(report.outputs)} in {seconds:.1f} s; visible "
        f"segments {segments_before} -> {segments_after}",
    )
    final = {
        snapshot: client.query(SNAPSHOT_SQL.format(snapshot=snapshot)).to_pylist()[0]
        for snapshot in snapshots
    }
    check(
        "answers at pinned snapshots did not change during or after compaction",
        not readers.mismatches and not readers.errors and readers.answers > 0 and final == expected,
        f"{readers.answers} answers at {len(snapshots)} snapshots while compacting, "
        f"{len(readers.mismatches)} different, {len(readers.errors)} errors"
        + (
            f" (first: {(readers.mismatches + readers.errors)[0]})"
            if readers.mismatches or readers.errors
            else ""
        ),
    )


def _wait_until_visible(client: Any, segment_ids: set[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        timeline = client.timeline("accounts")
        visible = {
            segment.id
            for chunk in timeline.chunks
            for group in chunk.groups
            if group.state == pb.GROUP_STATE_VISIBLE
            for segment in group.segments
        }
        if segment_ids <= visible:
            return
        time.sleep(0.1)


def _visible_segments(timeline: Any) -> int:
    return sum(
        len(group.segments)
        for chunk in timeline.chunks
        for group in chunk.groups
        if group.state == pb.GROUP_STATE_VISIBLE
    )


def _print_report(console: Console, report: Any, seconds: float, readers: _Readers) -> None:
    view = Table("compaction", "value", title="what the compaction did")
    view.add_row("outcome", report.outcome)
    view.add_row("segments", f"{len(report.inputs)} -> {len(report.outputs)}")
    view.add_row("rows", f"{report.rows_in:,} -> {report.rows_out:,}")
    view.add_row("bytes", f"{report.bytes_in:,} -> {report.bytes_out:,}")
    view.add_row("seconds", f"{seconds:.1f}")
    view.add_row("queries answered meanwhile", f"{readers.answers:,}")
    view.add_row("lock holders seen by the readers", ", ".join(sorted(readers.lock_holders)) or "-")
    console.print(view)
