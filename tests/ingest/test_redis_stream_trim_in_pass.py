"""Entries a producer trims *during* a pass (after its first trim check, before a later batch
reads them) are found on the read that would skip them, never skipped silently: every batch is
read from its offset's own entry in the one script that judges where the offset stands, on the
driver road (a server pass) and on the Spark road (the ``horizon_redis_stream`` data source's
task read, judged by ``foreachBatch``). The rules at the edges: no offset yet, an offset at
``0-0``, the offset's entry deleted alone, a stream deleted entirely."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis

from horizon_broker.ingest.redis_stream_read import judged_read
from horizon_broker.ingest.redis_stream_source import stream_source
from horizon_broker.ingest.redis_stream_trim import (
    Carry,
    StreamTrimmed,
    carried,
    stream_position,
    trim_gap,
    witness_of,
)
from horizon_broker.ingest.server import IngestServer
from horizon_broker.ingest.server_config import TableSource
from tests.ingest.debezium_events import customers_table, postgres_event
from tests.ingest.test_redis_stream_trim import CAP, added


def ids_of(entries: list[Any]) -> list[str]:
    return [entry.id for entry in entries]


def test_a_batch_read_finds_entries_trimmed_since_the_last_batch_of_its_pass(
    redis_client: redis.Redis,
) -> None:
    """Batches of 4 after a counted offset; the producer caps the stream at 2 between the first
    and second batch: the second read itself says its offset's entry is gone and, judged with the
    carried witness, exactly the 2 entries between are lost (a read after the offset alone would
    return the last 2 as if nothing were missing)."""
    ids = added(redis_client, 12)
    witness = witness_of(ids[3], stream_position(redis_client, "s", ids[3], CAP))
    assert witness is not None
    carry = Carry(ids[3], witness)
    entries, position = judged_read(redis_client, "s", ids[3], None, 4)
    assert ids_of(entries) == ids[4:8] and position.offset_present
    assert trim_gap(ids[3], position, carry.witness) is None
    carry = carried(carry, ids[3], ids[7], 4)  # type: ignore[assignment]
    redis_client.xtrim("s", maxlen=2, approximate=False)  # ids 8 and 9 never read
    entries, position = judged_read(redis_client, "s", ids[7], None, 4)
    assert ids_of(entries) == ids[10:]
    assert not position.offset_present
    gap = trim_gap(ids[7], position, carry.witness)
    assert gap is not None and gap.lost == 2


def test_a_batch_read_takes_at_most_its_count_whether_or_not_the_offset_is_there(
    redis_client: redis.Redis,
) -> None:
    ids = added(redis_client, 10)
    assert ids_of(judged_read(redis_client, "s", None, None, 3)[0]) == ids[:3]
    assert ids_of(judged_read(redis_client, "s", ids[2], ids[8], 3)[0]) == ids[3:6]
    assert ids_of(judged_read(redis_client, "s", ids[6], ids[8], None)[0]) == ids[7:9]
    redis_client.xtrim("s", maxlen=5, approximate=False)  # the offset ids[2] gone
    entries, position = judged_read(redis_client, "s", ids[2], None, 3)
    assert (ids_of(entries), position.offset_present, position.after) == (ids[5:8], False, 5)


def test_the_very_first_read_and_an_offset_at_0_0_read_from_the_first_entry(
    redis_client: redis.Redis,
) -> None:
    """No entry has id 0-0: an offset there has nothing to look up, it is before every entry
    (judged as a table that has read nothing, not as an offset whose entry was trimmed)."""
    ids = added(redis_client, 5)
    for offset in (None, "0-0"):
        entries, position = judged_read(redis_client, "s", offset, None, 10)
        assert ids_of(entries) == ids
        assert trim_gap(offset, position, None) is None
    redis_client.xtrim("s", maxlen=3, approximate=False)
    for offset in (None, "0-0"):
        entries, position = judged_read(redis_client, "s", offset, None, 10)
        gap = trim_gap(offset, position, None)
        assert ids_of(entries) == ids[2:] and gap is not None and gap.lost == 2


def test_the_offsets_entry_deleted_alone_loses_nothing_and_a_trim_past_it_does(
    redis_client: redis.Redis,
) -> None:
    """XDEL of exactly the offset's entry while the stream still holds an entry before it: no
    trim reached it and nothing after it was deleted, so nothing was lost, even without a
    witness; once a trim passes it, entries may have been lost (no witness to count them)."""
    ids = added(redis_client, 8)
    redis_client.xdel("s", ids[3])
    entries, position = judged_read(redis_client, "s", ids[3], None, 10)
    assert ids_of(entries) == ids[4:] and not position.offset_present
    assert trim_gap(ids[3], position, None) is None
    redis_client.xtrim("s", maxlen=2, approximate=False)
    _, position = judged_read(redis_client, "s", ids[3], None, 10)
    gap = trim_gap(ids[3], position, None)
    assert gap is not None and "may have been trimmed" in gap.reason


def test_a_stream_deleted_entirely_is_a_gap_even_to_a_witness(redis_client: redis.Redis) -> None:
    """DEL resets the stream's entries-added: the witness's count cannot be compared any more,
    and what the stream held unread is gone (how much unknown)."""
    ids = added(redis_client, 6)
    witness = witness_of(ids[2], stream_position(redis_client, "s", ids[2], CAP))
    redis_client.delete("s")
    _, position = judged_read(redis_client, "s", ids[2], None, 10)
    gap = trim_gap(ids[2], position, witness)
    assert gap is not None and gap.lost is None and "deleted" in gap.reason
    added(redis_client, 2)  # created again by the producer
    _, position = judged_read(redis_client, "s", ids[2], None, 10)
    gap = trim_gap(ids[2], position, witness)
    assert gap is not None and "deleted" in gap.reason


def _push(client: redis.Redis, lsns: range) -> list[str]:
    ids = []
    for lsn in lsns:
        after = {"id": lsn, "name": f"n{lsn}", "balance": "1.00"}
        event = json.dumps(postgres_event("c", lsn=lsn, after=after))
        ids.append(client.xadd("orders", {"value": event}).decode())  # type: ignore[union-attr]
    return ids


def offsets_of(server: IngestServer) -> set[str | None]:
    job = server.job("customers")
    return {job.state.offsets.get(p, {}).get("orders") for p in job.partitions}


def test_a_trim_between_two_batches_of_a_pass_stops_the_table_or_is_counted_when_skipped(
    spark: Any, redis_server: Any, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Twelve entries in batches of 4; as the first batch is reported (the second already read)
    the producer caps the stream at 2 (lsn 9 and 10 never read): the pass stops with exactly
    those 2 named, the two batches before committed; under ``skip`` the gap is counted on the
    pass's result, once, and the table reads on (the last 2)."""
    address = f"{redis_server.url}#orders"
    outcomes: list[Any] = []
    for policy in ("stop", "skip"):
        redis_client.flushall()
        table = customers_table(tmp_path / policy)
        source = stream_source(address, "debezium", max_events=4, on_trimmed=policy)
        ids = _push(redis_client, range(1, 13))

        def trim(result: Any) -> None:
            redis_client.xtrim("orders", maxlen=2, approximate=False)

        with IngestServer(redis_server.url, f"in-pass-{policy}", spark) as server:
            server.add_tables([TableSource(table, None, "debezium", None, {}, source)])
            if policy == "stop":
                with pytest.raises(StreamTrimmed, match=r"2 entries after it were trimmed unread"):
                    server.run_source("customers", on_batch=trim)
                outcomes.append(offsets_of(server) == {ids[7]})
            else:
                result = server.run_source("customers", on_batch=trim)
                again = server.run_source("customers")
                outcomes.append((result.rows, result.stream_trimmed, again.stream_trimmed))
                outcomes.append(offsets_of(server) == {ids[11]})
    assert outcomes == [True, (2, 1, 0), True]


