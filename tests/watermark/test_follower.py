"""The broker's Follower against a real redis-server."""

from __future__ import annotations

import dataclasses
import time

import pytest

from horizon_broker._core.errors import FailedPrecondition, NotFound, Unavailable
from horizon_broker.watermark.follower import Follower
from horizon_broker.watermark.read import read_table_lwm
from tests.watermark.conftest import caught_up, segment, table_descriptor


def synced(follower: Follower, url: str) -> None:
    assert follower.wait_for(lambda f: caught_up(f, url), 5), "follower did not catch up"


def test_follower_rebuilds_the_state_and_follows_new_changes(redis_url, make_server, make_follower):
    server = make_server(redis_url, "s1")
    server.register()
    server.register_table(table_descriptor())
    server.announce([segment(partition=0, core_partitions=1)])
    server.report("accounts", {0: (500, 400)})
    follower = make_follower(redis_url)
    assert follower.tables() == ["accounts"]
    assert follower.descriptor("accounts") == table_descriptor()
    view = follower.view("accounts")
    assert view.lwm == 400 and [s.partition for s in view.visible_segments] == [0]
    server.announce([segment(chunk=1, partition=0, core_partitions=1)])
    server.report("accounts", {0: (900, 800)})
    synced(follower, redis_url)
    view = follower.view("accounts")
    assert view.lwm == 800 and len(view.visible_segments) == 2
    assert follower.lwm("accounts") == 800
    assert follower.events_applied >= 2


def test_pinot_example_through_redis_gives_900_and_names_the_laggard(
    redis_url, make_server, make_follower, redis_client
):
    servers = [make_server(redis_url, f"server{i}") for i in (1, 2, 3)]
    servers[0].register_table(table_descriptor())
    follower = make_follower(redis_url)
    for number, server in enumerate(servers):
        server.register()
        server.claim_partitions("accounts", [number])
    synced(follower, redis_url)
    with pytest.raises(FailedPrecondition, match="no low-watermark yet"):
        follower.lwm("accounts")  # server3 has not ingested anything yet: no safe snapshot
    for number, (server, lwm) in enumerate(zip(servers, (1200, 1100, 900), strict=True)):
        server.report("accounts", {number: (lwm + 50, lwm)})
    synced(follower, redis_url)
    report = follower.watermarks("accounts")
    assert report.lwm == 900 and report.computed == 900
    assert (report.laggard.server, report.laggard.partition) == ("server3", 2)
    assert {row.owner: row.lwm for row in report.partitions} == {
        "server1": 1200,
        "server2": 1100,
        "server3": 900,
    }
    assert read_table_lwm(redis_client, "accounts").lwm == 900


def test_table_without_reports_fails_clearly_and_unknown_table_is_not_found(
    redis_url, make_server, make_follower
):
    make_server(redis_url, "s1").register_table(table_descriptor())
    follower = make_follower(redis_url)
    with pytest.raises(FailedPrecondition, match="no low-watermark yet"):
        follower.lwm("accounts")
    assert follower.view("accounts").lwm is None
    with pytest.raises(NotFound, match="ghost"):
        follower.lwm("ghost")
    with pytest.raises(NotFound):
        follower.view("ghost")


def test_served_lwm_never_decreases_and_the_fail_policy_refuses_queries(
    redis_url, make_server, make_follower
):
    server = make_server(redis_url, "s1")
    server.register_table(table_descriptor())
    keep = make_follower(redis_url)
    fail = make_follower(redis_url, regression_policy="fail")
    server.report("accounts", {0: (1000, 1000)})
    server.report("accounts", {0: (600, 700)})  # restarted from an old checkpoint
    for follower in (keep, fail):
        synced(follower, redis_url)
    assert keep.lwm("accounts") == 1000
    report = keep.watermarks("accounts")
    assert report.computed == 600 and report.lwm == 1000
    regression = report.active_regression
    assert regression is not None
    assert (regression.server, regression.partition, regression.from_lwm, regression.to_lwm) == (
        "s1",
        0,
        1000,
        600,
    )
    with pytest.raises(FailedPrecondition, match="regressed from 1000 to 600"):
        fail.lwm("accounts")
    server.report("accounts", {0: (1100, 1200)})
    synced(fail, redis_url)
    assert fail.lwm("accounts") == 1100
    assert fail.watermarks("accounts").active_regression is None
    assert len(fail.watermarks("accounts").regressions) == 1


