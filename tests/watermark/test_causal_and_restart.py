"""Causal order under concurrency, and Redis / follower restarts mid-stream."""

from __future__ import annotations

import threading
import time

import pytest

from horizon_broker.watermark.follower import Follower
from tests.watermark.conftest import caught_up, segment, table_descriptor

SERVERS = 3
STEPS = 40


def produce(
    make_server, url: str, *, retry_timeout_s: float = 10.0, pause_s: float = 0.0
) -> list[threading.Thread]:
    """Each server k, step i: announce segment (chunk i, partition k), then report HLC i."""
    clients = [make_server(url, f"s{k}", retry_timeout_s=retry_timeout_s) for k in range(SERVERS)]
    clients[0].register_table(table_descriptor())
    for k, client in enumerate(clients):
        client.register()
        client.claim_partitions("accounts", [k])

    def run(k: int) -> None:
        for i in range(1, STEPS + 1):
            clients[k].announce([segment(chunk=i, partition=k)])
            clients[k].report("accounts", {k: (i, i)})
            time.sleep(pause_s)

    return [threading.Thread(target=run, args=(k,)) for k in range(SERVERS)]


def watch_coverage(follower: Follower) -> tuple[list[str], list[int]]:
    """After every change: each segment a served LWM covers is visible. Returns the violations
    and the LWMs observed, filled in as the follower goes."""
    violations: list[str] = []
    observed: list[int] = []

    def check(table: str) -> None:
        view = follower.view(table)
        if view.lwm is None:
            return
        observed.append(view.lwm)
        present = {(s.interval.start_ms // 3_600_000, s.partition) for s in view.visible_segments}
        for i in range(1, view.lwm + 1):
            for k in range(SERVERS):
                if (i, k) not in present:
                    violations.append(f"lwm {view.lwm} but segment ({i}, {k}) missing")

    follower.add_listener(check)
    return violations, observed


def test_lwm_never_covers_a_change_whose_segment_is_not_in_the_timeline(
    redis_url, make_server, make_follower
):
    follower = make_follower(redis_url)
    violations, observed = watch_coverage(follower)
    threads = produce(make_server, redis_url)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert follower.wait_for(lambda f: caught_up(f, redis_url), 10)
    assert violations == []
    assert observed == sorted(observed) and observed[-1] == STEPS


def comparable(follower: Follower) -> dict:
    """What must be equal between two followers of the same Redis (ages and counters aside)."""
    result = {}
    for table in follower.tables():
        view = follower.view(table)
        report = follower.watermarks(table)
        result[table] = {
            "segments": sorted(str(s.id) for s in view.visible_segments),
            "all": sorted(
                str(s.id)
                for c in follower.timeline_snapshot(table).chunks
                for g in c.groups
                for s in g.segments
            ),
            "lwm": report.lwm,
            "computed": report.computed,
            "partitions": [
                (r.partition, r.owner, r.ingested, r.applied) for r in report.partitions
            ],
        }
    return result


@pytest.mark.parametrize("persistence", [True, False], ids=["appendonly", "no-persistence"])
def test_redis_restart_mid_stream_then_fresh_follower_matches_the_one_that_kept_running(
    persistence, private_redis, make_server, make_follower
):
    process = private_redis(persistence=persistence)
    running = make_follower(process.url)
    violations, observed = watch_coverage(running)
    threads = produce(make_server, process.url, pause_s=0.01)
    for thread in threads:
        thread.start()
    assert running.wait_for(
        lambda f: "accounts" in f.tables() and (f.view("accounts").lwm or 0) >= 5, 10
    )
    process.stop(kill=True)  # crash: without persistence every key is gone
    assert all(thread.is_alive() for thread in threads), "the outage must hit mid-stream"
    time.sleep(0.3)  # servers retry meanwhile
    process.start()
    for thread in threads:
        thread.join()
    if not persistence:
        assert running.full_syncs >= 2  # it noticed the new data set and rebuilt
    assert running.wait_for(lambda f: caught_up(f, process.url), 15)
    assert running.lwm("accounts") == STEPS
    restarted = make_follower(process.url)
    assert restarted.wait_for(lambda f: caught_up(f, process.url), 10)
    assert comparable(restarted) == comparable(running)
    assert len(comparable(running)["accounts"]["segments"]) == SERVERS * STEPS
    assert running.watermarks("accounts").regressions == ()
    assert violations == [] and observed == sorted(observed)


def test_trimmed_log_forces_a_full_rebuild_with_nothing_missed(
    redis_url, make_server, make_follower, redis_client
):
    follower = make_follower(redis_url)
    follower.stop()  # it falls behind while the log is trimmed
    threads = produce(make_server, redis_url)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    redis_client.xtrim("horizon:log", maxlen=5)
    follower.start()
    assert follower.wait_for(lambda f: caught_up(f, redis_url), 10)
    assert follower.full_syncs >= 2
    fresh = make_follower(redis_url)
    assert comparable(fresh) == comparable(follower)