def test_a_trim_before_a_micro_batchs_task_reads_is_found_on_the_spark_road(
    spark: Any, redis_server: Any, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """``foreachBatch`` judges the micro-batch where its Spark task read it, not before: the
    frame is a real task running the data source's read, and the producer caps the stream at 2
    in that task just before the read (after ``foreachBatch`` began, as a producer racing it
    would): the 6 entries between the table's offset and the last 2 stop the table, nothing of
    the micro-batch committed; under ``skip`` the gap is counted on its result and the last 2
    read."""
    from horizon_broker.ingest.redis_stream_spark import ENTRY_SCHEMA, micro_batch

    url = redis_server.url
    outcomes: list[Any] = []
    for policy in ("stop", "skip"):
        redis_client.flushall()
        table = customers_table(tmp_path / policy)
        source = stream_source(f"{url}#orders", "debezium", max_events=4, on_trimmed=policy)
        ids = _push(redis_client, range(1, 5))
        with IngestServer(redis_server.url, f"spark-road-{policy}", spark) as server:
            server.add_tables([TableSource(table, None, "debezium", None, {}, source)])
            server.run_source("customers")  # the table at lsn 4, its witness counted
            ids += _push(redis_client, range(5, 13))

            def trim_then_read(_: int, after: str = ids[3], through: str = ids[11]) -> Any:
                import redis as redis_py

                from horizon_broker.ingest.redis_stream_spark import EntryRange, RedisStreamReader

                producer = redis_py.Redis.from_url(url)
                producer.xtrim("orders", maxlen=2, approximate=False)
                producer.close()
                reader = RedisStreamReader({"url": url, "key": "orders"})
                return reader.read(EntryRange(after, through))

            tasks = spark.sparkContext.parallelize([0], 1).flatMap(trim_then_read)
            frame = spark.createDataFrame(tasks, ENTRY_SCHEMA)
            ingest = micro_batch(server.job("customers"), source, redis_client)
            if policy == "stop":
                with pytest.raises(StreamTrimmed, match=r"6 entries after it were trimmed unread"):
                    ingest(frame, 0)
                outcomes.append(offsets_of(server) == {ids[3]})
            else:
                [result] = ingest(frame, 0)
                outcomes.append((result.rows, result.stream_trimmed))
                outcomes.append(offsets_of(server) == {ids[11]})
    assert outcomes == [True, (2, 1), True]