def test_stale_server_is_shown_and_frozen_until_its_partition_is_taken_over(
    redis_url, make_server, make_follower
):
    follower = make_follower(redis_url, heartbeat_timeout_s=0.5)
    dead = make_server(redis_url, "dead", heartbeat_timeout_s=0.5)
    alive = make_server(redis_url, "alive", heartbeat_timeout_s=0.5)
    dead.register()
    alive.register()
    alive.start_heartbeats(0.05)
    dead.register_table(table_descriptor())
    dead.report("accounts", {0: (100, 100)})
    alive.report("accounts", {1: (500, 500)})
    synced(follower, redis_url)
    assert follower.watermarks("accounts").stale_servers == ()
    time.sleep(0.7)  # the dead server stops heart-beating
    alive.report("accounts", {1: (900, 900)})
    synced(follower, redis_url)
    report = follower.watermarks("accounts")
    assert report.stale_servers == ("dead",)
    assert report.lwm == 100 and report.laggard.server == "dead"  # frozen, still counts
    rows = {row.partition: row for row in report.partitions}
    assert rows[0].live is False and rows[1].live is True and rows[0].report_age_s >= 0.5
    alive.claim_partitions("accounts", [0])
    synced(follower, redis_url)
    assert follower.lwm("accounts") == 100  # progress carried: no jump, no regression
    alive.report("accounts", {0: (800, 850)})
    synced(follower, redis_url)
    assert follower.lwm("accounts") == 800
    assert follower.watermarks("accounts").regressions == ()


def test_hand_over_keeps_the_lwm_from_going_backwards(redis_url, make_server, make_follower):
    giver, receiver = make_server(redis_url, "giver"), make_server(redis_url, "receiver")
    giver.register()
    receiver.register()
    giver.register_table(table_descriptor())
    giver.report("accounts", {0: (700, 700), 1: (900, 900)})
    follower = make_follower(redis_url)
    seen: list[int | None] = []
    follower.add_listener(lambda table: seen.append(follower.view(table).lwm))
    giver.hand_over("accounts", 0, "receiver")
    receiver.report("accounts", {0: (950, 950)})
    synced(follower, redis_url)
    assert follower.lwm("accounts") == 900
    assert seen == sorted(seen) and None not in seen
    row = next(r for r in follower.watermarks("accounts").partitions if r.partition == 0)
    assert row.owner == "receiver"
    assert follower.watermarks("accounts").regressions == ()


def test_decommissioned_server_stops_counting(redis_url, make_server, make_follower):
    leaving, staying = make_server(redis_url, "leaving"), make_server(redis_url, "staying")
    leaving.register()
    staying.register()
    leaving.register_table(table_descriptor())
    leaving.report("accounts", {0: (100, 100)})
    staying.report("accounts", {1: (900, 900)})
    follower = make_follower(redis_url)
    assert follower.lwm("accounts") == 100
    leaving.decommission()
    synced(follower, redis_url)
    assert follower.lwm("accounts") == 900
    rows = {r.partition: r for r in follower.watermarks("accounts").partitions}
    assert rows[0].owner is None


def _two_versions(redis_url, make_server):  # type: ignore[no-untyped-def]
    """A server announcing versions v1 and v2 of one chunk; returns it and the v2 segment."""
    server = make_server(redis_url, "s1")
    server.register()
    server.register_table(table_descriptor())
    old = segment(version="v1", partition=0, core_partitions=1)
    new = segment(version="v2", partition=0, core_partitions=1)
    server.announce([old, new])
    return server, new


