"""A stream table through Structured Streaming (the ``horizon_redis_stream`` Python data source,
``horizon ingest --stream``): micro-batches of at most ``max_events`` entries; a micro-batch
replayed across the commit log's offset ingests only its new entries, and a query whose Spark
checkpoint is behind the commit log (a server pass ingested more meanwhile) ingests nothing
twice; the table ends as its events define it, one version per event."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import redis

from horizon_broker.ingest.job import BatchResult
from horizon_broker.ingest.redis_stream_read import read_entries
from horizon_broker.ingest.redis_stream_source import stream_source
from horizon_broker.ingest.redis_stream_spark import ENTRY_SCHEMA, micro_batch
from horizon_broker.ingest.server import IngestServer
from horizon_broker.ingest.server_config import TableSource
from horizon_broker.ingest.stream_offsets import batch_source
from tests.ingest.debezium_events import customers_table
from tests.ingest.redis_stream_events import history, reference
from tests.waiting import eventually

MAX_EVENTS = 9


def until_caught_up(query: Any, results: list[BatchResult]) -> None:
    """Wait for a batch that leaves nothing behind (the query staying alive), then stop it."""

    def caught_up() -> bool:
        assert query.isActive, f"the query ended: {query.exception()}"
        return any(result.stream_lag_events == 0 for result in results)

    eventually(caught_up, "a micro-batch leaving the stream caught up", patience_s=120)
    query.stop()


def test_a_replayed_or_late_stream_query_ingests_nothing_twice(
    spark: Any, redis_server: Any, redis_client: redis.Redis, tmp_path: Path
) -> None:
    changes = history(3, 90)
    table = customers_table(tmp_path / "store")
    source = stream_source(f"{redis_server.url}#orders", "debezium", max_events=MAX_EVENTS)
    for change in changes[:40]:
        redis_client.xadd("orders", change.fields(False))  # type: ignore[arg-type]
    results: list[BatchResult] = []
    checkpoint = str(tmp_path / "checkpoint")
    with IngestServer(redis_server.url, "spark-road", spark) as server:
        server.add_tables([TableSource(table, None, "debezium", None, {}, source)])
        query = server.run_stream(
            "customers", None, checkpoint, processing_time="0.2 seconds", on_batch=results.append
        )
        until_caught_up(query, results)
        assert all(0 < result.rows <= MAX_EVENTS for result in results if not result.skipped)
        ids = [
            redis_client.xadd("orders", change.fields(False)).decode()  # type: ignore[arg-type, union-attr]
            for change in changes[40:70]
        ]
        # Spark replays a micro-batch planned before a crash that straddles the commit log's
        # offset (entries 31 to 48, the table has 40): only 41 to 48 are new.
        entries = read_entries(redis_client, "orders", None, ids[7], None)[30:]
        replay = [(entry.id, json.dumps(entry.fields)) for entry in entries]
        replayed = spark.createDataFrame(replay, ENTRY_SCHEMA)
        job = server.job("customers")
        [straddling] = micro_batch(job, source, redis_client)(replayed, 0)
        assert straddling.sources == (batch_source("orders", ids[0], ids[7]),)
        server.run_source("customers")  # the commit log moves past the query's checkpoint
        for change in changes[70:]:
            redis_client.xadd("orders", change.fields(False))  # type: ignore[arg-type]
        results.clear()
        query = server.run_stream(
            "customers", None, checkpoint, processing_time="0.2 seconds", on_batch=results.append
        )
        until_caught_up(query, results)
        segments = server.client.announced_segments("customers")
    rows, versions = reference(changes)
    stored = [
        row
        for segment in segments
        for location in segment.location
        for row in pq.read_table(location.removeprefix("file:")).to_pylist()
    ]
    current = {
        r["id"]: {"name": r["name"], "lsn": r["lsn"]} for r in stored if r["validUntil"] is None
    }
    assert current == rows
    counted: dict[int, int] = {}
    for row in stored:
        counted[row["id"]] = counted.get(row["id"], 0) + 1
    assert counted == versions, "one stored version per create, update and snapshot read"
