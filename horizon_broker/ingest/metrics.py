"""An ingestion server's Prometheus metrics, on a port of its own (``--metrics-listen``).

Counted per batch as :func:`observe_batch` hears of it (the CLI calls it after every batch, in
directory and streaming modes); labelled by table only, so a server's series are few and bounded.
The endpoint is :class:`horizon_broker._core.metrics_endpoint.MetricsEndpoint` over this registry alone.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from horizon_broker._core.hlc import hlc_physical_ms
from horizon_broker.locks.stats import LockCollector

BATCH_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class IngestMetrics:
    """The families of one ingestion process."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(LockCollector())
        r = self.registry
        self.batches = Counter(
            "horizon_ingest_batches",
            "Batches ended, by outcome (committed, or skipped: nothing new to write)",
            ["table", "outcome"],
            registry=r,
        )
        self.rows = Counter("horizon_ingest_rows", "Changelog rows ingested", ["table"], registry=r)
        self.segments = Counter(
            "horizon_ingest_segments_written", "Segments announced", ["table"], registry=r
        )
        self.updated = Counter(
            "horizon_ingest_segments_updated",
            "Existing segments rewritten to close replaced row versions (the updater)",
            ["table"],
            registry=r,
        )
        self.seconds = Histogram(
            "horizon_ingest_batch_seconds",
            "Time of one batch, from its start to its announcement",
            ["table"],
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.stage_seconds = Histogram(
            "horizon_ingest_stage_seconds",
            "Time of each Spark action of a batch (read and count, resolve, summarize "
            "resolution, write segments, updater targets, updater rewrite)",
            ["table", "stage"],
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.event_to_announced = Histogram(
            "horizon_ingest_event_to_announced_seconds",
            "From a batch's oldest event time (the table's time_column) to the batch's "
            "announcement, updates applied (tables with a time column, any source)",
            ["table"],
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.arrival_to_announced = Histogram(
            "horizon_ingest_arrival_to_announced_seconds",
            "From a changelog file's arrival (its modification time) to the announcement of the "
            "batch that ingested it, updates applied (directory sources; the broker follows an "
            "announcement within milliseconds)",
            ["table"],
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.dead_letters = Counter(
            "horizon_ingest_dead_letters",
            "Malformed change events dead-lettered (format debezium: not JSON, no or an unknown "
            "op, no row image, a key column missing, a value of the wrong type)",
            ["table"],
            registry=r,
        )
        self.updater_backlog = Gauge(
            "horizon_ingest_updater_backlog",
            "Batches whose validUntil updates are not applied yet (their tables' LWM waits "
            "for them)",
            ["table"],
            registry=r,
        )
        self.stream_lag_events = Gauge(
            "horizon_ingest_stream_lag_events",
            "Entries of a stream table's Redis stream not ingested yet, after its last batch",
            ["table"],
            registry=r,
        )
        self.stream_lag_seconds = Gauge(
            "horizon_ingest_stream_lag_seconds",
            "How long the oldest entry not ingested yet has waited in a stream table's Redis "
            "stream (0: caught up), after its last batch",
            ["table"],
            registry=r,
        )
        self.stream_trimmed = Counter(
            "horizon_ingest_stream_trimmed",
            "Passes of a stream table that found entries trimmed or deleted from its Redis "
            "stream before the table read them (on_stream_trimmed: stop fails the pass, skip "
            "reads on)",
            ["table"],
            registry=r,
        )
        self.high = Gauge(
            "horizon_ingest_high_seconds",
            "The newest commit time announced, as Unix time (lag: time() minus this)",
            ["table"],
            registry=r,
        )

    def observe_batch(self, table: str, result: Any, seconds: float | None = None) -> None:
        """One batch ended (an :class:`horizon_broker.ingest.job.BatchResult`, which times itself; ``seconds``
        overrides its time)."""
        self.batches.labels(table, "skipped" if result.skipped else "committed").inc()
        self.rows.labels(table).inc(result.rows)
        self.segments.labels(table).inc(len(result.segments))
        self.updated.labels(table).inc(result.updated_segments)
        self.dead_letters.labels(table).inc(getattr(result, "dead_letters", 0))
        took = seconds if seconds is not None else getattr(result, "seconds", None)
        if took is not None:
            self.seconds.labels(table).observe(took)
        for stage, stage_seconds in getattr(result, "stage_seconds", ()):
            self.stage_seconds.labels(table, stage).observe(stage_seconds)
        if not result.skipped:
            self.updater_backlog.labels(table).set(getattr(result, "pending_updates", 0))
        waited = getattr(result, "arrival_to_announced_s", None)
        if waited is not None:
            self.arrival_to_announced.labels(table).observe(max(0.0, waited))
        since_event = getattr(result, "event_to_announced_s", None)
        if since_event is not None:
            self.event_to_announced.labels(table).observe(max(0.0, since_event))
        self.stream_trimmed.labels(table).inc(getattr(result, "stream_trimmed", 0))
        behind = getattr(result, "stream_lag_events", None)
        if behind is not None:
            self.stream_lag_events.labels(table).set(behind)
            self.stream_lag_seconds.labels(table).set(getattr(result, "stream_lag_s", 0.0) or 0.0)
        if result.high:
            self.high.labels(table).set(hlc_physical_ms(result.high) / 1000)

    def observe_failure(self, table: str, error: BaseException) -> None:
        """A table's pass failed: a gap in its stream that stopped it is counted."""
        from horizon_broker.ingest.redis_stream_trim import StreamTrimmed

        if isinstance(error, StreamTrimmed):
            self.stream_trimmed.labels(table).inc()
