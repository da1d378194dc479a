"""ServerClient against a real redis-server."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
import redis

from horizon_broker._core.errors import (
    FailedPrecondition,
    InvalidArgument,
    ResourceExhausted,
    SegmentIdReused,
    Unavailable,
)
from horizon_broker.timeline.interval import Interval
from horizon_broker.watermark.read import read_table_lwm
from tests.watermark.conftest import segment, table_descriptor


def test_register_table_is_idempotent_and_refuses_a_different_definition(redis_url, make_server):
    server = make_server(redis_url, "s1")
    server.register()
    server.register_table(table_descriptor())
    server.register_table(table_descriptor())
    other = make_server(redis_url, "s2")
    other.register_table(table_descriptor())
    with pytest.raises(FailedPrecondition, match="different definition"):
        other.register_table(table_descriptor(key_partitions=8))


def test_announce_unannounce_and_replace_change_the_announced_set(redis_url, make_server):
    server = make_server(redis_url, "s1")
    server.register_table(table_descriptor())
    a, b, c = segment(partition=0), segment(partition=1), segment(chunk=1)
    server.announce([a, b])
    assert [s.partition for s in server.announced_segments("accounts")] == [0, 1]
    assert all(s.server == "s1" for s in server.announced_segments("accounts"))
    server.unannounce([b])
    server.replace(add=[c], remove=[a])
    assert [s.id for s in server.announced_segments("accounts")] == [c.id]


def test_announcing_into_an_unregistered_table_is_refused(redis_url, make_server):
    server = make_server(redis_url, "s1")
    with pytest.raises(FailedPrecondition, match="not registered"):
        server.announce([segment(table="ghost")])


def test_report_claims_unowned_partitions_and_refuses_anothers(
    redis_url, make_server, redis_client
):
    first, second = make_server(redis_url, "s1"), make_server(redis_url, "s2")
    first.register()
    second.register()
    first.register_table(table_descriptor())
    first.report("accounts", {0: (1000, 900), 1: (800, 1200)})
    progress = first.partition_progress("accounts")
    assert (progress[0].owner, progress[0].ingested, progress[0].applied) == ("s1", 1000, 900)
    with pytest.raises(FailedPrecondition, match="owned by server s1"):
        second.report("accounts", {1: (5000, 5000)})
    found = read_table_lwm(redis_client, "accounts")
    assert found is not None and (found.lwm, found.laggard.server, found.laggard.partition) == (
        800,
        "s1",
        1,
    )


def test_read_table_lwm_handles_hlcs_beyond_double_precision(redis_url, make_server, redis_client):
    server = make_server(redis_url, "s1")
    server.register_table(table_descriptor())
    big = (1_800_000_000_000 << 16) | 12345
    server.report("accounts", {0: (big + 1, big + 2), 1: (big, big + 7)})
    found = read_table_lwm(redis_client, "accounts")
    assert found is not None and found.lwm == big and found.partitions == 2
    assert read_table_lwm(redis_client, "nothing") is None


def test_reports_reject_negative_timestamps(redis_url, make_server):
    server = make_server(redis_url, "s1")
    server.register_table(table_descriptor())
    with pytest.raises(InvalidArgument):
        server.report("accounts", {0: (-1, 5)})


def test_partition_allocation_is_collision_free_across_concurrent_servers(redis_url, make_server):
    servers = [make_server(redis_url, f"s{i}") for i in range(4)]
    servers[0].register_table(table_descriptor())
    chunk = Interval(0, 3_600_000)
    results: list[list[int]] = []
    lock = threading.Lock()

    def allocate(server) -> None:
        for _ in range(25):
            numbers = server.allocate_partitions("accounts", chunk, "v1", [0, 1, 2], 3)
            with lock:
                results.append(numbers)

    threads = [threading.Thread(target=allocate, args=(s,)) for s in servers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [n for numbers in results for n in numbers]
    assert sorted(everything) == list(range(300))
    overwrite = servers[1].allocate_overwrite_partitions("accounts", chunk, "v1", 2)
    assert overwrite == [32768, 32769]
    # Another version of the same chunk has its own numbers.
    assert servers[2].allocate_partitions("accounts", chunk, "v2", [0], 1) == [0]


def test_allocation_skips_partitions_already_announced_and_runs_out_clearly(redis_url, make_server):
    server = make_server(redis_url, "s1")
    server.register_table(table_descriptor())
    server.announce([segment(partition=5)])
    assert server.allocate_partitions("accounts", Interval(0, 3_600_000), "v1", [2, 3], 4) == [6, 7]
    server.announce([segment(partition=32_765)])
    assert server.allocate_partitions("accounts", Interval(0, 3_600_000), "v1", [7], 8) == [32_767]
    with pytest.raises(ResourceExhausted, match="partition numbers"):
        server.allocate_partitions("accounts", Interval(0, 3_600_000), "v1", [0], 8)


def test_key_partitions_draw_disjoint_numbers_even_when_the_counter_goes_back(
    redis_url, make_server, redis_client
):
    """A failover can roll the shared counter back; the owner of another key partition must
    still never be handed a number the first one holds (rule F4)."""
    first, second = make_server(redis_url, "s1"), make_server(redis_url, "s2")
    first.register_table(table_descriptor())
    chunk = Interval(0, 3_600_000)
    held = first.allocate_partitions("accounts", chunk, "v1", [1], 4)
    assert held == [1]
    for _ in range(5):
        held += first.allocate_partitions("accounts", chunk, "v1", [1], 4)
    redis_client.delete("horizon:t:accounts:alloc")  # the store forgot every number it gave out
    drawn = [
        n for _ in range(10) for n in second.allocate_partitions("accounts", chunk, "v1", [0, 2], 4)
    ]
    assert all(n % 4 == 1 for n in held)
    assert not set(held) & set(drawn)
    assert sorted(n % 4 for n in drawn[:2]) == [0, 2]


def test_allocating_for_a_key_partition_outside_the_table_is_refused(redis_url, make_server):
    server = make_server(redis_url, "s1")
    server.register_table(table_descriptor())
    with pytest.raises(InvalidArgument, match=r"not all in \[0, 4\)"):
        server.allocate_partitions("accounts", Interval(0, 3_600_000), "v1", [4], 4)


def test_claiming_a_partition_of_a_live_server_fails_but_a_dead_ones_is_taken(
    redis_url, make_server
):
    owner = make_server(redis_url, "owner", heartbeat_timeout_s=0.3)
    taker = make_server(redis_url, "taker", heartbeat_timeout_s=0.3)
    owner.register()
    taker.register()
    owner.register_table(table_descriptor())
    owner.report("accounts", {0: (700, 700)})
    with pytest.raises(FailedPrecondition, match="live server owner"):
        taker.claim_partitions("accounts", [0])
    time.sleep(0.45)  # the owner stops heart-beating
    taker.claim_partitions("accounts", [0, 1])
    progress = taker.partition_progress("accounts")
    assert progress[0].owner == "taker" and progress[0].ingested == 700  # progress carried
    assert progress[1].owner == "taker" and progress[1].ingested is None


def test_hand_over_moves_ownership_with_progress(redis_url, make_server, redis_client):
    giver, receiver = make_server(redis_url, "giver"), make_server(redis_url, "receiver")
    giver.register_table(table_descriptor())
    giver.report("accounts", {3: (400, 500)})
    giver.hand_over("accounts", 3, "receiver")
    giver.hand_over("accounts", 3, "receiver")  # a retried hand-over is harmless
    progress = receiver.partition_progress("accounts")[3]
    assert (progress.owner, progress.ingested, progress.applied) == ("receiver", 400, 500)
    assert read_table_lwm(redis_client, "accounts").lwm == 400
    with pytest.raises(FailedPrecondition, match="owned by server receiver"):
        giver.report("accounts", {3: (600, 600)})
    receiver.report("accounts", {3: (600, 650)})
    assert read_table_lwm(redis_client, "accounts").lwm == 600


def test_decommission_releases_partitions_and_keeps_segments(redis_url, make_server, redis_client):
    leaving, staying = make_server(redis_url, "leaving"), make_server(redis_url, "staying")
    leaving.register()
    staying.register()
    leaving.register_table(table_descriptor())
    leaving.announce([segment()])
    leaving.report("accounts", {0: (100, 100)})
    staying.report("accounts", {1: (900, 900)})
    leaving.decommission()
    assert read_table_lwm(redis_client, "accounts").lwm == 900
    assert leaving.partition_progress("accounts")[0].owner is None
    assert len(staying.announced_segments("accounts")) == 1
    with pytest.raises(FailedPrecondition, match="decommissioned"):
        leaving.heartbeat()


def test_server_republishes_its_state_when_redis_lost_its_data(
    redis_url, make_server, redis_client
):
    server = make_server(redis_url, "s1")
    server.register()
    server.register_table(table_descriptor())
    seg = segment(location="s3://bucket/a.parquet")
    server.announce([seg])
    server.report("accounts", {0: (300, 250)})
    server.report_retention_horizon("accounts", 10)
    assert server.allocate_partitions("accounts", Interval(0, 3_600_000), "v1", [0] * 4, 1) == [
        1,
        2,
        3,
        4,
    ]
    redis_client.flushall()
    server.heartbeat()  # any call notices and re-publishes first
    assert server.announced_segments("accounts") == [dataclasses.replace(seg, server="s1")]
    assert server.partition_progress("accounts")[0].applied == 250
    assert read_table_lwm(redis_client, "accounts").lwm == 250
    assert redis_client.hget("horizon:t:accounts:ret", "s1") == b"10"
    assert server.allocate_partitions("accounts", Interval(0, 3_600_000), "v1", [0], 1) == [5]


def test_a_republishing_server_registers_only_after_everything_else_is_back(
    redis_url, make_server, redis_client
):
    """Brokers carry a lost server's old state until it is registered in the new data set."""
    server = make_server(redis_url, "s1")
    server.register()
    server.register_table(table_descriptor())
    server.announce([segment()])
    server.claim_partitions("accounts", [0])
    server.report("accounts", {0: (300, 250)})
    redis_client.flushall()
    server.heartbeat()
    kinds = [fields[b"k"].decode() for _, fields in redis_client.xrange("horizon:log")]
    assert kinds[:5] == ["table", "segments", "claim", "report", "register"], kinds


