"""Pins in a real Redis: taking, renewing, releasing, expiring, and the retention cap."""

from __future__ import annotations

import time

import pytest

from horizon_broker._core.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
)
from horizon_broker.pins.store import PinQuota, PinStore


@pytest.fixture
def store(redis_url):
    pins = PinStore(redis_url)
    yield pins
    pins.close()


def test_a_pin_holds_every_table_it_names_and_is_listed_until_released(server, store):
    pin = store.pin(["accounts", "orders"], 1_000, lease_s=60, owner="report")
    now_ms, listed = store.listing(["accounts", "orders"])
    assert [p.pin_id for p in listed] == [pin.pin_id]
    assert set(listed[0].tables) == {"accounts", "orders"}
    assert listed[0].snapshot == 1_000 and listed[0].owner == "report"
    assert 59 < listed[0].lease_left_s(now_ms) <= 60
    assert store.release(pin.pin_id, owner="report")
    assert not store.release(pin.pin_id, owner="report")
    assert store.listing(["accounts", "orders"])[1] == []


def test_the_retention_horizon_stops_at_the_oldest_live_pin_and_moves_on_after_release(
    server, store
):
    assert server.report_retention_horizon("accounts", 100) == 100
    pin = store.pin(["accounts"], 400, lease_s=60)
    assert server.report_retention_horizon("accounts", 900) == 400
    assert server.retention_horizon("accounts") == 400
    assert server.report_retention_horizon("orders", 900) == 900  # another table is not held
    store.release(pin.pin_id)
    assert server.report_retention_horizon("accounts", 900) == 900


def test_an_expired_pin_stops_holding_the_horizon_back(server, store):
    store.pin(["accounts"], 400, lease_s=0.2)
    time.sleep(0.3)
    assert server.report_retention_horizon("accounts", 900) == 900
    assert store.listing(["accounts"])[1] == []


def test_a_pin_below_the_retention_horizon_is_refused_naming_the_horizon(server, store):
    server.report_retention_horizon("accounts", 500)
    with pytest.raises(FailedPrecondition, match="below the retention horizon 500"):
        store.pin(["orders", "accounts"], 499, lease_s=60)
    assert store.listing(["orders", "accounts"])[1] == []  # nothing half-taken


def test_renewing_extends_a_live_pin_and_fails_clearly_for_an_expired_one(server, store):
    pin = store.pin(["accounts"], 10, lease_s=0.5)
    assert store.renew(pin.pin_id, lease_s=60) > pin.expires_ms
    short = store.pin(["accounts"], 10, lease_s=0.1)
    time.sleep(0.2)
    with pytest.raises(NotFound, match="expired"):
        store.renew(short.pin_id, lease_s=60)
    with pytest.raises(NotFound, match="does not exist"):
        store.renew("pin-nope", lease_s=60)


def test_bad_pin_requests_are_refused_with_what_is_wrong(server, store):
    with pytest.raises(NotFound, match="not registered"):
        store.pin(["nope"], 10, lease_s=60)
    with pytest.raises(InvalidArgument, match="lease"):
        store.pin(["accounts"], 10, lease_s=0)
    with pytest.raises(InvalidArgument, match="at least one table"):
        store.pin([], 10, lease_s=60)
    with pytest.raises(InvalidArgument, match="not a non-negative"):
        store.pin(["accounts"], -1, lease_s=60)


def test_only_the_owner_renews_or_releases_a_pin(server, store):
    pin = store.pin(["accounts"], 1_000, lease_s=60, owner="report")
    with pytest.raises(PermissionDenied, match="another identity"):
        store.renew(pin.pin_id, lease_s=120, owner="intruder")
    with pytest.raises(PermissionDenied, match="another identity"):
        store.release(pin.pin_id, owner="intruder")
    assert [p.pin_id for p in store.listing(["accounts"])[1]] == [pin.pin_id]
    assert store.renew(pin.pin_id, lease_s=120, owner="report") > pin.expires_ms
    assert store.release(pin.pin_id, owner="report")


def test_an_identity_over_its_pin_quotas_is_refused_while_others_still_pin(server, redis_url):
    quota = PinStore(redis_url, quota=PinQuota(max_pins=2, max_lease_total_s=100.0))
    try:
        first = quota.pin(["accounts"], 1_000, lease_s=40, owner="greedy")
        quota.pin(["accounts"], 1_000, lease_s=40, owner="greedy")
        with pytest.raises(ResourceExhausted, match="max_pins_per_identity"):
            quota.pin(["accounts"], 1_000, lease_s=1, owner="greedy")
        quota.pin(["accounts"], 1_000, lease_s=40, owner="modest")  # another identity
        with pytest.raises(ResourceExhausted, match="max_pin_lease_total_s"):
            quota.renew(first.pin_id, lease_s=70, owner="greedy")  # 70 + 40 > 100
        assert quota.release(first.pin_id, owner="greedy")
        quota.pin(["accounts"], 1_000, lease_s=50, owner="greedy")  # room again
        with pytest.raises(ResourceExhausted, match="max_pin_lease_total_s"):
            quota.pin(["orders"], 1_000, lease_s=101, owner="other")  # one pin over the total
    finally:
        quota.close()
