"""A pin costs what its owner holds (issue 45, item 6), in a real Redis: a lease has a minimum,
taking a pin drops a few that expired, and the quotas read the owner's own index, so a flood of
short pins neither grows the hashes nor slows every other pin call."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from horizon_broker._core.errors import InvalidArgument, ResourceExhausted
from horizon_broker._core.keys import Keys
from horizon_broker.pins.store import SWEPT_PER_TAKE, PinQuota, PinStore

KEYS = Keys()
SHORT_S = 0.05
"""The minimum lease of these tests' quota (the broker's default is 1 s)."""


@pytest.fixture
def raw(redis_url) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def quota_store(redis_url: str, **quota: float) -> PinStore:
    return PinStore(redis_url, quota=PinQuota(**{"min_lease_s": SHORT_S, **quota}))


def stored_pins(raw: redis.Redis) -> dict[str, int]:
    """How much of ``accounts``' pins Redis stores: entries, index members, owners' members."""
    owners = [raw.zcard(key) for key in raw.scan_iter(KEYS.owner_pins("*"))]
    return {
        "entries": raw.hlen(KEYS.pins("accounts")),
        "expiries": raw.zcard(KEYS.pin_expiries("accounts")),
        "index": raw.hlen(KEYS.pin_index),
        "owned": sum(owners),
        "keys": raw.dbsize(),
    }


def commands_of(raw: redis.Redis, call) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """The Redis commands ``call`` runs (those inside its script included), by name."""
    raw.config_resetstat()
    call()
    stats = raw.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): stat["calls"]
        for name, stat in stats.items()
        if not name.startswith(("cmdstat_evalsha", "cmdstat_eval", "cmdstat_config"))
    }


def test_a_lease_below_the_minimum_is_refused_naming_the_setting(server, redis_url):
    store = PinStore(redis_url, quota=PinQuota(min_lease_s=1.0))
    try:
        with pytest.raises(InvalidArgument, match=r"\[reads\]\.min_pin_lease_s"):
            store.pin(["accounts"], 10, lease_s=0.001, owner="flood")
        held = store.pin(["accounts"], 10, lease_s=1.0, owner="flood")  # the minimum itself
        with pytest.raises(InvalidArgument, match=r"\[reads\]\.min_pin_lease_s"):
            store.renew(held.pin_id, lease_s=0.5, owner="flood")
        assert [pin.pin_id for pin in store.listing(["accounts"])[1]] == [held.pin_id]
    finally:
        store.close()


def test_a_flood_of_short_pins_leaves_the_tables_pin_hashes_bounded(server, redis_url, raw):
    store = quota_store(redis_url, max_pins=1_000)
    batch, batches = 100, 20  # 2,000 pins at the minimum lease, from 50 identities
    seen = []
    try:
        for _ in range(batches):
            for i in range(batch):
                store.pin(["accounts"], 10, lease_s=SHORT_S, owner=f"flood-{i % 50}")
            seen.append(stored_pins(raw))
            time.sleep(SHORT_S * 1.5)  # the whole batch runs out before the next one
    finally:
        store.close()
    # Each take drops up to SWEPT_PER_TAKE expired pins: the previous batch is gone by the end
    # of the next one, so no more than one batch is ever stored, however long the flood.
    assert SWEPT_PER_TAKE > 1
    for counts in seen:
        assert counts["entries"] <= batch and counts["expiries"] <= batch, counts
        assert counts["index"] <= batch and counts["owned"] <= batch, counts
    assert seen[-1]["keys"] <= seen[0]["keys"], "no key is left behind per pin"


def test_the_quota_trips_on_the_owners_pins_among_many_others(server, redis_url):
    crowd = quota_store(redis_url, max_pins=5)
    store = quota_store(redis_url, max_pins=3, max_lease_total_s=100.0)
    try:
        for i in range(300):  # 600 live pins of other identities, on both tables
            crowd.pin(["accounts", "orders"][i % 2 :], 10, lease_s=60, owner=f"team-{i}")
            crowd.pin(["accounts"], 10, lease_s=60, owner=f"team-{i}")
        store.pin(["accounts"], 10, lease_s=30, owner="me")
        store.pin(["orders"], 10, lease_s=30, owner="me")
        short = store.pin(["accounts"], 10, lease_s=SHORT_S, owner="me")
        with pytest.raises(ResourceExhausted, match=r"me already holds 3 .*max_pins_per_identity"):
            store.pin(["accounts"], 10, lease_s=30, owner="me")
        time.sleep(SHORT_S * 2)  # an expired pin no longer counts
        third = store.pin(["accounts"], 10, lease_s=30, owner="me")
        assert third.pin_id != short.pin_id
        with pytest.raises(ResourceExhausted, match="max_pins_per_identity"):
            store.pin(["orders"], 10, lease_s=1, owner="me")
        with pytest.raises(ResourceExhausted, match=r"me would hold 120 s .*max_pin_lease_total_s"):
            store.renew(third.pin_id, lease_s=60, owner="me")  # 30 + 30 + 60 > 100
        assert store.release(third.pin_id, owner="me")
        with pytest.raises(ResourceExhausted, match="max_pin_lease_total_s"):
            store.pin(["accounts"], 10, lease_s=71, owner="me")  # 30 + 30 + 71 > 100
        store.pin(["accounts"], 10, lease_s=40, owner="me")
        store.pin(["accounts"], 10, lease_s=30, owner="you")  # another identity, its own quota
    finally:
        crowd.close()
        store.close()


def test_the_commands_of_a_take_do_not_grow_with_other_owners_pins(server, redis_url, raw):
    crowd = PinStore(redis_url)
    store = quota_store(redis_url, max_pins=16)
    try:
        store.pin(["accounts"], 10, lease_s=60, owner="me")  # the script is loaded
        alone = commands_of(raw, lambda: store.pin(["accounts"], 10, lease_s=60, owner="me"))
        for i in range(500):
            crowd.pin(["accounts", "orders"], 10, lease_s=60, owner=f"team-{i % 100}")
        crowded = commands_of(raw, lambda: store.pin(["accounts"], 10, lease_s=60, owner="me"))
        renewed = commands_of(
            raw,
            lambda: store.renew(
                store.pin(["accounts"], 10, lease_s=60, owner="me").pin_id,
                lease_s=60,
                owner="me",
            ),
        )
    finally:
        crowd.close()
        store.close()
    assert crowded == alone, "a take runs the same commands whoever else holds pins"
    assert "hgetall" not in crowded and "hgetall" not in renewed, "no pin hash is read whole"
    assert sum(renewed.values()) < 3 * sum(alone.values())


def test_a_pin_stored_before_the_expiry_indexes_is_still_honoured_renewed_and_released(
    server, redis_url, raw
):
    """Nothing is migrated: a pin written by an older broker (entry and pin index only) still
    caps the retention horizon and is listed; renewing it indexes it, so the quota counts it."""
    now_ms = int(raw.time()[0]) * 1000
    raw.hset(KEYS.pins("accounts"), "pin-old", f"400|{now_ms}|{now_ms + 60_000}|me")
    raw.hset(KEYS.pin_index, "pin-old", '{"t": ["accounts"], "o": "me"}')
    store = quota_store(redis_url, max_pins=1)
    try:
        assert server.report_retention_horizon("accounts", 900) == 400
        assert [pin.pin_id for pin in store.listing(["accounts"])[1]] == ["pin-old"]
        store.renew("pin-old", lease_s=30, owner="me")
        assert raw.zscore(KEYS.owner_pins("me"), "pin-old") is not None
        with pytest.raises(ResourceExhausted, match="max_pins_per_identity"):
            store.pin(["accounts"], 500, lease_s=30, owner="me")
        assert store.release("pin-old", owner="me")
        left = {name: n for name, n in stored_pins(raw).items() if name != "keys"}
        assert left == dict.fromkeys(left, 0), "released everywhere it was stored"
        assert server.report_retention_horizon("accounts", 900) == 900
    finally:
        store.close()
