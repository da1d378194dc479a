"""The one state-store URL every component takes (rule F1 of docs/design/contract/failover.md):
a Sentinel group and the WAIT options parse, and a malformed URL is refused when the
configuration is loaded, naming the problem and never quoting a password."""

from __future__ import annotations

import pytest

from horizon_broker._core.errors import InvalidArgument
from horizon_broker._core.store_address import parse_store_url
from horizon_broker.broker.config import config_from_mapping
from horizon_broker.ingest.server_config import server_config


def test_a_sentinel_url_names_the_sentinels_the_master_the_db_and_the_wait():
    address = parse_store_url(
        "redis+sentinel://:s3cret@h1:26379,h2,[::1]:26380/mymaster/2"
        "?wait_replicas=1&wait_timeout_ms=250&sentinel_password=other"
    )
    assert address.sentinels == (("h1", 26379), ("h2", 26379), ("::1", 26380))
    assert (address.master_name, address.db, address.password) == ("mymaster", 2, "s3cret")
    assert (address.wait_replicas, address.wait_timeout_ms) == (1, 250)
    assert address.sentinel_password == "other" and not address.tls
    assert "s3cret" not in address.describe()
    assert parse_store_url("rediss+sentinel://h1/m").tls


def test_a_plain_url_keeps_redis_options_and_takes_the_wait_out():
    address = parse_store_url("redis://:pw@127.0.0.1:6379/0?wait_replicas=2&protocol=2")
    assert not address.sentinel and address.wait_replicas == 2
    assert address.plain_url == "redis://:pw@127.0.0.1:6379/0?protocol=2"
    assert parse_store_url("redis://127.0.0.1:6379/0").wait_replicas == 0


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://h:6379/0", "the scheme must be one of"),
        ("redis+sentinel://h1:26379", "name the master after the sentinels"),
        ("redis+sentinel://h1:26379/m/0/extra", "the path is /master_name"),
        ("redis+sentinel://h1:port/m", "sentinel port must be a whole number"),
        ("redis+sentinel://,h1/m", "a sentinel address is empty"),
        ("redis+sentinel://h1/m?wait=1", "unknown option"),
        ("redis+sentinel://h1/m/zero", "db must be a whole number"),
        ("redis://h:6379/0?wait_replicas=-1", "wait_replicas must be >= 0"),
        ("redis://h:6379/0?wait_timeout_ms=0", "wait_timeout_ms must be > 0"),
        ("", "empty"),
    ],
)
def test_a_malformed_url_is_refused_naming_the_problem(url, problem):
    with pytest.raises(InvalidArgument, match=problem):
        parse_store_url(url)


def test_the_broker_and_the_ingestion_server_refuse_a_bad_url_at_load_without_its_password(
    tmp_path,
):
    bad = "redis+sentinel://:topsecret@h1:26379/m?wait_replicas=many"
    with pytest.raises(InvalidArgument, match=r"\[state\] redis_url: .*wait_replicas") as caught:
        config_from_mapping({"state": {"redis_url": bad}})
    assert "topsecret" not in str(caught.value)
    data = {"server_id": "s1", "redis": bad, "tables": [{"definition": "t.toml"}]}
    with pytest.raises(InvalidArgument, match=r"redis: .*wait_replicas") as caught:
        server_config(data, base=tmp_path, origin="server.toml")
    assert "topsecret" not in str(caught.value)
    good = "redis+sentinel://h1:26379,h2:26379/mymaster/0?wait_replicas=1"
    assert config_from_mapping({"state": {"redis_url": good}}).state.redis_url == good
