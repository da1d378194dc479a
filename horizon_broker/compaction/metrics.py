"""A compactor's Prometheus metrics (``horizon compact --watch --metrics-listen``).

Counted per run from its :class:`horizon_broker.compaction.run.CompactionReport` and per history reclaim;
labelled by table and outcome only. Rows/s and bytes reclaimed are rates of these counters.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from horizon_broker.locks.stats import LockCollector

RUN_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)


class CompactionMetrics:
    """The families of one compactor process."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(LockCollector())
        r = self.registry
        self.runs = Counter(
            "horizon_compaction_runs",
            "Compaction runs ended, by outcome (published, nothing to do, revoked)",
            ["table", "outcome"],
            registry=r,
        )
        self.rows = Counter(
            "horizon_compaction_rows", "Rows read and written", ["table", "direction"], registry=r
        )
        self.bytes = Counter(
            "horizon_compaction_bytes", "Bytes read and written", ["table", "direction"], registry=r
        )
        self.segments = Counter(
            "horizon_compaction_segments",
            "Segments replaced (in) and announced (out)",
            ["table", "direction"],
            registry=r,
        )
        self.seconds = Histogram(
            "horizon_compaction_run_seconds",
            "Time of one run",
            ["table"],
            buckets=RUN_BUCKETS,
            registry=r,
        )
        self.reclaimed_rows = Counter(
            "horizon_compaction_reclaimed_rows",
            "Row versions below the retention horizon removed from history",
            ["table"],
            registry=r,
        )
        self.reclaimed_bytes = Counter(
            "horizon_compaction_reclaimed_bytes",
            "Bytes freed by deleting replaced segments' files",
            ["table"],
            registry=r,
        )

    def observe_run(self, table: str, report: Any) -> None:
        """A run ended (a :class:`horizon_broker.compaction.run.CompactionReport`)."""
        self.runs.labels(table, report.outcome).inc()
        for direction, rows, size, segments in (
            ("in", report.rows_in, report.bytes_in, len(report.inputs)),
            ("out", report.rows_out, report.bytes_out, len(report.outputs)),
        ):
            self.rows.labels(table, direction).inc(rows)
            self.bytes.labels(table, direction).inc(size)
            self.segments.labels(table, direction).inc(segments)
        self.seconds.labels(table).observe(report.seconds)

    def observe_reclaim(self, table: str, rows: int) -> None:
        self.reclaimed_rows.labels(table).inc(rows)

    def observe_collected(self, table: str, bytes_freed: int) -> None:
        self.reclaimed_bytes.labels(table).inc(bytes_freed)
