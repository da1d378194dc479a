"""Redis stream tables without Spark: the configuration's shape and errors, the entries of
Debezium Server's Redis sink read from a real redis-server and judged, the offsets the commit
log keeps (and a restart or a handover reads), the batch bounds, and the lag."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from horizon_broker._core.errors import FailedPrecondition, InvalidArgument, Unavailable
from horizon_broker._core.redis_calls import connect
from horizon_broker.ingest.debezium import DeadLetter, EnvelopeSpec, Place, Row
from horizon_broker.ingest.job import BatchResult
from horizon_broker.ingest.manifest import COMMIT, INGEST, ManifestState, Record
from horizon_broker.ingest.metrics import IngestMetrics
from horizon_broker.ingest.redis_stream_batches import stream_errors
from horizon_broker.ingest.redis_stream_read import (
    entry_verdict,
    head,
    lag,
    read_entries,
    stream_rows,
)
from horizon_broker.ingest.redis_stream_source import stream_source
from horizon_broker.ingest.server_config import server_config
from horizon_broker.ingest.stream_offsets import batch_source, read_bounds, unconsumed_runs
from tests.ingest.debezium_events import customers_table, postgres_event
from tests.ingest.redis_stream_events import history

INLINE = {
    "name": "customers",
    "primary_key": ["id"],
    "comparison": ["lsn"],
    "delete_column": "deleted",
    "debezium_order": "lsn",
    "columns": {"id": "bigint", "name": "string", "lsn": "bigint", "deleted": "boolean"},
}


def configured(**entry: Any) -> Any:
    data = {"server_id": "s1", "redis": "redis://127.0.0.1:6379/0", "format": "debezium"}
    return server_config({**data, "tables": [{**INLINE, **entry}]}, base=Path("."), origin="test")


def ingest_commit(seq: int, sources: list[str], partitions: list[int]) -> Record:
    body = {
        "kind": INGEST, "sources": sources, "consumed_partitions": partitions, "base": seq,
        "high": seq, "partitions": partitions,
    }  # fmt: skip
    return Record(seq, COMMIT, body)


# -- configuration -----------------------------------------------------------------------------


def test_a_table_entry_names_its_redis_stream_and_batch_size() -> None:
    [table] = configured(stream="redis://h:6380/2#shop.public.customers", max_events=50).tables
    assert table.stream is not None
    assert (table.stream.url, table.stream.key) == ("redis://h:6380/2", "shop.public.customers")
    assert (table.stream.format, table.stream.max_events, table.source) == ("debezium", 50, None)


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"stream": "redis://h:6379/0"}, "not a Redis stream address"),
        ({"stream": "http://h/0#s"}, "not a Redis stream address"),
        ({"stream": "redis://h:6379/0#s", "source": "/landing"}, "not both"),
        ({"stream": "redis://h:6379/0#s", "format": "parquet"}, "format debezium or json"),
        ({"stream": "redis://h:6379/0#s", "max_events": 0}, "max_events"),
        ({"source": "/landing", "max_events": 5}, "apply to a table read from a stream"),
    ],
)
def test_a_bad_stream_entry_is_refused_naming_the_problem(
    entry: dict[str, Any], problem: str
) -> None:
    with pytest.raises(InvalidArgument, match=problem):
        configured(**entry)


# -- entries as Debezium Server's Redis sink writes them -----------------------------------------


def test_sink_entries_in_both_message_formats_become_rows_tombstones_or_dead_letters(
    redis_client: redis.Redis,
) -> None:
    source = stream_source("redis://h:6379/0#s", "debezium")
    spec = EnvelopeSpec.of(customers_table("/tmp/unused"))
    create = json.dumps(postgres_event("c", lsn=5, after={"id": 1, "name": "a"}))
    for fields in (
        {"key": '{"id": 1}', "value": create},  # extended
        {'{"id": 1}': create},  # compact
        {"key": '{"id": 1}', "value": "default"},  # a tombstone
        {"key": '{"id": 1}'},  # no value
        {'{"id": 1}': "not json"},
    ):
        redis_client.xadd("s", fields)  # type: ignore[arg-type]
    entries = read_entries(redis_client, "s", None, None, None)
    verdicts = [entry_verdict(Place(e.id, i), e, source, spec) for i, e in enumerate(entries)]
    assert [type(v).__name__ for v in verdicts] == [
        "Row", "Row", "Tombstone", "DeadLetter", "DeadLetter"
    ]  # fmt: skip
    assert isinstance(verdicts[0], Row) and verdicts[0].values["name"] == "a"
    missing = verdicts[3]
    assert isinstance(missing, DeadLetter) and "no 'value' field" in missing.reason
    assert missing.place.source == entries[3].id


def test_malformed_events_are_dead_lettered_at_their_entry_ids_and_rows_keep_stream_order(
    redis_client: redis.Redis,
) -> None:
    changes = history(7, 60)
    ids = [redis_client.xadd("s", c.fields(False)).decode() for c in changes]  # type: ignore[arg-type, union-attr]
    source = stream_source("redis://h:6379/0#s", "debezium")
    entries = read_entries(redis_client, "s", None, None, None)
    flattened = stream_rows(entries, source, customers_table("/tmp/unused"), "batch")
    expected = [ids[i] for i, c in enumerate(changes) if c.key is None and c.text != "default"]
    assert [letter.place.source for letter in flattened.dead_letters] == expected
    assert [row["id"] for row in flattened.rows] == [c.key for c in changes if c.key is not None]
    assert set(flattened.sources) == {"batch"}, "one source a batch: stamps follow stream order"


def test_json_rows_of_a_stream_are_typed_and_a_missing_key_is_a_dead_letter(
    redis_client: redis.Redis,
) -> None:
    redis_client.xadd("s", {"value": json.dumps({"id": 3, "name": "c", "lsn": 9})})
    redis_client.xadd("s", {"value": json.dumps({"name": "no key"})})
    source = stream_source("redis://h:6379/0#s", "json")
    entries = read_entries(redis_client, "s", None, None, None)
    flattened = stream_rows(entries, source, customers_table("/tmp/unused"), "batch")
    assert [(row["id"], row["name"], row["lsn"]) for row in flattened.rows] == [(3, "c", 9)]
    assert [letter.reason for letter in flattened.dead_letters] == ["key column 'id' is missing"]


# -- offsets in the commit log ---------------------------------------------------------------------


def test_a_stream_batch_moves_its_partitions_offsets_through_a_checkpoint() -> None:
    state = ManifestState.from_records([
        ingest_commit(1, [batch_source("s", "1-0", "5-0")], [0, 1]),
        ingest_commit(2, [batch_source("s", "6-0", "9-3")], [1]),
    ])  # fmt: skip
    assert state.offsets == {0: {"s": "5-0"}, 1: {"s": "9-3"}}
    assert state.consumed == {}, "a stream batch's name is not kept: its offset says it all"
    assert not state.needs(1, [batch_source("s", "6-0", "9-3")]), "a replayed batch is skipped"
    assert state.needs(0, [batch_source("s", "6-0", "9-3")])
    restored = ManifestState.from_checkpoint(Record(2, "checkpoint", state.to_checkpoint()))
    assert restored.offsets == state.offsets


def test_an_adopted_offset_moves_a_partition_forward_never_back() -> None:
    """What a handover does (recovery adopts each partition's offsets of every commit log)."""
    state = ManifestState.from_records([ingest_commit(1, [batch_source("s", "1-0", "5-0")], [0])])
    state.consume(0, [batch_source("s", "3-0", "3-0")])  # an earlier owner's older offset
    state.consume(1, [batch_source("s", "8-0", "8-0")])  # a partition handed to this server
    assert state.offsets == {0: {"s": "5-0"}, 1: {"s": "8-0"}}


def test_a_batch_reads_after_the_slowest_partition_and_stops_at_the_next_offset() -> None:
    assert read_bounds({0: "3-0", 1: "7-0"}, [0, 1]) == ("3-0", "7-0")
    assert read_bounds({0: "3-0", 1: "7-0"}, [1]) == ("7-0", None)
    assert read_bounds({}, [0, 1]) == (None, None)
    ids = ["2-0", "3-0", "4-0", "7-0", "8-0"]
    assert unconsumed_runs(ids, {0: "3-0", 1: "7-0"}, [0, 1]) == [(2, 4), (4, 5)]


# -- lag ----------------------------------------------------------------------------------------


def test_lag_counts_the_entries_after_the_offset_and_the_age_of_the_oldest(
    redis_client: redis.Redis,
) -> None:
    now_ms = int(time.time() * 1000)
    for ms in (now_ms - 9000, now_ms - 4000, now_ms - 1000):
        redis_client.xadd("s", {"value": "{}"}, id=f"{ms}-0")
    behind = lag(redis_client, "s", f"{now_ms - 9000}-0", now_ms)
    assert (behind.events, behind.seconds) == (2, 4.0)
    assert lag(redis_client, "s", f"{now_ms - 1000}-0", now_ms).events == 0
    assert lag(redis_client, "missing", None, now_ms).events == 0


def test_the_lag_after_a_batch_is_in_the_metrics() -> None:
    metrics = IngestMetrics()
    result = BatchResult(seq=1, rows=3, stream_lag_events=42, stream_lag_s=2.5)
    metrics.observe_batch("customers", result)
    read = metrics.registry.get_sample_value
    assert read("horizon_ingest_stream_lag_events", {"table": "customers"}) == 42
    assert read("horizon_ingest_stream_lag_seconds", {"table": "customers"}) == 2.5


def test_a_key_that_is_not_a_stream_or_an_unreachable_server_is_a_clear_typed_error(
    redis_server: Any, redis_client: redis.Redis
) -> None:
    redis_client.set("not-a-stream", "x")
    source = stream_source(f"{redis_server.url}#not-a-stream", "debezium")
    refused = pytest.raises(FailedPrecondition, match="'not-a-stream' holds another type")
    with refused, stream_errors(source):
        head(redis_client, source.key)
    gone = stream_source("redis://127.0.0.1:1/0#s", "debezium")
    unreachable = pytest.raises(Unavailable, match=re.escape(f"{gone.address} cannot be read"))
    with unreachable, stream_errors(gone):
        head(connect(gone.url), gone.key)


def test_columns_an_entry_leaves_out_are_absent_for_a_partial_upsert_merge(
    redis_client: redis.Redis,
) -> None:
    partial = json.dumps(postgres_event("u", lsn=5, after={"id": 1, "name": "status only"}))
    redis_client.xadd("s", {"value": partial})
    table = customers_table("/tmp/unused")
    entries = read_entries(redis_client, "s", None, None, None)
    flattened = stream_rows(entries, stream_source("redis://h/0#s", "debezium"), table, "b")
    assert "balance" in flattened.absent[0] and "name" not in flattened.absent[0]
    redis_client.xadd("j", {"value": json.dumps({"id": 1, "lsn": 6})})
    entries = read_entries(redis_client, "j", None, None, None)
    flattened = stream_rows(entries, stream_source("redis://h/0#j", "json"), table, "b")
    assert {"name", "balance"} <= flattened.absent[0] and "lsn" not in flattened.absent[0]
