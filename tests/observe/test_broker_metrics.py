"""The broker's Prometheus endpoint, scraped over HTTP with prometheus_client's own parser while
real queries, pins, announcements and faults happen: every family is there, and moves the way the
work did; no label carries SQL text or a query id."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from horizon_broker._core.errors import HorizonError
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.server import ServerClient
from tests.broker.data import CHUNK, VERSION, write_rows
from tests.observe.conftest import LWM, WatchedBroker

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

EVERY_FAMILY = {
    "horizon_rpc_requests_total",
    "horizon_rpc_duration_seconds_count",
    "horizon_queries_total",
    "horizon_query_duration_seconds_count",
    "horizon_query_stage_seconds_count",
    "horizon_query_rows_total",
    "horizon_query_result_bytes_total",
    "horizon_admission_running",
    "horizon_admission_queued",
    "horizon_admission_slots",
    "horizon_admission_queue_capacity",
    "horizon_result_cache_hits_total",
    "horizon_result_cache_misses_total",
    "horizon_result_cache_evictions_total",
    "horizon_result_cache_bytes",
    "horizon_result_cache_entries",
    "horizon_redis_up",
    "horizon_state_staleness_seconds",
    "horizon_follower_events_total",
    "horizon_follower_full_syncs_total",
    "horizon_tables",
    "horizon_table_lwm_seconds",
    "horizon_table_lwm_lag_seconds",
    "horizon_table_laggard_lag_seconds",
    "horizon_table_stale_servers",
    "horizon_table_lwm_regression_active",
    "horizon_table_timeline_generation",
    "horizon_table_segments",
    "horizon_table_pins",
    "horizon_table_oldest_pin_age_seconds",
    "horizon_spark_up",
    "horizon_spark_session_restarts_total",
}
LABELS = {"method", "code", "rpc", "kind", "stage", "le", "table", "state", "server", "partition"}


def scrape(watched: WatchedBroker) -> Samples:
    assert watched.broker.observer is not None
    with urllib.request.urlopen(watched.broker.observer.metrics_url, timeout=10) as answer:
        text = answer.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every series of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= set(ls))


def test_every_family_is_served_and_moves_with_the_work(watched: WatchedBroker):
    before = scrape(watched)
    sql = "SELECT count(*) AS n FROM accounts WHERE balance > 17"
    with watched.client() as client:
        assert client.query(sql).column("n").to_pylist() == [99]
        assert client.query(sql).column("n").to_pylist() == [99]  # answered by the cache
        with pytest.raises(HorizonError):
            client.query("SELECT * FROM no_such_table")
        client.tables()
        with client.pin(["accounts"], lease=60.0, renew=False):
            pinned = scrape(watched)
    after = scrape(watched)

    assert {name for name, _ in after} >= EVERY_FAMILY
    for _, labels in after:
        assert {key for key, _ in labels} <= LABELS
    # No label value carries a query's text or id.
    values = {v for _, labels in after for _, v in labels}
    assert not any("SELECT" in v or "accounts WHERE" in v for v in values)
    ids = {q.query_id for q in watched.client().queries()}
    assert ids and not ids & values

    ok = {"rpc": "ExecuteQuery", "kind": "lwm", "code": "OK"}
    assert (
        value(after, "horizon_queries_total", **ok) - value(before, "horizon_queries_total", **ok)
        == 2
    )
    failed = total(after, "horizon_queries_total", rpc="ExecuteQuery") - total(
        before, "horizon_queries_total", rpc="ExecuteQuery"
    )
    assert failed == 3
    assert (
        value(after, "horizon_query_rows_total", rpc="ExecuteQuery")
        - value(before, "horizon_query_rows_total", rpc="ExecuteQuery")
        == 2
    )
    assert value(after, "horizon_query_result_bytes_total", rpc="ExecuteQuery") > value(
        before, "horizon_query_result_bytes_total", rpc="ExecuteQuery"
    )
    for stage in ("queued", "rewrite", "views", "spark", "serialize"):
        assert value(after, "horizon_query_stage_seconds_count", stage=stage) >= 2
    assert value(after, "horizon_rpc_requests_total", method="ListTables", code="OK") >= 1
    assert (
        value(after, "horizon_result_cache_hits_total")
        - value(before, "horizon_result_cache_hits_total")
        == 1
    )
    assert value(after, "horizon_result_cache_misses_total") > value(
        before, "horizon_result_cache_misses_total"
    )
    assert value(after, "horizon_result_cache_entries") >= 1
    assert value(after, "horizon_result_cache_bytes") > 0
    assert value(after, "horizon_admission_slots") == 2
    assert value(after, "horizon_admission_queue_capacity") == 4
    assert value(after, "horizon_admission_running") == 0

    assert value(pinned, "horizon_table_pins", table="accounts") == 1
    assert value(pinned, "horizon_table_pins", table="secret") == 0
    assert value(pinned, "horizon_table_oldest_pin_age_seconds", table="accounts") >= 0
    assert value(after, "horizon_table_pins", table="accounts") == 0

    assert value(after, "horizon_redis_up") == 1
    assert value(after, "horizon_state_staleness_seconds") == 0
    assert value(after, "horizon_spark_up") == 1
    assert value(after, "horizon_spark_session_restarts_total") == 0
    assert value(after, "horizon_tables") == 2
    # The LWM served (HLC 1200: the first millisecond of 1970) and the laggard partition 0.
    assert value(after, "horizon_table_lwm_seconds", table="accounts") == 0
    assert value(after, "horizon_table_lwm_lag_seconds", table="accounts") > 1e9
    assert (
        value(
            after,
            "horizon_table_laggard_lag_seconds",
            table="accounts",
            server="srv-a",
            partition="0",
        )
        > 1e9
    )
    assert value(after, "horizon_table_segments", table="accounts", state="visible") == 2
    assert value(after, "horizon_table_segments", table="accounts", state="overshadowed") == 1


def test_state_families_follow_announcements_faults_and_stale_servers(
    watched: WatchedBroker, tmp_path
):
    before = scrape(watched)
    table = watched.tables["secret"]
    chunk = Interval(CHUNK.end_ms, 2 * CHUNK.end_ms)
    segment = Segment(
        table="secret",
        interval=chunk,
        version=VERSION,
        partition=0,
        core_partitions=1,
        location=(write_rows(watched.root / "secret" / "d2.parquet", table.desc, []),),
        row_count=0,
    )
    watched.server.announce([segment])
    follower = watched.broker.follower
    assert follower.wait_for(lambda f: len(f.view("secret").visible_segments) == 3, 10)
    # A second server takes partition 2 of secret, reports once and goes silent: stale.
    silent = ServerClient(watched.redis.url, "srv-silent")
    silent.register()
    silent.report("secret", {2: (LWM + 5, LWM + 5)})
    try:
        with watched.unreadable(table.o0, "test: lost file"):
            assert follower.wait_for(
                lambda f: "srv-silent" in f.watermarks("secret").stale_servers, 10
            )
            after = scrape(watched)
    finally:
        silent.decommission()
        silent.close()

    generation = "horizon_table_timeline_generation"
    assert value(after, generation, table="secret") > value(before, generation, table="secret")
    assert value(after, generation, table="accounts") == value(before, generation, table="accounts")
    assert value(after, "horizon_follower_events_total") > value(
        before, "horizon_follower_events_total"
    )
    assert value(after, "horizon_table_segments", table="secret", state="visible") == 3
    assert value(after, "horizon_table_segments", table="secret", state="unreadable") == 1
    assert value(after, "horizon_table_segments", table="accounts", state="unreadable") == 0
    assert value(after, "horizon_table_stale_servers", table="secret") == 1
    assert value(after, "horizon_table_stale_servers", table="accounts") == 0


def test_metrics_are_off_with_enabled_false(watched: WatchedBroker):
    from horizon_broker.broker.api.server import BrokerServer
    from tests.observe.conftest import watched_config

    config = watched_config(watched.redis.url, metrics={"enabled": False})
    broker = BrokerServer(config, spark=watched.broker.spark, view_namespace="off").start()  # type: ignore[arg-type]
    try:
        assert broker.observer is not None and broker.observer.metrics_url == ""
    finally:
        broker.stop(0)
