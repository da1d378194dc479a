"""What the follower hands its readers: a table as a query sees it, and a table's watermark
breakdown (immutable values, taken atomically under the follower's lock)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.catalog import TableDescriptor
from horizon_broker.watermark.lwm import Laggard, PartitionWatermark, Regression
from horizon_broker.watermark.state import Fallback


@dataclass(frozen=True, slots=True)
class TableState:
    """One table as a query sees it, taken atomically: segments to read and the snapshot LWM."""

    table: str
    descriptor: TableDescriptor
    generation: int
    visible_segments: tuple[Segment, ...]
    lwm: int | None
    retention_horizon: int
    staleness_s: float
    laggard: Laggard | None
    fallbacks: tuple[Fallback, ...] = ()
    """Segments this broker keeps out as unreadable, with what their chunks read instead."""
    held_segments: int = 0
    """Served segments the store lost, held until it has them again (failover contract F5)."""


@dataclass(frozen=True, slots=True)
class WatermarkReport:
    """A table's served LWM with its full breakdown, for the watermark endpoint."""

    table: str
    lwm: int | None
    computed: int | None
    laggard: Laggard | None
    partitions: tuple[PartitionWatermark, ...]
    stale_servers: tuple[str, ...]
    regressions: tuple[Regression, ...]
    active_regression: Regression | None
    retention_horizon: int
    staleness_s: float
    server_clocks: Mapping[str, int] = field(default_factory=dict)
    """Each owner's clock at its last heartbeat (what its idle partitions follow)."""
    server_status: Mapping[str, str] = field(default_factory=dict)
    """Each owner's status: ``live``, ``parked`` or ``decommissioned``."""
    store_ms: int = 0
    """The state store's clock as this broker knows it (what parked partitions follow)."""
    held_segments: int = 0
    """Served segments the store lost, held until it has them again (failover contract F5)."""
