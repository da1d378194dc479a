"""What a write needs before it counts (rules F2, F8 and F9 of docs/design/contract/failover.md), on a
real Sentinel group: with ``wait_replicas`` an announcement, a lock grant and a pin that no
replica confirmed are refused with the shortfall named; a lock grant the failover lost anyway
fails closed (its renewal says MISSING, a publish under it is refused), and a lost pin is
reported unknown at its renewal, never silently honoured."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from chaos.sentinel_group import SentinelGroup
from horizon_broker._core.errors import LockLost, NotFound, ReplicationShortfall
from horizon_broker._core.redis_sentinel import STATS
from horizon_broker.locks.client import LockClient
from horizon_broker.locks.rules import Granularity, LockRequest, PublishGuard
from horizon_broker.pins.store import PinStore
from horizon_broker.timeline.interval import Interval
from horizon_broker.watermark.server import ServerClient
from tests.failover.conftest import emptied
from tests.watermark.conftest import segment, table_descriptor

TABLE = "accounts"
HOUR = Interval(0, 3_600_000)


def _lock(job: str) -> LockRequest:
    return LockRequest(TABLE, job, Granularity.TIME_CHUNK, HOUR, 10)


def _guard(job: str) -> PublishGuard:
    return PublishGuard(job, covers=((TABLE, HOUR, "v1", 0),))


def test_writes_no_replica_confirmed_are_refused_naming_the_shortfall(group: SentinelGroup):
    url = f"{group.url}?wait_replicas=1&wait_timeout_ms=200"
    server = ServerClient(url, "s1")
    locks = LockClient(url)
    pins = PinStore(url)
    try:
        server.register()
        server.register_table(table_descriptor(TABLE))
        server.announce([segment(TABLE, chunk=0)])  # confirmed: the replica follows
        shortfalls = STATS.shortfalls
        group.cut_replication()
        with pytest.raises(ReplicationShortfall, match=r"confirmed by 0 of 1 replicas within 200"):
            server.announce([segment(TABLE, chunk=1)])
        with pytest.raises(ReplicationShortfall, match="acquire"):
            locks.try_acquire(_lock("job-1"), "lock-1", 30_000)
        with pytest.raises(ReplicationShortfall, match="pin"):
            pins.pin([TABLE], 1000, lease_s=60)
        assert STATS.shortfalls == shortfalls + 3
    finally:
        pins.close()
        locks.close()
        server.close()


@dataclass
class LostWrites:
    """One failover that lost a lock grant and a pin the primary alone acknowledged, with a
    grant and a pin from before the cut as the controls (the tests below read its outcome)."""

    server: ServerClient
    locks: LockClient
    pins: PinStore
    lost_grant: object
    kept_pin: str
    lost_pin: str


@pytest.fixture(scope="module")
def lost_writes(sentinel_group: SentinelGroup) -> Iterator[LostWrites]:
    group = emptied(sentinel_group)
    server = ServerClient(group.url, "s1")
    locks = LockClient(group.url)
    pins = PinStore(group.url)
    try:
        server.register()
        server.register_table(table_descriptor(TABLE))
        locks.try_acquire(_lock("job-0"), "lock-0", 60_000)  # the control: a grant that holds
        server.announce([segment(TABLE, chunk=0)], guard=_guard("job-0"))
        locks.release(TABLE, "job-0", ["lock-0"])
        kept = pins.pin([TABLE], 1000, lease_s=60)
        group.cut_replication()
        granted, _ = locks.try_acquire(_lock("job-1"), "lock-1", 60_000)
        lost = pins.pin([TABLE], 2000, lease_s=60)  # both acknowledged by the primary alone
        group.fail_over()
        yield LostWrites(server, locks, pins, granted, kept.pin_id, lost.pin_id)
    finally:
        pins.close()
        locks.close()
        server.close()


def test_a_lock_grant_the_failover_lost_fails_closed(lost_writes: LostWrites):
    locks = lost_writes.locks
    assert lost_writes.lost_grant is not None  # granted before the failover
    assert locks.renew(TABLE, "job-1", ["lock-1"], 60) == {"lock-1": "MISSING"}
    with pytest.raises(LockLost):
        lost_writes.server.announce([segment(TABLE, chunk=0, version="v2")], guard=_guard("job-1"))


def test_a_pin_the_failover_lost_is_reported_unknown_at_its_renewal(lost_writes: LostWrites):
    pins = lost_writes.pins
    assert pins.renew(lost_writes.kept_pin, lease_s=60) > 0  # the control: a replicated pin holds
    with pytest.raises(NotFound, match="does not exist"):
        pins.renew(lost_writes.lost_pin, lease_s=60)
