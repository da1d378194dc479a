"""Entries trimmed from a table's Redis stream before the table read them are found, never
skipped silently: the stream's own counters (XINFO STREAM on the real redis-server) judged
against the table's offset, and a server pass that stops the table, or reads on and counts the
gap under ``on_stream_trimmed = "skip"``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis

from horizon_broker.ingest.metrics import IngestMetrics
from horizon_broker.ingest.redis_stream_source import stream_source
from horizon_broker.ingest.redis_stream_trim import (
    StreamTrimmed,
    Witness,
    stream_position,
    trim_gap,
    witness_of,
)
from horizon_broker.ingest.server import IngestServer
from horizon_broker.ingest.server_config import TableSource
from tests.ingest.debezium_events import customers_table, postgres_event

CAP = 1000


def added(client: redis.Redis, count: int, key: str = "s") -> list[str]:
    return [client.xadd(key, {"value": str(n)}).decode() for n in range(count)]  # type: ignore[union-attr]


def gap_of(client: redis.Redis, offset: str | None, witness: Witness | None = None) -> Any:
    """The gap as a pass's trim check judges it: without counting unless the offset is gone."""
    return trim_gap(offset, stream_position(client, "s", offset, CAP, count=False), witness)


def xrange_calls(client: redis.Redis) -> int:
    stats: dict[str, Any] = client.info("commandstats")  # type: ignore[assignment]
    return int(stats.get("cmdstat_xrange", {}).get("calls", 0))


def test_a_trim_check_walks_no_entries_while_the_offsets_entry_is_there(
    redis_client: redis.Redis,
) -> None:
    """A pass counts the entries behind its table once (its lag, up to 1M walked in Redis): the
    trim check before it only looks the offset's entry up, and counts only once it is gone."""
    ids = added(redis_client, 10)
    redis_client.config_resetstat()
    present = stream_position(redis_client, "s", ids[2], CAP, count=False)
    assert (present.counted, present.after, xrange_calls(redis_client)) == (False, 0, 1)
    assert stream_position(redis_client, "s", ids[2], CAP).after == 7  # the lag counts
    redis_client.xtrim("s", maxlen=5, approximate=False)
    gone = stream_position(redis_client, "s", ids[2], CAP, count=False)
    assert (gone.counted, gone.after, gone.oldest_after) == (True, 5, ids[5])


def test_trimming_only_entries_the_table_read_is_no_gap(redis_client: redis.Redis) -> None:
    ids = added(redis_client, 10)
    redis_client.xtrim("s", maxlen=6, approximate=False)  # 0..3 go; the table read 0..5
    assert gap_of(redis_client, ids[5]) is None


def test_trimming_past_the_offset_loses_the_entries_the_witness_counts(
    redis_client: redis.Redis,
) -> None:
    ids = added(redis_client, 10)
    witness = witness_of(ids[3], stream_position(redis_client, "s", ids[3], CAP))
    assert witness == Witness(ids[3], 4)
    redis_client.xtrim("s", maxlen=3, approximate=False)  # 4, 5 and 6 were never read
    gap = gap_of(redis_client, ids[3], witness)
    assert gap is not None and gap.lost == 3


def test_trimming_everything_the_table_had_read_is_no_gap_with_a_witness(
    redis_client: redis.Redis,
) -> None:
    ids = added(redis_client, 5)
    witness = witness_of(ids[4], stream_position(redis_client, "s", ids[4], CAP))
    redis_client.xtrim("s", maxlen=0, approximate=False)  # a MINID retention after a quiet spell
    added(redis_client, 2)  # new entries after the trim: none lost
    assert gap_of(redis_client, ids[4], witness) is None


def test_without_a_witness_a_trimmed_offset_may_have_lost_entries(
    redis_client: redis.Redis,
) -> None:
    ids = added(redis_client, 10)
    redis_client.xtrim("s", maxlen=3, approximate=False)
    gap = gap_of(redis_client, ids[3])
    assert gap is not None and gap.lost is None and "may have been trimmed" in gap.reason


def test_an_entry_deleted_after_the_offset_is_lost_and_one_before_it_is_not(
    redis_client: redis.Redis,
) -> None:
    ids = added(redis_client, 6)
    redis_client.xdel("s", ids[1])
    assert gap_of(redis_client, ids[2]) is None
    redis_client.xdel("s", ids[4])
    gap = gap_of(redis_client, ids[2])
    assert gap is not None and "deleted (XDEL)" in gap.reason


