"""A Debezium truncate (``op = t``) in a table that allows it, through the real pipeline on every
road (driver rows, driver columns, Spark) and from a Redis stream: every version current at the
truncate ends at one commit timestamp (the broker's view at any snapshot before it still sees
them, none after), keys changed after it start anew, and a table file cannot allow truncation
without what it needs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.ingest.debezium import EnvelopeSpec, Place, flatten
from horizon_broker.ingest.debezium_truncate import expanded
from horizon_broker.ingest.job import IngestJob
from horizon_broker.ingest.redis_stream_source import stream_source
from horizon_broker.ingest.server import IngestServer
from horizon_broker.ingest.server_config import TableSource
from tests.ingest.conftest import broker_view
from tests.ingest.debezium_events import customers_table, lines, postgres_event
from tests.ingest.test_debezium_ingest import stored_rows, table_at

ROADS = {
    "driver rows": {},
    "driver columns": {"driver_batch_rows": 1},
    "spark": {"driver_batch_rows": 0},
}


def create(key: int, name: str, lsn: int) -> dict[str, Any]:
    return postgres_event("c", lsn=lsn, after={"id": key, "name": name, "balance": "1.00"})


FIRST = [create(1, "a", 10), create(2, "b", 11), create(3, "c", 12)]
SECOND = [
    postgres_event("u", lsn=20, after={"id": 2, "name": "b2", "balance": "1.00"}),
    create(4, "d", 21),
    postgres_event("d", lsn=22, before={"id": 3}),
    None,  # the delete's tombstone
    postgres_event("t", lsn=30, tx=77),
    create(5, "e", 31),
    create(1, "a-again", 32),
]


def assert_truncated_at_one_commit(rows: list[dict[str, Any]], lwm: int, first_high: int) -> None:
    """Before the truncate the table is whole; every version current then ends at one
    timestamp; after it only the keys created since are there."""
    assert table_at(rows, first_high) == {1: "a", 2: "b", 3: "c"}
    ended = {row["validUntil"] for row in rows if row["id"] in (1, 2, 4) and row["validUntil"]}
    truncated_at = max(ended)
    assert table_at(rows, truncated_at - 1) == {1: "a", 2: "b2", 4: "d"}
    assert table_at(rows, truncated_at) == {}
    assert table_at(rows, lwm) == {5: "e", 1: "a-again"}


@pytest.mark.parametrize("road", sorted(ROADS))
def test_a_truncate_ends_every_current_version_at_one_commit_on_every_road(
    spark: Any, server: Any, follower: Any, tmp_path: Path, road: str
) -> None:
    name = f"tr{sorted(ROADS).index(road)}"
    table = customers_table(tmp_path / name, name=name, allow_truncate=True, **ROADS[road])
    client = server(name)
    job = IngestJob(spark, table, client).start()
    changes = tmp_path / f"{name}-changes"
    changes.mkdir()
    (changes / "001.json").write_text(lines(FIRST))
    first = job.run_directory(str(changes), "debezium")
    (changes / "002.json").write_text(lines(SECOND))
    job.run_directory(str(changes), "debezium")
    view = broker_view(follower, client, name)
    assert_truncated_at_one_commit(stored_rows(view), view.lwm, first.high)


def test_a_truncate_from_a_redis_stream_ends_the_table_at_its_place(
    spark: Any, redis_server: Any, redis_client: Any, follower: Any, tmp_path: Path
) -> None:
    table = customers_table(tmp_path / "store", allow_truncate=True)
    source = stream_source(f"{redis_server.url}#shop.public.customers", "debezium")
    for event in FIRST:
        redis_client.xadd("shop.public.customers", {"value": json.dumps(event)})
    with IngestServer(redis_server.url, "trs", spark) as ingest:
        ingest.add_tables([TableSource(table, None, "debezium", None, {}, source)])
        first = ingest.run_source("customers")
        for event in SECOND:
            redis_client.xadd("shop.public.customers", {"value": json.dumps(event)})
        ingest.run_source("customers")
        view = broker_view(follower, ingest.client, "customers")
    assert_truncated_at_one_commit(stored_rows(view), view.lwm, first.high)


def test_a_truncate_becomes_deletes_of_the_keys_current_before_it_in_one_transaction(
    tmp_path: Path,
) -> None:
    spec = EnvelopeSpec.of(customers_table(tmp_path, allow_truncate=True))
    events = [(Place("f", n), json.dumps(event)) for n, event in enumerate(SECOND, 1)]
    flat = expanded(flatten(events, spec), ("id",), lambda: [(1,), (2,)])
    deletes = [row for row in flat.rows if row["lsn"] == 30]
    assert [row["id"] for row in deletes] == [1, 2, 4, 3]  # the index's keys, then the batch's
    assert {(row["deleted"], row["txn"], row["name"]) for row in deletes} == {(True, "77", None)}
    assert [row["lsn"] for row in flat.rows] == [20, 21, 22, 30, 30, 30, 30, 31, 32]
    assert len(flat.sources) == len(flat.absent) == len(flat.rows)
    untransacted = json.dumps(postgres_event("t", lsn=40))
    [alone] = expanded(flatten([(Place("g", 1), untransacted)], spec), ("id",), lambda: [(9,)]).rows
    assert alone["txn"] == "truncate@40"


@pytest.mark.parametrize("missing", ["debezium_order", "transaction_column"])
def test_a_table_file_cannot_allow_truncation_without_a_log_position_and_transactions(
    tmp_path: Path, missing: str
) -> None:
    with pytest.raises(InvalidArgument, match=r"allow_truncate.*needs"):
        customers_table(tmp_path, allow_truncate=True, **{missing: None})
