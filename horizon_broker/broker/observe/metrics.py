"""The broker's metrics registry and the families counted as work happens.

What the doors import (the status mapping counts every unary RPC; the query registry's
listener counts every finished query). Labels are bounded: RPC names, status codes, snapshot kinds, stages and
failure classes; never SQL text, keys or query ids. Everything else the broker exposes is read
when scraped (:mod:`horizon_broker.broker.observe.state_metrics`).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics

disable_created_metrics()  # counters' *_created series are noise to a dashboard
REGISTRY = CollectorRegistry(auto_describe=True)
"""The broker's metrics (an ingestion server's and a compactor's are their own)."""

LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
)  # fmt: skip
STAGES = ("queued", "rewrite", "views", "spark", "serialize")

RPC_REQUESTS = Counter(
    "horizon_rpc_requests",
    "gRPC calls answered, by method and status code",
    ["method", "code"],
    registry=REGISTRY,
)
RPC_SECONDS = Histogram(
    "horizon_rpc_duration_seconds",
    "Time to answer a gRPC call (a streamed query: until its last message)",
    ["method"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
QUERIES = Counter(
    "horizon_queries",
    "Queries ended, by the door they came through (ExecuteQuery, FlightSQL, console), how "
    "their snapshot was chosen (lwm, version, timestamp, changes, pin, none; unknown when they "
    "ended before being prepared) and status code",
    ["rpc", "kind", "code"],
    registry=REGISTRY,
)
QUERY_SECONDS = Histogram(
    "horizon_query_duration_seconds",
    "A finished query's time from arrival to its last row",
    ["rpc"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
QUERY_STAGE_SECONDS = Histogram(
    "horizon_query_stage_seconds",
    "Time finished queries spent per stage: queued for a slot, rewrite (with snapshot waits), "
    "views, Spark (to the first batches), serialize",
    ["stage"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
QUERY_ROWS = Counter(
    "horizon_query_rows", "Rows returned by finished queries", ["rpc"], registry=REGISTRY
)
QUERY_BYTES = Counter(
    "horizon_query_result_bytes",
    "Arrow IPC bytes returned by finished queries",
    ["rpc"],
    registry=REGISTRY,
)


def count_call(method: str, code: str, seconds: float) -> None:
    """One gRPC call answered (:func:`horizon_broker.broker.api.status.unary_errors`)."""
    RPC_REQUESTS.labels(method, code).inc()
    RPC_SECONDS.labels(method).observe(seconds)


def count_query(record: Any) -> None:
    """A finished query of the registry (:class:`horizon_broker.broker.engine.registry.QueryRecord`)."""
    rpc = record.rpc or "unknown"
    QUERIES.labels(rpc, record.kind or "unknown", record.status or "UNKNOWN").inc()
    timings = record.timings
    if timings:
        QUERY_SECONDS.labels(rpc).observe(timings.get("total", 0.0) / 1000)
        for stage in STAGES:
            if stage in timings:  # a Flight SQL answer's serialization is pyarrow's, unmeasured
                QUERY_STAGE_SECONDS.labels(stage).observe(timings[stage] / 1000)
    else:
        QUERY_SECONDS.labels(rpc).observe(max(0, record.ended_ms - record.started_ms) / 1000)
    QUERY_ROWS.labels(rpc).inc(record.rows)
    QUERY_BYTES.labels(rpc).inc(record.bytes)
