"""A failover that rolls the shared partition counter back must not let two servers' batches
share one segment id (rule F4 of docs/design/contract/failover.md), on a real Sentinel group.

Server s2's last batches are acknowledged by the old primary alone; the promoted replica has
never seen their numbers. Before s2 publishes again, server s1 allocates on the new primary.
Found by the 30-minute fault run (bench/runs/2026-11-29-chaos-1800-anomalies/): s1 was handed
s2's numbers, and one server's acknowledged batch vanished from the store and every broker.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from chaos.sentinel_group import SentinelGroup
from horizon_broker.ingest.reconcile import announced_files
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.follower import Follower
from horizon_broker.watermark.server import ServerClient
from tests.watermark.conftest import segment, table_descriptor

TABLE = "bank"
HOUR = Interval(0, 3_600_000)
KEY_PARTITIONS = 2
DESCRIPTOR = dataclasses.replace(
    table_descriptor(TABLE, key_partitions=KEY_PARTITIONS), storage_root="/data"
)


@contextmanager
def two_servers(
    group: SentinelGroup, heartbeat_timeout_s: float = 60
) -> Iterator[tuple[ServerClient, ServerClient]]:
    servers = [
        ServerClient(group.url, name, heartbeat_timeout_s=heartbeat_timeout_s)
        for name in ("s1", "s2")
    ]
    try:
        for server, partition in zip(servers, range(KEY_PARTITIONS), strict=True):
            server.register()
            server.register_table(DESCRIPTOR)
            server.claim_partitions(TABLE, [partition])
        yield servers[0], servers[1]
    finally:
        for server in servers:
            server.close()


def batch(server: ServerClient, partition: int, commit: int) -> Segment:
    """Allocate, announce and report one first-generation segment, as a batch does."""
    (number,) = server.allocate_partitions(TABLE, HOUR, "v1", [partition], KEY_PARTITIONS)
    written = segment(
        TABLE,
        partition=number,
        core_partitions=0,
        max_valid_from=commit,
        location=(f"/data/{server.server_id}/batch-{commit}.parquet",),
    )
    server.announce([written])
    server.report(TABLE, {partition: (commit, commit)})
    return written


def stored_files(server: ServerClient) -> dict[object, tuple[str, ...]]:
    return announced_files(server.announced_segments(TABLE))


@pytest.mark.parametrize("s2", ["keeps running", "dies and restarts"])
def test_a_failover_never_hands_one_partition_number_to_two_servers(group: SentinelGroup, s2: str):
    follower = Follower(group.url, heartbeat_timeout_s=60, max_staleness_s=None)
    # A server that died counts as live until its heartbeat times out: keep that short.
    with two_servers(group, 60 if s2 == "keeps running" else 3) as (first, second):
        try:
            batch(first, 0, 100)
            batch(second, 1, 101)
            follower.start()
            follower.wait_until_synced(10)
            group.cut_replication()
            acknowledged = [batch(first, 0, 200), batch(second, 1, 201), batch(second, 1, 202)]
            time.sleep(0.5)  # the follower applies them from the old primary
            if s2 == "dies and restarts":
                second.close()
            group.fail_over()
            group.heal_replication()
            if s2 == "keeps running":
                late = threading.Timer(1.0, second.heartbeat)  # its first call on the new primary
                late.start()
                acknowledged += [batch(first, 0, 300), batch(first, 0, 301)]
                late.join()
            else:
                acknowledged += [batch(first, 0, 300), batch(first, 0, 301)]
                second = ServerClient(group.url, "s2", heartbeat_timeout_s=60)
                present = stored_files(second)
                lost = [s for s in acknowledged[1:3] if present.get(s.id) != s.location]
                second.announce(lost)  # what reconcile announces again from the commit log
            ids = [s.id for s in acknowledged]
            assert len(set(ids)) == len(ids), f"one id for two batches: {ids}"
            assert {s.id: s.location for s in acknowledged}.items() <= stored_files(first).items()
            assert follower.wait_for(lambda f: not f.held(), 10)
            visible = {(s.id, s.location) for s in follower.view(TABLE).visible_segments}
            assert {(s.id, s.location) for s in acknowledged} <= visible
        finally:
            follower.stop()
            second.close()


def test_no_number_is_handed_out_until_every_live_server_published_again(group: SentinelGroup):
    """Overwrite numbers share one counter per chunk and version: after a failover a live server
    may hold numbers the new primary never saw, so nobody draws until it re-published them."""
    with two_servers(group) as (first, second):
        first.allocate_overwrite_partitions(TABLE, HOUR, "v1", 1)
        group.cut_replication()
        held = second.allocate_overwrite_partitions(TABLE, HOUR, "v1", 2)  # old primary alone
        group.fail_over()
        group.heal_replication()
        late = threading.Timer(1.0, second.heartbeat)  # its first call on the new primary
        late.start()
        try:
            drawn = first.allocate_overwrite_partitions(TABLE, HOUR, "v1", 2)
        finally:
            late.join()
        assert not set(held) & set(drawn), f"{held} handed out again as {drawn}"


def test_numbers_of_a_server_down_across_a_failover_are_not_handed_out_again(
    group: SentinelGroup,
):
    """A server whose heartbeat timed out cannot re-publish what it reserved, so the fence no
    longer waits for it: the others reserve what its commit log names (here a list standing in
    for the log in storage) before they draw again (rule F4)."""
    with two_servers(group, heartbeat_timeout_s=1) as (first, second):
        logged: list[Segment] = []
        first.follow_numbers_of("table bank", lambda: list(logged))
        first.allocate_overwrite_partitions(TABLE, HOUR, "v1", 1)
        group.cut_replication()
        held = second.allocate_overwrite_partitions(TABLE, HOUR, "v1", 2)  # old primary alone
        logged += [
            segment(
                TABLE,
                partition=n,
                root_start=1,
                root_end=2,
                minor_version=1,
                location=(f"/data/s2/u{n}",),
            )
            for n in held
        ]
        second.close()  # down, with its update committed in its log
        group.fail_over()
        group.heal_replication()
        time.sleep(1.5)  # its heartbeat times out: the fence no longer waits for it
        drawn = first.allocate_overwrite_partitions(TABLE, HOUR, "v1", 2)
        assert not set(held) & set(drawn), f"{held} handed out again as {drawn}"
        assert min(drawn) > max(held)
