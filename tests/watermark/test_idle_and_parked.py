"""Idle and parked partitions (rule 7 of ``docs/design/contract/watermarks.md``) through a real
redis-server: the Lua scripts apply the pure rules, the follower serves quiet partitions at their
clocks, and resuming lands above every snapshot served."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from horizon_broker._core.errors import FailedPrecondition
from horizon_broker._core.hlc import hlc_from_ms, last_hlc_of_ms
from horizon_broker.watermark.follower import Follower
from horizon_broker.watermark.lwm import (
    ACTIVE,
    IDLE,
    PARKED,
    Clocks,
    PartitionProgress,
    compute_lwm,
)
from horizon_broker.watermark.partition_states import claimed, parked, reported
from horizon_broker.watermark.read import read_table_lwm
from tests.watermark.conftest import caught_up, table_descriptor

FIXED_MS = 4_000_000_000_000
"""A store clock far ahead of Redis's own: every script then sees exactly this time."""


def synced(follower: Follower, url: str) -> None:
    assert follower.wait_for(lambda f: caught_up(f, url), 5), "follower did not catch up"


def served(follower: Follower, table: str = "accounts") -> int | None:
    return follower.view(table).lwm


def test_an_idle_partition_follows_its_servers_heartbeats_and_a_busy_one_holds(
    redis_url, make_server, make_follower
):
    server = make_server(redis_url, "s1")
    server.register()
    for name in ("accounts", "orders"):
        server.register_table(table_descriptor(name))
    server.report("accounts", {0: (100, 100)}, idle=[0])
    server.report("orders", {0: (100, 90)})  # an update pending: busy
    follower = make_follower(redis_url)
    seen = []
    for _ in range(3):
        server.heartbeat()
        synced(follower, redis_url)
        seen.append(served(follower))
        assert served(follower, "orders") == 90
    assert seen == sorted(seen) and len(set(seen)) == 3 and seen[0] > 100
    report = follower.watermarks("accounts")
    assert report.partitions[0].state == IDLE and report.partitions[0].lwm == seen[-1]
    assert report.server_clocks == {"s1": seen[-1]}


def test_reporting_an_idle_partition_busy_resumes_it_above_the_clock_the_broker_served(
    redis_url, make_server, make_follower
):
    server = make_server(redis_url, "s1")
    server.register()
    server.register_table(table_descriptor())
    server.report("accounts", {0: (100, 100), 1: (100, 100)}, idle=[0, 1])
    server.heartbeat()
    follower = make_follower(redis_url)
    before = served(follower)
    floor = server.resume("accounts", [0])
    assert floor is not None and floor >= before and server.clock.now() > floor
    assert server.partition_progress("accounts")[0].ingested == floor
    synced(follower, redis_url)
    assert served(follower) == before  # partition 0 stands at the floor, not below
    assert follower.watermarks("accounts").regressions == ()


def test_a_parked_partition_follows_the_stores_clock_and_a_new_owner_resumes_above_it(
    redis_url, make_server, make_follower
):
    first = make_server(redis_url, "s1")
    first.register()
    first.register_table(table_descriptor())
    first.report("accounts", {0: (100, 100)}, idle=[0])
    follower = make_follower(redis_url)
    assert first.park() == []
    synced(follower, redis_url)
    report = follower.watermarks("accounts")
    assert report.partitions[0].state == PARKED and report.stale_servers == ()
    assert report.server_status == {"s1": "parked"}
    start = served(follower)
    assert follower.wait_for(lambda f: served(f) > start, 5), "the parked LWM never moved"
    second = make_server(redis_url, "s2")
    second.register()
    high = served(follower)
    floor = second.claim_partitions("accounts", [0])
    assert floor is not None and floor >= high
    stamp = second.clock.now()
    assert stamp > floor
    synced(follower, redis_url)
    report = follower.watermarks("accounts")
    assert report.partitions[0].owner == "s2" and report.partitions[0].state == ACTIVE
    assert report.regressions == ()


def test_resuming_also_lands_above_the_highest_snapshot_a_broker_served(
    redis_url, make_server, redis_client
):
    server = make_server(redis_url, "s1")
    server.register()
    server.register_table(table_descriptor())
    server.report("accounts", {0: (100, 100)}, idle=[0])
    floor = hlc_from_ms(FIXED_MS)
    redis_client.hset("horizon:floor", "accounts", str(floor))
    assert server.resume("accounts", [0]) == floor
    assert server.clock.now() > floor


