"""Where the console may start: on loopback by default, elsewhere only with identities (and TLS
or an explicit plaintext allowance), as the broker's other listeners."""

from __future__ import annotations

import pytest

from horizon_broker._core.errors import FailedPrecondition
from horizon_broker.broker.config import config_from_mapping
from horizon_broker.broker.console.server import ConsoleServer, console_wanted

TOKENS = [{"name": "admin", "token": "admin-secret", "inspect": True}]


def config(console: dict, *, tokens: list | None = None, server: dict | None = None):  # type: ignore[no-untyped-def]
    return config_from_mapping(
        {
            "server": {"listen": "127.0.0.1:0", **(server or {})},
            "console": console,
            "tokens": tokens or [],
        }
    )


def test_on_by_default_on_loopback_and_off_elsewhere_without_tokens():
    assert console_wanted(config({}))
    assert console_wanted(config({"listen": "localhost:0"}))
    assert not console_wanted(config({"listen": "0.0.0.0:0"}))
    assert console_wanted(config({"listen": "0.0.0.0:0"}, tokens=TOKENS))
    assert not console_wanted(config({"enabled": False}))


def test_a_console_open_to_other_machines_needs_identities_and_a_plaintext_allowance():
    anonymous = config(
        {"listen": "0.0.0.0:0", "enabled": True}, server={"allow_insecure_remote": True}
    )
    with pytest.raises(FailedPrecondition, match="without identities"):
        ConsoleServer(anonymous, None, None)  # type: ignore[arg-type]
    plaintext = config({"listen": "0.0.0.0:0"}, tokens=TOKENS)
    with pytest.raises(FailedPrecondition, match="plaintext"):
        ConsoleServer(plaintext, None, None)  # type: ignore[arg-type]


def test_the_console_address_defaults_to_the_servers_host_and_port_50053():
    assert config({}, server={"listen": "127.0.0.1:50051"}).console_address == "127.0.0.1:50053"
    assert config({}).console_address == "127.0.0.1:0"
    assert config({"listen": "[::1]:8080"}).console_address == "[::1]:8080"
