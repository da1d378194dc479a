"""A promoted replica that lacks the last acknowledged batch (rules F3-F5 of
docs/design/contract/failover.md), on a real Sentinel group: the ingestion server announces the
batch again with the same segment, and the broker's follower never shows a lower snapshot nor
loses a segment it served; it holds them, says so, and lets go once the store caught up."""

from __future__ import annotations

import threading
import time

from chaos.sentinel_group import SentinelGroup
from horizon_broker.broker.observe.state_metrics import BrokerParts, BrokerStateCollector
from horizon_broker.watermark.follower import Follower
from horizon_broker.watermark.server import ServerClient
from tests.watermark.conftest import segment, table_descriptor

TABLE = "accounts"


def _segment_json(group: SentinelGroup, key_field: str) -> bytes | None:
    with group.client(group.primary_port()) as primary:
        return primary.hget(f"horizon:t:{TABLE}:segs", key_field)


def _failover_metrics(follower: Follower) -> dict[str, float]:
    """The broker's failover families as a scrape reads them."""
    parts = BrokerParts(follower, lambda: None, lambda: None, lambda: None)
    return {
        family.name: family.samples[0].value
        for family in BrokerStateCollector(parts).collect()
        if family.name.startswith("horizon_state_store_") and "primary" not in family.name
    }


class Watcher:
    """What a reader of the follower sees, sampled on a thread of its own for the whole test."""

    def __init__(self, follower: Follower) -> None:
        self.follower = follower
        self.seen: list[tuple[int | None, frozenset[int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            view = self.follower.view(TABLE)
            chunks = frozenset(s.interval.start_ms // 3_600_000 for s in view.visible_segments)
            self.seen.append((view.lwm, chunks))
            time.sleep(0.002)


def test_a_batch_the_promoted_replica_lost_is_announced_again_and_the_broker_never_goes_back(
    group: SentinelGroup,
):
    server = ServerClient(group.url, "s1", heartbeat_timeout_s=60)
    follower = Follower(group.url, heartbeat_timeout_s=60, max_staleness_s=None)
    try:
        server.register()
        server.register_table(table_descriptor(TABLE))
        server.claim_partitions(TABLE, [0])
        server.announce([segment(TABLE, chunk=0, core_partitions=1)])
        server.report(TABLE, {0: (1000, 1000)})
        follower.start()
        follower.wait_until_synced(10)
        assert follower.wait_for(lambda f: f.view(TABLE).lwm == 1000, 10)
        with Watcher(follower) as watcher:
            group.cut_replication()
            lost = segment(TABLE, chunk=1, core_partitions=1)
            server.announce([lost])  # acknowledged by the primary alone
            server.report(TABLE, {0: (2000, 2000)})
            assert follower.wait_for(lambda f: f.view(TABLE).lwm == 2000, 10)
            key = '[3600000,7200000,"v1",0]'
            announced = _segment_json(group, key)
            assert announced is not None

            group.fail_over()
            assert _segment_json(group, key) is None  # the promoted replica lost the batch
            assert follower.wait_for(lambda f: f.rewinds >= 1, 30)
            assert follower.held() == {TABLE: 1}  # said so while it lasts
            assert _failover_metrics(follower) == {
                "horizon_state_store_held_tables": 1,
                "horizon_state_store_held_segments": 1,
                "horizon_state_store_rewinds": 1,
            }
            view = follower.view(TABLE)
            assert view.lwm == 2000 and len(view.visible_segments) == 2

            server.heartbeat()  # the server's next call: it re-publishes before anything else
            assert _segment_json(group, key) == announced  # same segment, same timestamps
            assert follower.wait_for(lambda f: not f.held(), 10)
            assert follower.view(TABLE).lwm == 2000
            assert _failover_metrics(follower)["horizon_state_store_held_tables"] == 0
        assert server._store.republished_after_failover == 1
    finally:
        follower.stop()
        server.close()
    lwms = [lwm for lwm, _ in watcher.seen if lwm is not None]
    assert lwms == sorted(lwms), "a reader saw the served snapshot go back"
    first = next(i for i, (_, chunks) in enumerate(watcher.seen) if 1 in chunks)
    assert all(1 in chunks for _, chunks in watcher.seen[first:]), "a served segment vanished"
