"""The metrics an ingestion server and a compactor serve on ports of their own: fed the reports
their runs return, scraped over HTTP with prometheus_client's parser; only their own families."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from horizon_broker._core.hlc import hlc_from_ms
from horizon_broker._core.metrics_endpoint import MetricsEndpoint
from horizon_broker.compaction.metrics import CompactionMetrics
from horizon_broker.compaction.run import CompactionReport
from horizon_broker.ingest.job import BatchResult
from tests.broker.data import UpsertTable


def scrape(endpoint: MetricsEndpoint) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(endpoint.url, timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_an_ingestion_servers_batches_rows_and_high_mark(tmp_path):
    from horizon_broker.ingest.metrics import IngestMetrics

    table = UpsertTable("accounts", tmp_path)
    metrics = IngestMetrics()
    endpoint = MetricsEndpoint("127.0.0.1:0", [metrics.registry])
    try:
        high = hlc_from_ms(1_800_000_000_000)
        metrics.observe_batch(
            "accounts",
            BatchResult(
                1, 100, table.segments, high=high, updated_segments=1, seconds=2.0,
                stage_seconds=(("read and count", 0.5), ("write segments", 1.0)),
                pending_updates=2, arrival_to_announced_s=3.0, event_to_announced_s=4.0,
            ),
        )  # fmt: skip
        metrics.observe_batch("accounts", BatchResult(2, 0, skipped=True))
        samples = scrape(endpoint)
    finally:
        endpoint.stop()
    t = (("table", "accounts"),)
    assert samples[("horizon_ingest_batches_total", (("outcome", "committed"), *t))] == 1
    assert samples[("horizon_ingest_batches_total", (("outcome", "skipped"), *t))] == 1
    assert samples[("horizon_ingest_rows_total", t)] == 100
    assert samples[("horizon_ingest_segments_written_total", t)] == 3
    assert samples[("horizon_ingest_segments_updated_total", t)] == 1
    assert samples[("horizon_ingest_batch_seconds_count", t)] == 1
    assert samples[("horizon_ingest_batch_seconds_sum", t)] == 2.0
    for stage, took in (("read and count", 0.5), ("write segments", 1.0)):
        key = (("stage", stage), *t)
        assert samples[("horizon_ingest_stage_seconds_sum", key)] == took
    assert samples[("horizon_ingest_updater_backlog", t)] == 2
    assert samples[("horizon_ingest_arrival_to_announced_seconds_sum", t)] == 3.0
    assert samples[("horizon_ingest_event_to_announced_seconds_sum", t)] == 4.0
    for family in ("acquired", "wait_seconds", "conflicts", "preempted", "lost"):
        assert (f"horizon_locks_{family}_total", ()) in samples  # the process's lock activity
    assert samples[("horizon_ingest_high_seconds", t)] == 1_800_000_000
    assert not any(
        name.startswith(("horizon_queries", "horizon_compaction")) for name, _ in samples
    )


def test_a_compactors_runs_rows_and_bytes_reclaimed(tmp_path):
    table = UpsertTable("accounts", tmp_path)
    metrics = CompactionMetrics()
    endpoint = MetricsEndpoint("127.0.0.1:0", [metrics.registry])
    try:
        metrics.observe_run(
            "accounts",
            CompactionReport(
                "run-1", "published", 1, table.segments, (table.p1,),
                rows_in=160, rows_out=100, bytes_in=9000, bytes_out=4000, seconds=12.0,
            ),
        )  # fmt: skip
        metrics.observe_run("accounts", CompactionReport("run-2", "revoked", seconds=1.0))
        metrics.observe_reclaim("accounts", 60)
        metrics.observe_collected("accounts", 5000)
        samples = scrape(endpoint)
    finally:
        endpoint.stop()
    t = ("table", "accounts")
    assert samples[("horizon_compaction_runs_total", (("outcome", "published"), t))] == 1
    assert samples[("horizon_compaction_runs_total", (("outcome", "revoked"), t))] == 1
    assert samples[("horizon_compaction_rows_total", (("direction", "in"), t))] == 160
    assert samples[("horizon_compaction_rows_total", (("direction", "out"), t))] == 100
    assert samples[("horizon_compaction_bytes_total", (("direction", "in"), t))] == 9000
    assert samples[("horizon_compaction_segments_total", (("direction", "out"), t))] == 1
    assert samples[("horizon_compaction_run_seconds_count", (t,))] == 2
    assert samples[("horizon_compaction_reclaimed_rows_total", (t,))] == 60
    assert samples[("horizon_compaction_reclaimed_bytes_total", (t,))] == 5000