def test_unreadable_segment_stays_out_across_a_resync(
    redis_url, make_server, make_follower, redis_client
):
    server, new = _two_versions(redis_url, make_server)
    follower = make_follower(redis_url)
    assert [s.version for s in follower.view("accounts").visible_segments] == ["v2"]
    generation = follower.view("accounts").generation
    assert follower.mark_unreadable(new.id) is True
    view = follower.view("accounts")
    assert [s.version for s in view.visible_segments] == ["v1"] and view.generation > generation
    redis_client.flushall()  # Redis loses its data; the server re-publishes both segments
    server.heartbeat()
    assert follower.wait_for(lambda f: caught_up(f, redis_url) and f.full_syncs >= 2, 5)
    assert [s.version for s in follower.view("accounts").visible_segments] == ["v1"]
    server.announce([new])  # announced again later: still known unreadable here
    synced(follower, redis_url)
    assert [s.version for s in follower.view("accounts").visible_segments] == ["v1"]


def test_an_unreadable_segment_is_listed_with_its_fallback_and_visible_again_once_cleared(
    redis_url, make_server, make_follower, redis_client
):
    server, new = _two_versions(redis_url, make_server)
    follower = make_follower(redis_url)
    assert follower.view("accounts").fallbacks == ()
    assert follower.mark_unreadable(new.id, "file gone") is True
    (fallback,) = follower.view("accounts").fallbacks
    assert fallback.lost.id == new.id and fallback.mark.reason == "file gone"
    assert [s.version for s in fallback.before] == ["v2"]
    assert [s.version for s in fallback.after] == ["v1"]
    ((listed, mark),) = follower.unreadable()
    assert listed.id == new.id and mark.since_ms > 0 and mark.checked_ms == 0
    follower.still_unreadable(new.id)
    assert follower.unreadable()[0][1].checked_ms >= mark.since_ms
    redis_client.flushall()  # a resync keeps the mark and its reason
    server.heartbeat()
    assert follower.wait_for(lambda f: caught_up(f, redis_url) and f.full_syncs >= 2, 5)
    assert follower.unreadable()[0][1].reason == "file gone"
    generation = follower.view("accounts").generation
    assert follower.clear_unreadable(new.id) is True
    view = follower.view("accounts")
    assert [s.version for s in view.visible_segments] == ["v2"] and view.generation > generation
    assert view.fallbacks == () and follower.unreadable() == []
    assert follower.clear_unreadable(new.id) is False


def test_retention_horizon_is_the_highest_reported(redis_url, make_server, make_follower):
    first, second = make_server(redis_url, "s1"), make_server(redis_url, "s2")
    first.register_table(table_descriptor())
    follower = make_follower(redis_url)
    assert follower.view("accounts").retention_horizon == 0
    first.report_retention_horizon("accounts", 300)
    second.report_retention_horizon("accounts", 200)
    synced(follower, redis_url)
    assert follower.view("accounts").retention_horizon == 300


def test_unreachable_redis_keeps_the_last_state_reports_staleness_then_fails(
    private_redis, make_server, make_follower
):
    process = private_redis(persistence=True)
    server = make_server(process.url, "s1")
    server.register_table(table_descriptor())
    server.report("accounts", {0: (42, 42)})
    now = [0.0]
    follower = make_follower(process.url, max_staleness_s=30, clock=lambda: now[0])
    assert follower.staleness_s() == 0 and follower.lwm("accounts") == 42
    process.stop(kill=True)
    assert follower.wait_for(lambda f: f.staleness_s() > 0 or not f._following, 5)
    now[0] += 10
    assert 9 <= follower.staleness_s() <= 11
    assert follower.lwm("accounts") == 42  # an older snapshot is still a consistent one
    assert follower.view("accounts").staleness_s >= 9
    now[0] += 25
    with pytest.raises(Unavailable, match="stale"):
        follower.lwm("accounts")
    process.start()
    server.report("accounts", {0: (50, 50)})
    assert follower.wait_for(lambda f: f.view("accounts").lwm == 50, 10)
    assert follower.staleness_s() == 0


