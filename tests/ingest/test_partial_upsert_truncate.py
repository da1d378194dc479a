"""A Debezium truncate (``op = t``, ``allow_truncate``) on a partial-upsert table, on every road
(driver rows, driver columns, Spark) from files and from a Redis stream: every version current at
the truncate ends at its commit, and a partial event after it (in log order) starts its key from
nothing, not from the row before the truncate; a late event from before the truncate does not
bring its key back. Every snapshot answers a reference model that folds the events committed by
then in log order, a truncate emptying the table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from horizon_broker.ingest.job import IngestJob
from horizon_broker.ingest.redis_stream_source import stream_source
from horizon_broker.ingest.server import IngestServer
from horizon_broker.ingest.server_config import TableSource
from horizon_broker.ingest.table import TableDefinition
from tests.ingest.conftest import broker_view, visible_by_key
from tests.ingest.debezium_events import lines, postgres_event

ROADS = {
    "driver rows": {},
    "driver columns": {"driver_batch_rows": 1},
    "spark": {"driver_batch_rows": 0},
}
STRATEGIES = {"visits": "increment", "status": "overwrite"}


def change(key: int, lsn: int, **values: Any) -> dict[str, Any]:
    """An update whose ``after`` image holds the key and ``values`` only (a partial event)."""
    return postgres_event("u", lsn=lsn, after={"id": key, **values})


BATCHES: list[list[dict[str, Any]]] = [
    [
        change(1, 10, status="new", visits=1),
        change(1, 11, visits=2),  # status absent: kept
        change(2, 12, status="x", visits=5),
    ],
    [
        postgres_event("t", lsn=20, tx=77),
        change(1, 21, visits=1),  # from nothing: visits 1 (not 4), status null (not "new")
    ],
    [
        change(2, 15, visits=3),  # late, before the truncate: key 2 stays gone
        change(1, 22, status="paid"),
    ],
]


def reference(events: list[dict[str, Any]]) -> dict[int, tuple[Any, Any]]:
    """The table the events define: folded in log order, a truncate emptying it."""
    rows: dict[int, dict[str, Any]] = {}
    for event in sorted(events, key=lambda e: e["source"]["lsn"]):
        if event["op"] == "t":
            rows = {}
            continue
        after = event["after"]
        row = rows.setdefault(after["id"], {"status": None, "visits": None})
        if "status" in after:
            row["status"] = after["status"]
        if after.get("visits") is not None:
            row["visits"] = (row["visits"] or 0) + after["visits"]
    return {key: (row["status"], row["visits"]) for key, row in rows.items()}


def table(root: Path, name: str, **overrides: Any) -> TableDefinition:
    return TableDefinition.from_dict(
        {
            "name": name,
            "columns": {"id": "bigint", "status": "string", "visits": "bigint",
                        "lsn": "bigint", "deleted": "boolean", "txn": "string"},
            "primary_key": ["id"], "comparison": ["lsn"], "delete_column": "deleted",
            "transaction_column": "txn", "debezium_order": "lsn", "allow_truncate": True,
            "key_partitions": 2, "storage_root": str(root), "partial_upsert": STRATEGIES,
            **overrides,
        }
    )  # fmt: skip


def table_at(rows: list[dict[str, Any]], snapshot: int) -> dict[int, tuple[Any, Any]]:
    visible = visible_by_key(rows, snapshot)
    return {key: (row["status"], row["visits"]) for key, row in visible.items()}


def stored_rows(view: Any) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    columns = ["id", "status", "visits", "validFrom", "validUntil"]
    return [
        row
        for segment in view.visible_segments
        for location in segment.location
        for row in pq.read_table(location.removeprefix("file:"), columns=columns).to_pylist()
    ]


def assert_every_snapshot_is_a_prefix(
    rows: list[dict[str, Any]], lwm: int, ends: list[int]
) -> None:
    """Each batch's end shows the reference of every event so far; every snapshot between shows
    that of some prefix of the events (in order: the truncate at one commit, never halfway)."""
    events = [event for batch in BATCHES for event in batch]
    prefixes = [reference(events[:n]) for n in range(len(events) + 1)]
    done = 0
    for end, batch in zip(ends, BATCHES, strict=True):
        done += len(batch)
        assert table_at(rows, end) == prefixes[done], end
    moments = sorted(
        {row["validFrom"] for row in rows} | {row["validUntil"] or lwm for row in rows}
    )
    reached = 0
    for moment in moments:
        seen = table_at(rows, moment)
        later = [n for n in range(reached, len(prefixes)) if prefixes[n] == seen]
        assert later, f"{seen} at {moment} is no state the events define from event {reached} on"
        reached = later[0]
    assert prefixes[-1] == {1: ("paid", 1)}


@pytest.mark.parametrize("road", sorted(ROADS))
def test_a_truncate_restarts_every_key_of_a_partial_table_on_every_road(
    spark: Any, server: Any, follower: Any, tmp_path: Path, road: str
) -> None:
    name = f"ptr{sorted(ROADS).index(road)}"
    client = server(name)
    job = IngestJob(spark, table(tmp_path / name, name, **ROADS[road]), client).start()
    changes = tmp_path / f"{name}-changes"
    changes.mkdir()
    ends = []
    for number, batch in enumerate(BATCHES):
        (changes / f"{number:03d}.json").write_text(lines(batch))
        ends.append(job.run_directory(str(changes), "debezium").high)
    view = broker_view(follower, client, name)
    assert_every_snapshot_is_a_prefix(stored_rows(view), view.lwm, ends)


def test_a_truncate_from_a_redis_stream_restarts_every_key_of_a_partial_table(
    spark: Any, redis_server: Any, redis_client: Any, follower: Any, tmp_path: Path
) -> None:
    source = stream_source(f"{redis_server.url}#shop.public.visits", "debezium")
    ends = []
    with IngestServer(redis_server.url, "ptrs", spark) as ingest:
        entry = TableSource(table(tmp_path / "store", "visits"), None, "debezium", None, {}, source)
        ingest.add_tables([entry])
        for batch in BATCHES:
            for event in batch:
                redis_client.xadd("shop.public.visits", {"value": json.dumps(event)})
            ends.append(ingest.run_source("visits").high)
        view = broker_view(follower, ingest.client, "visits")
    assert_every_snapshot_is_a_prefix(stored_rows(view), view.lwm, ends)
