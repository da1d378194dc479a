"""Pure parts: configuration loading, token authentication, admission; the listen policy and TLS."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from horizon_broker._core.errors import (
    Cancelled,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
)
from horizon_broker.broker.api.auth import Authenticator
from horizon_broker.broker.api.listen import check_listen_policy, is_loopback
from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.broker.config import BrokerConfig, config_from_mapping, load_config
from horizon_broker.broker.engine.admission import Admission
from horizon_broker.broker.grants import ANONYMOUS, check_inspect, check_read
from horizon_broker.client import connect
from tests.broker.conftest import ADMIN, broker_config


def test_defaults_work_on_a_laptop():
    config = load_config(env={})
    assert config.server.listen == "127.0.0.1:50051"
    assert config.state.redis_url == "redis://127.0.0.1:6379/0"
    assert config.spark.master == "local[*]" and config.spark.remote is None
    assert not config.auth_enabled
    check_listen_policy(config)


def test_toml_file_then_environment_overrides(tmp_path):
    path = tmp_path / "horizon.toml"
    path.write_text(
        """
[server]
listen = "127.0.0.1:6000"
[spark]
remote = "sc://spark:15002"
[spark.conf]
"spark.sql.shuffle.partitions" = 8
[limits]
max_concurrent = 2
[[tokens]]
name = "analyst"
token = "t1"
tables = ["Orders"]
"""
    )
    env = {
        "HORIZON_LIMITS_MAX_CONCURRENT": "7",
        "HORIZON_STATE_REGRESSION_POLICY": "fail",
        "HORIZON_SERVER_ALLOW_INSECURE_REMOTE": "yes",
    }
    config = load_config(path, env=env)
    assert config.server.listen == "127.0.0.1:6000"
    assert config.spark.remote == "sc://spark:15002"
    assert config.spark.conf_dict == {"spark.sql.shuffle.partitions": "8"}
    assert config.limits.max_concurrent == 7
    assert config.state.regression_policy == "fail"
    assert config.server.allow_insecure_remote is True
    (grant,) = config.tokens
    assert grant.may_read("orders") and not grant.may_read("accounts") and not grant.inspect
    assert "t1" not in repr(grant), "secrets stay out of logs"


@pytest.mark.parametrize(
    "data",
    [
        {"limits": {"max_concurrent": 0}},
        {"limits": {"max_concurrent": "many"}},
        {"limitz": {}},
        {"server": {"port": 1}},
        {"server": {"tls_cert": "a.pem"}},
        {"state": {"regression_policy": "ignore"}},
        {"tokens": [{"name": "no-secret"}]},
        {"tokens": [{"token": "x"}, {"token": "x"}]},
        {"server": {"listen": "nohost"}},
        {"spark": {"direct_lookup_warm_s": -1}},
        {"reads": {"min_pin_lease_s": 0}},
        {"reads": {"min_pin_lease_s": 60, "max_pin_lease_s": 30}},
    ],
)
def test_bad_configuration_is_refused_with_a_message(data):
    with pytest.raises(InvalidArgument):
        config_from_mapping(data)


def test_authenticator_maps_bearer_tokens_to_grants():
    config = config_from_mapping(
        {"tokens": [{"name": "a", "token": "sa", "tables": ["t"], "inspect": False}]}
    )
    auth = Authenticator(config.tokens)
    principal = auth.authenticate([("authorization", "Bearer sa")])
    assert principal.name == "a"
    check_read(principal, ["T"])
    with pytest.raises(PermissionDenied, match="u"):
        check_read(principal, ["t", "u"])
    with pytest.raises(PermissionDenied):
        check_inspect(principal)
    for metadata in ([], [("authorization", "Basic sa")], [("authorization", "Bearer nope")]):
        with pytest.raises(Unauthenticated):
            auth.authenticate(metadata)
    assert Authenticator(()).authenticate([]) is ANONYMOUS


def test_admission_runs_at_most_n_queues_at_most_q_and_refuses_the_rest():
    gate = Admission(max_concurrent=2, queue_size=1)
    release = threading.Event()
    entered = []

    def hold() -> None:
        with gate.slot():
            entered.append(1)
            release.wait(5)

    holders = [threading.Thread(target=hold) for _ in range(3)]
    for thread in holders:
        thread.start()
    deadline = time.monotonic() + 5
    while gate.stats().queued < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gate.stats().running == 2 and gate.stats().queued == 1
    with pytest.raises(ResourceExhausted), gate.slot():
        pass
    release.set()
    for thread in holders:
        thread.join(5)
    assert len(entered) == 3 and gate.stats().running == 0


def test_queued_queries_are_admitted_in_arrival_order_and_newcomers_queue_behind_them():
    gate = Admission(max_concurrent=1, queue_size=8)
    order: list[str] = []

    def wait_for_slot(name: str) -> None:
        with gate.slot(deadline=time.monotonic() + 10):
            order.append(name)

    waiters = []
    with gate.slot():
        for number in range(3):
            waiter = threading.Thread(target=wait_for_slot, args=(f"queued {number}",))
            waiter.start()
            waiters.append(waiter)
            deadline = time.monotonic() + 5
            while gate.stats().queued < number + 1 and time.monotonic() < deadline:
                time.sleep(0.005)
    # The slot is free and three queries wait: one arriving now queues behind them, though the
    # lock would let it pass before any of them wakes.
    wait_for_slot("newcomer")
    for waiter in waiters:
        waiter.join(5)
    assert order == ["queued 0", "queued 1", "queued 2", "newcomer"]
    assert gate.stats() == type(gate.stats())(0, 0, 1, 8)


def test_a_queued_query_that_gives_up_lets_the_next_one_go_at_once():
    gate = Admission(max_concurrent=1, queue_size=4)
    order: list[str] = []
    gone = threading.Event()

    def leaves() -> None:
        with pytest.raises(Cancelled), gate.slot(is_active=lambda: not gone.is_set()):
            pass

    def stays() -> None:
        with gate.slot(deadline=time.monotonic() + 10):
            order.append("second")

    with gate.slot():
        first = threading.Thread(target=leaves)
        first.start()
        while gate.stats().queued < 1:
            time.sleep(0.005)
        second = threading.Thread(target=stays)
        second.start()
        while gate.stats().queued < 2:
            time.sleep(0.005)
        gone.set()
        first.join(5)
    second.join(5)
    assert order == ["second"] and gate.stats().queued == 0


def test_admission_gives_up_at_the_deadline_while_queued():
    gate = Admission(max_concurrent=1, queue_size=1)
    with (
        gate.slot(),
        pytest.raises(DeadlineExceeded),
        gate.slot(deadline=time.monotonic() + 0.1),
    ):
        pass
    assert gate.stats().queued == 0


def test_plaintext_or_anonymous_on_a_reachable_address_is_refused_unless_allowed():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0")
    with pytest.raises(FailedPrecondition, match="tls"):
        check_listen_policy(config_from_mapping({"server": {"listen": "0.0.0.0:50051"}}))
    with pytest.raises(FailedPrecondition, match="allow_anonymous"):
        check_listen_policy(
            config_from_mapping({"server": {"listen": "0.0.0.0:0", "allow_insecure_remote": True}})
        )
    check_listen_policy(
        config_from_mapping(
            {
                "server": {
                    "listen": "0.0.0.0:0",
                    "allow_insecure_remote": True,
                    "allow_anonymous": True,
                }
            }
        )
    )


def test_tls_serves_a_client_that_trusts_the_certificate(broker_env, spark, tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    config: BrokerConfig = broker_config(  # type: ignore[assignment]
        broker_env.redis.url,
        server={"listen": "0.0.0.0:0", "tls_cert": str(cert), "tls_key": str(key)},
    )
    check_listen_policy(config)
    server = BrokerServer(
        config,
        spark=spark,
        follower=broker_env.broker.follower,
        functions=broker_env.broker.engine.functions,
        view_namespace="tls_",
    ).start()
    try:
        with connect(f"localhost:{server.port}", token=ADMIN, root_certificates=cert) as horizon:
            assert horizon.query("SELECT count(*) AS n FROM accounts").to_pylist() == [{"n": 100}]
    finally:
        server.stop(0)
