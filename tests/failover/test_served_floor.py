"""The broker's persisted floor survives a failover that lost it (rule F7 of
docs/design/contract/failover.md): after a change of primary the broker writes its served
snapshots again, so a broker started later never serves below what this one served."""

from __future__ import annotations

from chaos.sentinel_group import SentinelGroup
from horizon_broker._core.redis_calls import connect
from horizon_broker._core.redis_sentinel import STATS
from horizon_broker.broker.engine.floor import SnapshotFloor
from horizon_broker.watermark.follower import Follower


def _stored_floor(group: SentinelGroup) -> int | None:
    with group.client(group.primary_port()) as primary:
        value = primary.hget("horizon:floor", "accounts")
    return None if value is None else int(value)


def test_a_floor_the_promoted_replica_lost_is_written_again_when_next_served(
    group: SentinelGroup,
):
    client = connect(group.url, socket_timeout=0.5)
    floor = SnapshotFloor(client, prefix="horizon")
    follower = Follower(group.url)  # the broker's: it notices the new primary first
    follower.start()
    try:
        floor.record({"accounts": 1000})
        changes = STATS.primary_changes
        group.cut_replication()
        floor.record({"accounts": 2000})  # on the primary alone
        assert _stored_floor(group) == 2000
        group.fail_over()
        assert _stored_floor(group) == 1000  # lost with the old primary
        group.wait_until(lambda: STATS.primary_changes > changes, "the follower reconnecting")
        for _ in range(3):  # the first may meet the demoted primary's connection and give up
            floor.record({"accounts": 2000})  # served again: nothing new in this broker
            if _stored_floor(group) == 2000:
                break
        assert _stored_floor(group) == 2000
    finally:
        follower.stop()
        client.close()
