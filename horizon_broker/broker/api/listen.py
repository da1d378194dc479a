"""Where the broker may listen, and for whom: plaintext and anonymous service stay on loopback
unless the configuration says otherwise (every listener of the broker asks here)."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

import grpc

from horizon_broker._core.errors import FailedPrecondition, InvalidArgument, Unavailable
from horizon_broker.broker.config import BrokerConfig, parse_listen


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (``localhost``, 127/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return all(
                ipaddress.ip_address(info[4][0]).is_loopback
                for info in socket.getaddrinfo(host, None)
            )
        except OSError:
            return False


def check_listen_policy(
    config: BrokerConfig, listen: str | None = None, setting: str = "[server] listen"
) -> None:
    """Refuse to serve other machines in plaintext, or anonymously, unless told explicitly
    (``listen``: another listener of the broker, such as Flight SQL's; default ``[server]``'s)."""
    address = listen or config.server.listen
    host, _ = parse_listen(address)
    if is_loopback(host):
        return
    server = config.server
    if not (server.tls or server.allow_insecure_remote):
        raise FailedPrecondition(
            f"refusing to serve plaintext on {address} ({setting}): configure [server] tls_cert "
            "and tls_key, listen on a loopback address, or set allow_insecure_remote = true"
        )
    if not (config.tokens or server.allow_anonymous):
        raise FailedPrecondition(
            f"refusing to serve {address} ({setting}) without identities: every caller would "
            "read every table; configure [[tokens]] (or client certificates), listen on a "
            "loopback address, or set [server] allow_anonymous = true"
        )


def bind(server: grpc.aio.Server, config: BrokerConfig) -> int:
    """Add ``[server] listen`` to ``server`` (TLS when configured); the port bound."""
    host, port = parse_listen(config.server.listen)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    settings = config.server
    try:
        if settings.tls:
            key = Path(settings.tls_key or "").read_bytes()
            cert = Path(settings.tls_cert or "").read_bytes()
            client_ca = (
                Path(settings.tls_client_ca).read_bytes() if settings.tls_client_ca else None
            )
            credentials = grpc.ssl_server_credentials(
                [(key, cert)],
                root_certificates=client_ca,
                require_client_auth=client_ca is not None,
            )
            bound = server.add_secure_port(address, credentials)
        else:
            bound = server.add_insecure_port(address)
    except OSError as error:
        raise InvalidArgument(f"cannot read the TLS certificate or key: {error}") from None
    except RuntimeError as error:
        raise Unavailable(f"cannot listen on {address}: {error}") from None
    if not bound:
        raise Unavailable(f"cannot listen on {address}")
    return bound