def test_heartbeat_thread_republishes_within_a_heartbeat(redis_url, make_server, redis_client):
    server = make_server(redis_url, "s1")
    server.register()
    server.register_table(table_descriptor())
    server.start_heartbeats(0.05)
    redis_client.flushall()
    deadline = time.monotonic() + 3
    while redis_client.hget("horizon:tables", "accounts") is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert redis_client.hget("horizon:tables", "accounts") is not None
    server.stop_heartbeats()


def test_calls_raise_unavailable_after_a_bounded_retry(private_redis, make_server):
    process = private_redis(persistence=False)
    server = make_server(process.url, "s1", retry_timeout_s=0.5)
    server.register()
    process.stop(kill=True)
    started = time.monotonic()
    with pytest.raises(Unavailable, match="unreachable"):
        server.heartbeat()
    assert time.monotonic() - started < 5


def test_calls_survive_a_quick_redis_restart(private_redis, make_server):
    process = private_redis(persistence=True)
    server = make_server(process.url, "s1")
    server.register()
    server.register_table(table_descriptor())
    restart = threading.Thread(target=lambda: process.restart(kill=True))
    restart.start()
    for i in range(20):
        server.report("accounts", {0: (i, i)})
        time.sleep(0.01)
    restart.join()
    client = redis.Redis.from_url(process.url)
    assert read_table_lwm(client, "accounts").lwm == 19
    client.close()


