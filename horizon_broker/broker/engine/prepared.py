"""A query bound to one view of each table it reads, and how its snapshot was chosen."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from horizon_broker._core.errors import Internal
from horizon_broker.broker.spark.scan_layout import ScanLayout, ScanPart, segment_files
from horizon_broker.broker.spark.views import schema_ddl
from horizon_broker.broker.sql.model import QueryPlan, RewriteResult
from horizon_broker.pins.rules import Pin
from horizon_broker.watermark import tokens

SNAPSHOT_LWM = "lwm"
SNAPSHOT_VERSION = "version"
SNAPSHOT_TIMESTAMP = "timestamp"
SNAPSHOT_CHANGES = "changes"
SNAPSHOT_NONE = "none"
SNAPSHOT_PIN = "pin"


@dataclass(frozen=True, slots=True)
class TableReadInfo:
    """What one table of a query reads (the metadata a client sees).

    ``segments``/``files`` are all the table's visible segments; ``layout`` says which temp view
    reads which of their files (one part, or up to four, see ``horizon_broker.broker.spark.scan_layout``), and
    ``view`` is the main one (the first part).
    """

    table: str
    snapshot: int | None
    generation: int
    lwm: int | None
    retention_horizon: int
    view: str
    segments: tuple[Any, ...]
    files: tuple[str, ...]
    schema_ddl: str
    staleness_s: float
    laggard: Any
    change_windows: tuple[tuple[int, int], ...] = ()
    layout: ScanLayout | None = None
    held_segments: int = 0
    """Served segments the store lost and the broker holds (failover contract F5, F6)."""

    @property
    def parts(self) -> tuple[ScanPart, ...]:
        return self.layout.parts if self.layout is not None else ()

    def files_visible_at(self, snapshot: int) -> tuple[str, ...]:
        """:func:`files_visible_at` of this read's files."""
        return files_visible_at(self.files, self.layout, snapshot)


def files_visible_at(
    files: tuple[str, ...], layout: ScanLayout | None, snapshot: int
) -> tuple[str, ...]:
    """The ``files`` (a table view's, in segment order) that can hold a row visible at
    ``snapshot``: all but the closed part's once ``snapshot`` is at or above their greatest
    ``validUntil`` (the rule that leaves the closed view unread, ``horizon_broker.broker.spark.scan_layout``).
    A key lookup at the LWM then never reads a closed file's footer: the updater leaves a
    segment up to four closed files, and each rewrite of it names them anew."""
    if layout is None or layout.closed is None or layout.closed_through is None:
        return files
    if snapshot < layout.closed_through:
        return files
    closed = layout.closed
    return tuple(path for part in layout.parts if part is not closed for path in part.files)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A rewritten query bound to one view of each table it reads."""

    query_id: str
    original_sql: str
    rewrite: RewriteResult
    tables: tuple[TableReadInfo, ...]
    table_views: tuple[Any, ...]
    staleness_s: float
    rewrite_s: float
    pin: Pin | None = None
    """The snapshot pin the query reads at (its default snapshot), if any."""
    waited_s: float = 0.0
    """Time spent waiting for a table's LWM to reach ``min_snapshot`` or the broker's floor."""
    identity: str = ""
    """Who prepared it: Spark work done for it (a plan, a schema) counts in that share."""

    @property
    def sql(self) -> str:
        """The rewritten SQL as shown to clients (Explain, passthrough)."""
        return self.rewrite.sql

    @property
    def run_sql(self) -> str:
        """The SQL the broker runs: :attr:`sql` with the row cap planned as a ``LIMIT``."""
        return self.rewrite.run_sql

    @property
    def view_names(self) -> tuple[str, ...]:
        """Every segment view the query reads."""
        return tuple(part.name for table in self.tables for part in table.parts)

    @property
    def plan(self) -> QueryPlan:
        return self.rewrite.plan

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(path for table in self.tables for path in table.files)

    @property
    def snapshot_source(self) -> str:
        source = snapshot_source(self.plan)
        return SNAPSHOT_PIN if self.pin is not None and source == SNAPSHOT_LWM else source

    @property
    def snapshot_reason(self) -> str:
        if self.snapshot_source == SNAPSHOT_PIN and self.pin is not None:
            return (
                f"snapshot pin {self.pin.pin_id}: {self.pin.snapshot} for "
                f"{', '.join(self.pin.tables)}"
            )
        return snapshot_reason(self.plan, self.tables)

    @property
    def snapshot_token(self) -> str:
        """The token of what this query reads (:mod:`horizon_broker.watermark.tokens`): a client sending it
        back is never served an older default snapshot of these tables (monotonic reads)."""
        seen: dict[str, int] = {}
        for table in self.tables:
            ends = [hi for _, hi in table.change_windows]
            ends += [table.snapshot] if table.snapshot is not None else []
            if ends:
                seen[table.table] = max(ends)
        return tokens.encode(seen)


def snapshot_source(plan: QueryPlan) -> str:
    source = (plan.snapshot_source or "").upper()
    if "VERSION" in source:
        return SNAPSHOT_VERSION
    if "TIMESTAMP" in source:
        return SNAPSHOT_TIMESTAMP
    if plan.snapshot is not None:
        return SNAPSHOT_LWM
    if plan.change_feed:
        return SNAPSHOT_CHANGES
    return SNAPSHOT_NONE


def snapshot_reason(plan: QueryPlan, tables: Sequence[TableReadInfo]) -> str:
    """A sentence saying how the snapshot was chosen, with the LWMs it was chosen from."""
    kind = snapshot_source(plan)
    lwms = ", ".join(f"{t.table}={t.lwm}" for t in tables if t.snapshot is not None)
    if kind == SNAPSHOT_LWM:
        return f"no snapshot clause: the lowest low-watermark of the tables read ({lwms})"
    if kind == SNAPSHOT_VERSION:
        return f"VERSION AS OF {plan.snapshot} (current low-watermarks: {lwms})"
    if kind == SNAPSHOT_TIMESTAMP:
        return (
            f"TIMESTAMP AS OF: the last HLC of that millisecond, {plan.snapshot} "
            f"(current low-watermarks: {lwms})"
        )
    if kind == SNAPSHOT_CHANGES:
        windows = "; ".join(
            f"{t.table} ({lo}, {hi}]" for t in tables for lo, hi in t.change_windows
        )
        return f"table_changes windows: {windows}"
    return "the query reads no upsert table at a snapshot"


def read_info(
    read: Any, view: Any, layout: ScanLayout, files: tuple[str, ...] | None = None
) -> TableReadInfo:
    """What ``read`` of ``view`` reads; ``files``: the view's segment files when the caller has
    them (the catalog entry keeps them per timeline generation), else listed here."""
    segments = tuple(view.visible_segments)
    if read.views and tuple(read.views) != layout.names:
        raise Internal(
            f"table {view.table}: the rewrite reads views {', '.join(read.views)} but the "
            f"segment layout has {', '.join(layout.names)}"
        )
    return TableReadInfo(
        table=view.table,
        snapshot=read.snapshot,
        generation=int(view.generation),
        lwm=view.lwm,
        retention_horizon=int(view.retention_horizon or 0),
        view=read.source_view,
        segments=segments,
        files=files if files is not None else segment_files(segments),
        schema_ddl=schema_ddl(view.descriptor),
        staleness_s=float(view.staleness_s),
        laggard=view.laggard,
        change_windows=tuple(read.change_windows),
        layout=layout,
        held_segments=int(getattr(view, "held_segments", 0)),
    )
