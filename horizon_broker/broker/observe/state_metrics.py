"""The broker's state as metrics, read when Prometheus scrapes (nothing is counted twice).

Admission, the result cache, the follower's tables and watermarks, live pins and the Spark
supervisor already keep what an operator watches; this collector turns each scrape into one pass
over them. Per-table families carry the table name (bounded by the registered tables); the
laggard's server and partition are the only other labels, one series per table.

It imports none of what it reads (the engine, the follower, the pin store and the supervisor are
taken as they are), so the query path never depends on it.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from horizon_broker._core.errors import HorizonError
from horizon_broker._core.hlc import hlc_physical_ms
from horizon_broker._core.redis_sentinel import STATS as REPLICATION

log = logging.getLogger(__name__)

SEGMENT_STATES = ("visible", "standby", "overshadowed", "unreadable")


@dataclass
class BrokerParts:
    """What a broker's metrics are read from; the engine, supervisor and pin store are looked
    up at each scrape (the broker builds them after the follower, and may replace them)."""

    follower: Any
    engine: Callable[[], Any]
    supervisor: Callable[[], Any]
    pins: Callable[[], Any]
    wall_clock: Callable[[], float] = time.time


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, value=value)


def _counter(name: str, text: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, text, value=value)


class BrokerStateCollector(Collector):
    """One scrape: admission, cache, follower, per-table timeline and watermark state, pins,
    Spark. A part that cannot be read (pins while Redis is down) is left out of that scrape."""

    def __init__(self, parts: BrokerParts) -> None:
        self.parts = parts

    def describe(self) -> list[Metric]:
        return []  # registered without a trial scrape

    def collect(self) -> Iterator[Metric]:
        engine = self.parts.engine()
        if engine is not None:
            yield from _admission(engine)
            yield from _cache(engine.cache)
        yield from _follower(self.parts.follower)
        yield from self._tables()
        yield from _spark(self.parts.supervisor())

    def _tables(self) -> Iterator[Metric]:
        follower = self.parts.follower
        now_ms = int(self.parts.wall_clock() * 1000)
        lwm = GaugeMetricFamily(
            "horizon_table_lwm_seconds",
            "The low-watermark the broker serves, as Unix time (its HLC's physical part)",
            labels=["table"],
        )
        lag = GaugeMetricFamily(
            "horizon_table_lwm_lag_seconds",
            "How far the served low-watermark is behind the wall clock",
            labels=["table"],
        )
        laggard = GaugeMetricFamily(
            "horizon_table_laggard_lag_seconds",
            "The partition holding the table's low-watermark back, and its lag (-1: owned but "
            "not reported yet)",
            labels=["table", "server", "partition"],
        )
        stale = GaugeMetricFamily(
            "horizon_table_stale_servers",
            "Ingestion servers of the table whose heartbeat is overdue",
            labels=["table"],
        )
        regression = GaugeMetricFamily(
            "horizon_table_lwm_regression_active",
            "1 while a server reports an older position than the low-watermark served",
            labels=["table"],
        )
        generation = GaugeMetricFamily(
            "horizon_table_timeline_generation",
            "Bumped by every change to the table's timeline",
            labels=["table"],
        )
        segments = GaugeMetricFamily(
            "horizon_table_segments",
            "Announced segments by state: visible, standby (not yet complete), overshadowed, "
            "unreadable (kept out by this broker)",
            labels=["table", "state"],
        )
        unreadable = Counter(segment.table for segment, _ in follower.unreadable())
        tables = follower.tables()
        for table in tables:
            try:
                report = follower.watermarks(table)
                snapshot = follower.timeline_snapshot(table)
            except HorizonError:  # dropped between listing and reading
                continue
            if report.lwm is not None:
                physical = hlc_physical_ms(report.lwm)
                lwm.add_metric([table], physical / 1000)
                lag.add_metric([table], max(0, now_ms - physical) / 1000)
            if report.laggard is not None:
                held = report.laggard.lwm
                behind = -1.0 if held is None else max(0, now_ms - hlc_physical_ms(held)) / 1000
                laggard.add_metric(
                    [table, report.laggard.server, str(report.laggard.partition)], behind
                )
            stale.add_metric([table], len(report.stale_servers))
            regression.add_metric([table], 1 if report.active_regression is not None else 0)
            generation.add_metric([table], snapshot.generation)
            counts = Counter(
                group.state for chunk in snapshot.chunks for group in chunk.groups
                for _ in group.segments
            )  # fmt: skip
            counts["unreadable"] = unreadable[table]
            for state in SEGMENT_STATES:
                segments.add_metric([table, state], counts[state])
        yield from (lwm, lag, laggard, stale, regression, generation, segments)
        yield from self._pins(tables)

    def _pins(self, tables: list[str]) -> Iterator[Metric]:
        store = self.parts.pins()
        if store is None or not tables:
            return
        try:
            now_ms, pins = store.listing(tables)
        except HorizonError as error:
            log.debug("pins left out of this scrape: %s", error)
            return
        held = GaugeMetricFamily(
            "horizon_table_pins", "Live snapshot pins holding the table", labels=["table"]
        )
        oldest = GaugeMetricFamily(
            "horizon_table_oldest_pin_age_seconds",
            "Age of the oldest live pin of the table (0: none)",
            labels=["table"],
        )
        per_table: dict[str, list[int]] = {table: [] for table in tables}
        for pin in pins:
            for table in pin.tables:
                per_table.setdefault(table, []).append(pin.created_ms)
        for table, created in per_table.items():
            held.add_metric([table], len(created))
            oldest.add_metric([table], max(0, now_ms - min(created)) / 1000 if created else 0.0)
        yield held
        yield oldest


def _admission(engine: Any) -> Iterator[Metric]:
    stats = engine.admission.stats()
    yield _gauge("horizon_admission_running", "Queries holding an admission slot", stats.running)
    yield _gauge("horizon_admission_queued", "Queries waiting for an admission slot", stats.queued)
    yield _gauge(
        "horizon_admission_slots", "Admission slots ([limits] max_concurrent)", stats.max_concurrent
    )
    yield _gauge(
        "horizon_admission_queue_capacity",
        "Places in the admission queue ([limits] queue_size); queued at this value: queue full",
        stats.queue_size,
    )


def _cache(cache: Any) -> Iterator[Metric]:
    if cache is None:
        return
    yield _counter(
        "horizon_result_cache_hits", "Queries answered from the result cache", cache.hits
    )
    yield _counter(
        "horizon_result_cache_misses", "Cacheable queries the cache could not answer", cache.misses
    )
    yield _counter(
        "horizon_result_cache_evictions", "Answers evicted to make room", cache.evictions
    )
    yield _gauge("horizon_result_cache_bytes", "Bytes of answers held", cache.nbytes)
    yield _gauge("horizon_result_cache_entries", "Answers held", len(cache))


def _follower(follower: Any) -> Iterator[Metric]:
    staleness = follower.staleness_s()
    yield _gauge(
        "horizon_redis_up",
        "1 while the follower is following the state store in Redis, 0 when it cannot reach it",
        1 if staleness == 0 else 0,
    )
    yield _gauge(
        "horizon_state_staleness_seconds",
        "Seconds since the broker last heard from Redis (0 while following)",
        staleness,
    )
    yield _counter(
        "horizon_follower_events",
        "State-store events the follower applied",
        follower.events_applied,
    )
    yield _counter(
        "horizon_follower_full_syncs",
        "Times the follower rebuilt its state from Redis",
        follower.full_syncs,
    )
    yield _gauge("horizon_tables", "Registered tables", len(follower.tables()))
    yield from _failover(follower)


def _failover(follower: Any) -> Iterator[Metric]:
    """The store's failovers as this broker saw them (docs/design/contract/failover.md, F6)."""
    held = follower.held()
    yield _gauge(
        "horizon_state_store_held_tables",
        "Tables whose served snapshot and segments the broker holds because the state store "
        "went back (a failover lost acknowledged writes); 0 once it caught up",
        len(held),
    )
    yield _gauge(
        "horizon_state_store_held_segments",
        "Served segments the state store lost and the broker holds until it has them again",
        sum(held.values()),
    )
    yield _counter(
        "horizon_state_store_rewinds",
        "Times the follower found the state store behind what it had applied",
        follower.rewinds,
    )
    yield _counter(
        "horizon_state_store_primary_changes",
        "Times a connection of this process reached another Redis process than before",
        REPLICATION.primary_changes,
    )
    yield _counter(
        "horizon_state_replication_shortfalls",
        "Writes fewer replicas than wait_replicas confirmed in time (refused as UNAVAILABLE)",
        REPLICATION.shortfalls,
    )


def _spark(supervisor: Any) -> Iterator[Metric]:
    if supervisor is None:
        return
    yield _gauge("horizon_spark_up", "1 while the Spark session answers its probes", supervisor.up)
    yield _counter(
        "horizon_spark_session_restarts",
        "Spark sessions replaced after the one in use died",
        supervisor.restarts,
    )