def test_a_table_that_read_nothing_counts_every_entry_removed(redis_client: redis.Redis) -> None:
    added(redis_client, 8)
    assert gap_of(redis_client, None) is None
    redis_client.xtrim("s", maxlen=5, approximate=False)
    gap = gap_of(redis_client, None)
    assert gap is not None and gap.lost == 3


def _push(client: redis.Redis, lsns: range) -> None:
    for lsn in lsns:
        after = {"id": lsn % 4, "name": f"n{lsn}", "balance": "1.00"}
        client.xadd("orders", {"value": json.dumps(postgres_event("c", lsn=lsn, after=after))})


def test_a_pass_stops_a_table_whose_stream_was_trimmed_unread_or_reads_on_when_told(
    spark: Any, redis_server: Any, redis_client: redis.Redis, tmp_path: Path
) -> None:
    table = customers_table(tmp_path / "store")
    address = f"{redis_server.url}#orders"
    stop = stream_source(address, "debezium", max_events=50)
    skip = stream_source(address, "debezium", max_events=50, on_trimmed="skip")
    metrics = IngestMetrics()
    _push(redis_client, range(1, 6))
    with IngestServer(redis_server.url, "trim", spark) as server:
        server.add_tables([TableSource(table, None, "debezium", None, {}, stop)])
        assert server.run_source("customers").rows == 5
        _push(redis_client, range(6, 12))
        redis_client.xtrim("orders", maxlen=0, approximate=False)  # lsn 6..11 never read
        high = server.job("customers").state.high
        with pytest.raises(StreamTrimmed, match=r"6 entries after it were trimmed unread"):
            server.run_source("customers")
        with pytest.raises(StreamTrimmed):  # stopped: every pass says so
            server.run_source("customers")
        assert server.job("customers").state.high == high  # nothing committed
    with IngestServer(redis_server.url, "trim", spark) as server:  # restarted: no witness
        server.add_tables([TableSource(table, None, "debezium", None, {}, skip)])
        result = server.run_source("customers")
        metrics.observe_batch("customers", result)
        assert (result.rows, result.stream_trimmed) == (0, 1)
        again = server.run_source("customers")  # the gap was taken as seen
        assert (again.rows, again.stream_trimmed) == (0, 0)
        _push(redis_client, range(12, 14))
        after = server.run_source("customers")
        assert (after.rows, after.stream_trimmed) == (2, 0)
    counted = metrics.registry.get_sample_value(
        "horizon_ingest_stream_trimmed_total", {"table": "customers"}
    )
    assert counted == 1


@pytest.mark.usefixtures("redis_client")  # a state store flushed of earlier tests' tables
def test_a_pass_of_several_batches_carries_its_lag_between_them_instead_of_counting(
    spark: Any, redis_server: Any, tmp_path: Path
) -> None:
    """Between a pass's batches the lag is carried (entries ever added minus those added through
    the offset: the last count's witness plus the entries each batch read), not counted: each
    batch's lag is exact and a pass walks the entries behind it once, in its last count, plus
    once more on its first batch when the server had counted nothing yet (every other XRANGE is
    a batch's read, which looks its offset up as it reads, or the pass's first trim check). The
    stream has a redis-server of its own, so the state store's calls are not in its command
    counts."""
    from tests.processes import RedisProcess

    table = customers_table(tmp_path / "store")
    stream_server = RedisProcess().start()
    client = redis.Redis.from_url(stream_server.url)
    lags, calls = [], []
    try:
        source = stream_source(f"{stream_server.url}#orders", "debezium", max_events=4)
        with IngestServer(redis_server.url, "carry", spark) as server:
            server.add_tables([TableSource(table, None, "debezium", None, {}, source)])
            for first in (1, 11):  # ten entries a pass: batches of 4, 4 and 2
                _push(client, range(first, first + 10))
                client.config_resetstat()
                earlier: list[Any] = []
                last = server.run_source("customers", on_batch=earlier.append)
                calls.append(xrange_calls(client))
                lags.append([(r.rows, r.stream_lag_events) for r in [*earlier, last]])
    finally:
        client.close()
        stream_server.close()
    assert lags == [[(4, 6), (4, 2), (2, 0)]] * 2
    # no offset to look up yet, three reads (each also the look-up of its offset, so a carried
    # lag needs no call of its own), a count (no witness yet; look-up and walk), the last
    # count's look-up and walk
    assert calls[0] == 0 + 3 + 2 + 2
    # the trim check's look-up of the offset, three reads, the last count's two
    assert calls[1] == 1 + 3 + 2
