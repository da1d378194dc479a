"""A follower that never reconnects still notices a log that went back under it (rule F5 of
docs/design/contract/failover.md): each event names its predecessor, so events a new history
writes under sequence numbers the follower already applied are never skipped.

The store going back is made by hand on one real Redis, as a promoted replica would leave it: the
last two events, their announcement and report, and the log's position are taken back, while the
follower stays connected (a failover that neither kills nor demotes its primary)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

from horizon_broker.watermark.follower import Follower
from horizon_broker.watermark.server import ServerClient
from tests.watermark.conftest import segment, table_descriptor

TABLE = "accounts"


def _take_back_last_events(client: redis.Redis, count: int) -> None:
    """The store as a replica that missed the last ``count`` events: log, position, state."""
    seq = int(client.get("horizon:seq"))
    kept_entries = client.xrange("horizon:log", "-", f"{seq - count}-0")
    client.delete("horizon:log")  # a stream never takes ids below its top: rebuilt as it was
    for entry_id, fields in kept_entries:
        client.xadd("horizon:log", fields, id=entry_id)
    kept = kept_entries[-1][1]
    client.set("horizon:seq", seq - count)
    client.set("horizon:last", kept[b"t"] + b"|" + kept[b"s"])
    client.hdel(f"horizon:t:{TABLE}:segs", '[3600000,7200000,"v1",0]')


@contextmanager
def _gone_back_under_a_follower(
    redis_client: redis.Redis, redis_server: Any
) -> Iterator[tuple[ServerClient, Follower]]:
    """A server that announced chunks 0 and 1 and reported, a follower that applied it all, then
    the store taken back by the last two events (chunk 1's announcement and the report)."""
    server = ServerClient(redis_server.url, "s1")
    follower = Follower(redis_server.url, heartbeat_timeout_s=60)
    try:
        server.register()
        server.register_table(table_descriptor(TABLE))
        server.announce([segment(TABLE, chunk=0)])
        follower.start()
        follower.wait_until_synced(10)
        server.announce([segment(TABLE, chunk=1)])
        server.report(TABLE, {0: (2000, 2000)})
        position = int(redis_client.get("horizon:seq"))
        assert follower.wait_for(lambda f: f.state_seq == position, 10)
        _take_back_last_events(redis_client, 2)
        yield server, follower
    finally:
        follower.stop()
        server.close()


def test_a_busy_follower_never_skips_what_a_new_history_wrote_under_its_position(
    redis_client: redis.Redis, redis_server
):
    with _gone_back_under_a_follower(redis_client, redis_server) as (server, follower):
        time.sleep(0.01)  # the new history's events come later on the store's clock
        # The new history: the server goes on (it does not know), under the same numbers.
        server.announce([segment(TABLE, chunk=2)])
        server.announce([segment(TABLE, chunk=3)])
        server.announce([segment(TABLE, chunk=4)])  # the first one past the follower's position

        def sees_the_new_history(f: Follower) -> bool:
            starts = {s.interval.start_ms // 3_600_000 for s in f.view(TABLE).visible_segments}
            return {2, 3, 4} <= starts

        assert follower.wait_for(sees_the_new_history, 10), "events of the new history skipped"
        assert follower.rewinds >= 1
        assert follower.held() == {TABLE: 1}  # chunk 1, served, lost: held until announced again


def test_a_segment_the_new_history_removed_under_the_followers_position_is_not_held(
    redis_client: redis.Redis, redis_server
):
    """The follower resyncs past the new history's events under its position: a served segment
    one of them removed is gone from the store for good, not lost, and holding it would freeze
    the table's snapshot forever (a fault run's broker did)."""
    with _gone_back_under_a_follower(redis_client, redis_server) as (server, follower):
        time.sleep(0.01)
        server.replace(add=[segment(TABLE, chunk=5)], remove=[segment(TABLE, chunk=0)])
        server.announce([segment(TABLE, chunk=2)])
        server.announce([segment(TABLE, chunk=3)])  # the first one past the follower's position

        def resynced(f: Follower) -> bool:
            starts = {s.interval.start_ms // 3_600_000 for s in f.view(TABLE).visible_segments}
            return {2, 3, 5} <= starts

        assert follower.wait_for(resynced, 10)
        assert follower.rewinds >= 1
        assert follower.held() == {TABLE: 1}  # chunk 1 only: lost, held until announced again
        starts = {s.interval.start_ms // 3_600_000 for s in follower.view(TABLE).visible_segments}
        assert 0 not in starts