def test_a_server_that_dies_without_parking_freezes_its_idle_partitions(
    redis_url, make_server, make_follower
):
    dead = make_server(redis_url, "dead", heartbeat_timeout_s=0.5)
    dead.register()
    dead.register_table(table_descriptor())
    dead.report("accounts", {0: (100, 100)}, idle=[0])
    dead.heartbeat()
    other = make_server(redis_url, "other")
    other.register()
    far = hlc_from_ms(FIXED_MS)
    other.report("accounts", {1: (far, far)})
    follower = make_follower(redis_url, heartbeat_timeout_s=0.5)
    frozen = served(follower)
    for _ in range(3):
        other.heartbeat()  # the store's clock and other's clock run on
    synced(follower, redis_url)
    assert served(follower) == frozen
    assert follower.wait_for(lambda f: "dead" in f.watermarks("accounts").stale_servers, 5)
    assert follower.watermarks("accounts").partitions[0].state == IDLE


def test_parking_leaves_a_partition_with_pending_updates_frozen_and_says_so(redis_url, make_server):
    server = make_server(redis_url, "s1")
    server.register()
    server.register_table(table_descriptor())
    server.report("accounts", {0: (100, 100), 1: (100, 80)}, idle=[0])
    assert server.park() == [("accounts", 1)]
    progress = server.partition_progress("accounts")
    assert (progress[0].state, progress[1].state) == (PARKED, ACTIVE)


def test_a_parked_server_must_register_again_before_it_heartbeats(redis_url, make_server):
    server = make_server(redis_url, "s1")
    server.register()
    server.register_table(table_descriptor())
    server.report("accounts", {0: (100, 100)}, idle=[0])
    server.park()
    with pytest.raises(FailedPrecondition, match="parked"):
        server.heartbeat()
    server.register()
    server.heartbeat()
    assert server.claim_partitions("accounts", [0]) is not None


def test_read_table_lwm_counts_quiet_partitions_at_their_clocks(
    redis_url, make_server, redis_client
):
    redis_client.set("horizon:clock", str(FIXED_MS))
    server = make_server(redis_url, "s1")
    server.register()
    server.register_table(table_descriptor())
    busy = hlc_from_ms(FIXED_MS + 10)
    server.report("accounts", {0: (busy, busy), 1: (5, 5), 2: (7, 7)}, idle=[1, 2])
    server.heartbeat()  # its clock is far below the store's fixed one
    found = read_table_lwm(redis_client, "accounts")
    clock = server.partition_progress("accounts")[1]
    assert clock.state == IDLE
    assert found is not None and found.partitions == 3 and found.laggard.state == IDLE
    assert found.lwm < busy
    server.park(stop=False)
    found = read_table_lwm(redis_client, "accounts")
    assert (found.lwm, found.laggard.state) == (last_hlc_of_ms(FIXED_MS), PARKED)


def test_a_restarted_follower_rebuilds_idle_and_parked_partitions(
    redis_url, make_server, make_follower
):
    server = make_server(redis_url, "s1")
    server.register()
    for name in ("accounts", "orders"):
        server.register_table(table_descriptor(name))
    server.report("accounts", {0: (100, 100)}, idle=[0])
    server.report("orders", {0: (100, 100)}, idle=[0])
    server.heartbeat()
    first = make_follower(redis_url)
    server.park()
    synced(first, redis_url)
    again = make_follower(redis_url)
    for table in ("accounts", "orders"):
        assert again.watermarks(table).partitions[0].state == PARKED
        assert served(again, table) >= served(first, table) > 100


# -- the scripts against the pure rules --------------------------------------------------------

SERVERS = ("s1", "s2", "s3")
operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("report"),
            st.sampled_from(SERVERS),
            st.integers(0, 2),
            st.integers(0, 40),
            st.booleans(),
        ),
        st.tuples(st.just("heartbeat"), st.sampled_from(SERVERS), st.integers(0, 40)),
        st.tuples(st.just("park"), st.sampled_from(SERVERS), st.booleans()),
        st.tuples(st.just("claim"), st.sampled_from(SERVERS), st.integers(0, 2)),
        st.tuples(st.just("floor"), st.integers(0, 40)),
    ),
    max_size=25,
)


