"""A server reading a Redis stream reports the table's lag behind the stream's head to the state
store after each pass (what the brokers' consoles show): the entries added while the pass ran,
and its stream's key, never the stream's URL (it may carry a password)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import redis

from horizon_broker.ingest.job import BatchResult
from horizon_broker.ingest.redis_stream_source import stream_source
from horizon_broker.ingest.server import IngestServer
from horizon_broker.ingest.server_config import TableSource
from horizon_broker.ingest.stream_lag_report import report_stream_lag
from horizon_broker.watermark.server import ServerClient
from horizon_broker.watermark.stream_lag import reports
from tests.ingest.debezium_events import customers_table, postgres_event

STREAM = "shop.public.customers"


def add(client: redis.Redis, first: int, count: int) -> None:
    for key in range(first, first + count):
        event = postgres_event("c", lsn=key, after={"id": key, "name": f"n{key}"})
        client.xadd(STREAM, {"value": json.dumps(event)})


def test_a_pass_reports_the_entries_added_while_it_ran_as_the_tables_lag(
    spark: Any, redis_server: Any, redis_client: redis.Redis, tmp_path: Path
) -> None:
    add(redis_client, 1, 6)
    source = stream_source(f"{redis_server.url}#{STREAM}", "debezium", max_events=2)
    added: list[int] = []

    def more_while_running(result: Any) -> None:
        if not added:  # three entries arrive while the pass runs: after the head it reads to
            add(redis_client, 100, 3)
            added.append(3)

    with IngestServer(redis_server.url, "lagging", spark) as server:
        server.add_tables(
            [TableSource(customers_table(tmp_path), format="debezium", stream=source)]
        )
        server.run_source("customers", on_batch=more_while_running)
    (report,) = reports(redis_client, "horizon", ["customers"])
    assert (report.server, report.stream, report.events) == ("lagging", STREAM, 3)
    assert report.seconds >= 0.0
    stored = b"".join(redis_client.hgetall("horizon:t:customers:streamlag").values())  # type: ignore[union-attr]
    assert b"redis://" not in stored


def test_the_report_writes_the_counted_lag_under_the_stream_key_and_nothing_when_uncounted(
    redis_server: Any, redis_client: redis.Redis
) -> None:
    """The server's report itself (no Spark): a pass that counted a lag stores it as this
    server's for the table, keyed by the stream's key only; one that counted none stores
    nothing (a skipped directory-like pass must not erase nor invent a lag)."""
    source = stream_source(f"redis://:hidden@127.0.0.1:1/0#{STREAM}", "debezium")
    with ServerClient(redis_server.url, "reporting") as client:
        report_stream_lag(client, "orders", source, BatchResult(seq=0, rows=0, skipped=True))
        assert not redis_client.exists("horizon:t:orders:streamlag")
        counted = BatchResult(seq=3, rows=2, stream_lag_events=5, stream_lag_s=2.5)
        report_stream_lag(client, "orders", source, counted)
    (report,) = reports(redis_client, "horizon", ["orders"])
    assert (report.server, report.stream, report.events, report.seconds) == (
        "reporting",
        STREAM,
        5,
        2.5,
    )
    stored = b"".join(redis_client.hgetall("horizon:t:orders:streamlag").values())  # type: ignore[union-attr]
    assert b"hidden" not in stored and b"redis://" not in stored
