"""Pins belong to their caller: only the identity that took a pin renews or releases it, other
inspectors see that it exists and what it holds back but not its id, and each identity has
quotas on live pins and on their total lease."""

from __future__ import annotations

import pytest

from horizon_broker._core.errors import InvalidArgument, PermissionDenied, ResourceExhausted
from horizon_broker.client import connect
from tests.broker.conftest import ADMIN, READER, broker_config
from tests.broker.spark_jobs import ExtraBroker


def test_only_the_identity_that_took_a_pin_renews_or_releases_it(broker_env):
    with (
        connect(broker_env.target, token=ADMIN) as admin,
        connect(broker_env.target, token=READER) as reader,
    ):
        pin = admin.pin("accounts", lease=60, renew=False)
        try:
            with pytest.raises(PermissionDenied, match="another identity"):
                reader.renew_pin(pin.pin_id, lease=600)
            with pytest.raises(PermissionDenied, match="another identity"):
                reader.release_pin(pin.pin_id)
            # The pin is untouched: the owner still renews it, and a reader may read at it.
            assert admin.renew_pin(pin.pin_id, lease=60).pin_id == pin.pin_id
            assert reader.query("SELECT count(*) AS n FROM accounts", pin=pin.pin_id).num_rows == 1
        finally:
            assert pin.release()


def test_inspectors_see_another_identitys_pin_but_not_its_id(broker_env):
    with (
        connect(broker_env.target, token=ADMIN) as admin,
        connect(broker_env.target, token=READER) as reader,
        admin.pin("accounts", lease=60, renew=False) as pin,
    ):
        seen_by_reader = reader.watermarks("accounts").pins
        assert [(p.pin_id, p.owner, p.snapshot) for p in seen_by_reader] == [
            ("", "admin", pin.snapshot)
        ]
        assert [p.pin_id for p in admin.watermarks("accounts").pins] == [pin.pin_id]


def test_an_identity_over_its_pin_quotas_is_resource_exhausted(broker_env, spark):
    config = broker_config(
        broker_env.redis.url, reads={"max_pins_per_identity": 2, "max_pin_lease_total_s": 100}
    )
    with (
        ExtraBroker(config, spark, broker_env) as server,
        connect(server.target, token=ADMIN) as admin,
        connect(server.target, token=READER) as reader,
    ):
        held = [admin.pin("accounts", lease=30, renew=False) for _ in range(2)]
        try:
            with pytest.raises(ResourceExhausted, match="max_pins_per_identity"):
                admin.pin("accounts", lease=1, renew=False)
            with pytest.raises(ResourceExhausted, match="max_pin_lease_total_s"):
                admin.renew_pin(held[0].pin_id, lease=80)
            with pytest.raises(ResourceExhausted, match="max_pins_per_identity"):
                admin.rewrite("SELECT * FROM accounts", pin_lease=10)
            with reader.pin("accounts", lease=30, renew=False):  # another identity's quota
                pass
        finally:
            for pin in held:
                pin.release()
        with admin.pin("accounts", lease=30, renew=False):  # released pins free the quota
            pass


def test_a_pin_lease_below_the_minimum_is_invalid_argument_naming_the_setting(broker_env):
    """A flood of pins that expire at once would cost the state store without ever counting in
    the quotas: below [reads].min_pin_lease_s (1 s) a lease is refused on every pinning call."""
    with connect(broker_env.target, token=ADMIN) as admin:
        with pytest.raises(InvalidArgument, match=r"\[reads\]\.min_pin_lease_s"):
            admin.pin("accounts", lease=0.001, renew=False)
        with pytest.raises(InvalidArgument, match=r"\[reads\]\.min_pin_lease_s"):
            admin.rewrite("SELECT * FROM accounts", pin_lease=0.5)
        pin = admin.pin("accounts", lease=1, renew=False)  # the minimum itself
        try:
            with pytest.raises(InvalidArgument, match=r"\[reads\]\.min_pin_lease_s"):
                admin.renew_pin(pin.pin_id, lease=0.2)
        finally:
            assert pin.release()
        assert admin.watermarks("accounts").pins == []