def _hlc(offset: int) -> int:
    return hlc_from_ms(FIXED_MS - 50) + offset * 1000


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=operations)
def test_the_lua_scripts_apply_the_pure_rules(steps, redis_server, make_server) -> None:
    import redis as redis_lib

    direct = redis_lib.Redis.from_url(redis_server.url)
    direct.flushall()
    direct.set("horizon:clock", str(FIXED_MS))
    clients = {name: make_server(redis_server.url, name) for name in SERVERS}
    for client in clients.values():
        client.register()
    clients["s1"].register_table(table_descriptor())
    replay = _Replay(direct, clients)
    for step in steps:
        kind, *args = step
        getattr(replay, kind)(*args)
        replay.check(step)
    direct.close()


class _Replay:
    """The servers' calls through the Lua scripts beside the pure rules' model of them."""

    def __init__(self, direct, clients) -> None:
        self.direct = direct
        self.clients = clients
        self.model: dict[int, PartitionProgress] = {}
        self.hb: dict[str, int] = {}
        self.status = dict.fromkeys(SERVERS, "live")
        self.served_floor = 0
        self.counter = itertools.count(1)

    def clocks(self) -> Clocks:
        return Clocks(dict(self.hb), FIXED_MS)

    def report(self, name: str, partition: int, value: int, idle: bool) -> None:
        entry = self.model.get(partition)
        client = self.clients[name]
        if entry is not None and entry.owner not in (None, name):
            with pytest.raises(FailedPrecondition):
                client.report("accounts", {partition: (_hlc(value), _hlc(value))})
            return
        if self.status[name] != "live":
            client.register()
            self.status[name] = "live"
        quiet = [partition] if idle else []
        client.report("accounts", {partition: (_hlc(value), _hlc(value))}, idle=quiet)
        self.model[partition], _ = reported(
            entry, name, _hlc(value), _hlc(value), idle=idle, now_ms=FIXED_MS,
            clocks=self.clocks(), served_floor=self.served_floor,
        )  # fmt: skip

    def heartbeat(self, name: str, value: int) -> None:
        if self.status[name] != "live":
            return
        client = self.clients[name]
        client.clock.observe(_hlc(value) + next(self.counter))
        client.heartbeat()
        self.hb[name] = max(self.hb.get(name, 0), client.clock.last)

    def park(self, name: str, stops: bool) -> None:
        if self.status[name] != "live":
            return
        self.clients[name].park(stop=stops)
        for partition, entry in self.model.items():
            if entry.owner == name and entry.state == IDLE:
                self.model[partition] = parked(entry, FIXED_MS, self.clocks())  # type: ignore[assignment]
        if stops:
            self.status[name] = "parked"

    def claim(self, name: str, partition: int) -> None:
        owner = self.model.get(partition, PartitionProgress(None)).owner
        if self.status[name] != "live":
            return
        if owner not in (None, name) and self.status[owner] == "live":
            with pytest.raises(FailedPrecondition, match="live server"):
                self.clients[name].claim_partitions("accounts", [partition])
            return
        self.clients[name].claim_partitions("accounts", [partition])
        entry, _ = claimed(self.model.get(partition), name, self.clocks(), self.served_floor)
        self.model[partition] = entry

    def floor(self, value: int) -> None:
        self.served_floor = _hlc(value)
        self.direct.hset("horizon:floor", "accounts", str(self.served_floor))

    def check(self, step) -> None:
        """Every partition's stored progress, and the table's LWM, are the model's."""
        stored = self.clients["s1"].partition_progress("accounts")
        for partition, entry in self.model.items():
            got = stored[partition]
            assert (got.owner, got.ingested, got.applied, got.state, got.floor) == (
                entry.owner, entry.ingested, entry.applied, entry.state, entry.floor
            ), (step, got, entry)  # fmt: skip
            assert got.since_ms == entry.since_ms
        found = read_table_lwm(self.direct, "accounts")
        expected = compute_lwm(self.model, self.clocks())
        assert (found is None) == (expected is None)
        if found is not None and expected is not None:
            assert found.lwm == expected.lwm