def test_listener_is_called_with_the_changed_table(redis_url, make_server, make_follower):
    server = make_server(redis_url, "s1")
    server.register_table(table_descriptor("a"))
    server.register_table(table_descriptor("b"))
    follower = make_follower(redis_url)
    calls: list[str] = []
    follower.add_listener(calls.append)
    server.announce([segment(table="b")])
    synced(follower, redis_url)
    assert calls == ["b"]


def test_a_rebuilt_timeline_never_reuses_an_earlier_generation(
    redis_url, make_server, make_follower, redis_client
):
    """Brokers cache one Spark view per (table, generation): after a resync the same number must
    never stand for a different set of segments."""
    server = make_server(redis_url, "s1")
    server.register()
    server.register_table(table_descriptor())
    first = segment(version="v1", partition=0, core_partitions=0)
    second = segment(version="v1", partition=1, core_partitions=0)
    follower = make_follower(redis_url)
    server.announce([first])
    server.announce([second])
    server.unannounce([first])  # three changes followed one by one: generation 3
    synced(follower, redis_url)
    before = follower.view("accounts").generation
    follower.stop()
    server.announce([first])
    server.heartbeat()
    redis_client.xtrim("horizon:log", maxlen=1, approximate=False)  # announce gone: rebuild
    follower.start()
    assert follower.wait_for(lambda f: caught_up(f, redis_url) and f.full_syncs >= 2, 10)
    view = follower.view("accounts")
    assert len(view.visible_segments) == 2
    assert view.generation > before


def test_a_follower_started_before_any_server_follows_without_a_warning(
    redis_url, make_server, make_follower, caplog
):
    follower = make_follower(redis_url)  # nothing in Redis yet: no epoch to know
    with caplog.at_level("INFO", logger="horizon_broker.watermark.follower"):
        server = make_server(redis_url, "s1")
        server.register()
        server.register_table(table_descriptor())
        server.announce([segment(partition=0, core_partitions=1)])
        server.report("accounts", {0: (500, 400)})
        synced(follower, redis_url)
    assert follower.lwm("accounts") == 400
    discontinuities = [r for r in caplog.records if "discontinuity" in r.getMessage()]
    assert all(record.levelname == "INFO" for record in discontinuities)


def test_preparers_see_the_files_of_added_segments_before_the_segments_are_visible(
    redis_url, make_server, make_follower
):
    """Only files inside the table's storage root are shown: applying refuses the others, and a
    preparer reads what it is shown."""
    server = make_server(redis_url, "s1")
    server.register()
    server.register_table(dataclasses.replace(table_descriptor(), storage_root="/data"))
    server.report("accounts", {0: (500, 400)})
    follower = make_follower(redis_url)
    seen: list[tuple[dict, int]] = []

    def prepare(added) -> None:  # type: ignore[no-untyped-def]
        files = {
            table: [p for s in segments for p in s.location] for table, segments in added.items()
        }
        seen.append((files, len(follower.view("accounts").visible_segments)))

    def broken(added) -> None:  # type: ignore[no-untyped-def]
        raise RuntimeError("a preparer that fails")

    follower.add_preparer(broken)
    follower.add_preparer(prepare)
    server.announce(
        [
            segment(partition=0, core_partitions=2, location=("/data/a.parquet",)),
            segment(
                partition=1, core_partitions=2, location=("/data/b.parquet", "/data/c.parquet")
            ),
            segment(chunk=2, partition=0, core_partitions=1, location=("/etc/passwd",)),
        ]
    )
    synced(follower, redis_url)
    assert len(follower.view("accounts").visible_segments) == 2, "a failing preparer blocks nothing"
    added = {"accounts": ["/data/a.parquet", "/data/b.parquet", "/data/c.parquet"]}
    assert seen == [(added, 0)], "shown every accepted file, while no segment was yet visible"
    follower.remove_preparer(prepare)
    server.announce(
        [segment(chunk=1, partition=0, core_partitions=1, location=("/data/d.parquet",))]
    )
    synced(follower, redis_url)
    assert len(seen) == 1, "a removed preparer is not called"