def test_an_id_the_store_gives_to_other_files_is_refused_and_the_stored_segment_kept(
    redis_url, make_server
):
    """Overwriting would drop the first segment's rows without a trace (rule F4)."""
    first, second = make_server(redis_url, "s1"), make_server(redis_url, "s2")
    first.register_table(table_descriptor())
    mine = segment(partition=3, location=("/data/s1/batch-7/part-0.parquet",))
    first.announce([mine])
    first.announce([mine])  # the same segment again (a re-publish) changes nothing
    theirs = segment(partition=3, location=("/data/s2/batch-2/part-0.parquet",))
    with pytest.raises(SegmentIdReused, match="already announced by server s1 with other files"):
        second.announce([theirs])
    assert [s.location for s in second.announced_segments("accounts")] == [mine.location]


def test_segments_an_earlier_run_announced_are_re_published_once_remembered(
    redis_url, make_server, redis_client
):
    """A restarted server finds its old segments in the store; a later lost data set (or
    failover) must bring them back too, not only what this run announced (rule F4)."""
    earlier = make_server(redis_url, "s1")
    earlier.register_table(table_descriptor())
    old = segment(partition=0, location=("/data/s1/batch-1.parquet",))
    earlier.announce([old])
    earlier.close()
    restarted = make_server(redis_url, "s1")
    restarted.register()
    restarted.remember_announced(restarted.announced_segments("accounts"))
    redis_client.flushall()
    restarted.heartbeat()  # notices the lost data set and re-publishes first
    assert [s.location for s in restarted.announced_segments("accounts")] == [old.location]
