"""Opening a client: the targets' list, and a channel to each (plaintext or TLS)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import grpc

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.watermark import tokens

from .session import HorizonClient
from .targets import CONNECT_TIMEOUT_S

_MAX_MESSAGE_BYTES = 8 * 1024 * 1024


def parse_targets(target: str | Sequence[str]) -> list[str]:
    """The broker addresses in ``target``: one ``host:port``, several separated by commas (the
    form ``--target`` and ``HORIZON_TARGET`` take), or a list of them."""
    given = target.split(",") if isinstance(target, str) else list(target)
    addresses = [address.strip() for address in given if address.strip()]
    if not addresses:
        raise InvalidArgument("no broker target given (host:port, or several separated by ',')")
    if len(set(addresses)) != len(addresses):
        raise InvalidArgument(f"a broker target is named twice in {', '.join(addresses)}")
    return addresses


def connect(
    target: str | Sequence[str],
    token: str | None = None,
    *,
    tls: bool = False,
    root_certificates: str | Path | bytes | None = None,
    client_certificate: tuple[str | Path | bytes, str | Path | bytes] | None = None,
    timeout: float | None = None,
    monotonic: bool = True,
    session_token: str = "",
    connect_timeout: float = CONNECT_TIMEOUT_S,
) -> HorizonClient:
    """Open a client to the broker at ``target`` (``host:port``), or to several brokers (a list,
    or addresses separated by commas): calls go to the first and move to the next when it goes
    away (see :mod:`horizon_broker.client`).

    ``tls`` (implied by ``root_certificates`` or ``client_certificate``) uses a secure channel;
    ``root_certificates`` is a PEM file or its bytes (system roots when omitted);
    ``client_certificate`` is ``(private key, certificate chain)`` for a broker that identifies
    callers by certificate (mutual TLS). ``session_token`` carries another client's monotonic
    reads over (its :attr:`HorizonClient.session_token`). ``connect_timeout`` bounds the wait
    for a connection before a call that must not be sent twice (creating a pin) tries the next
    broker.
    """
    addresses = parse_targets(target)
    channels = [
        _channel(address, tls, root_certificates, client_certificate) for address in addresses
    ]
    client = HorizonClient(
        channels,
        token=token,
        timeout=timeout,
        monotonic=monotonic,
        addresses=addresses,
        connect_timeout=connect_timeout,
    )
    client.session_token = tokens.merge(session_token)
    return client


def _channel(
    address: str,
    tls: bool,
    root_certificates: str | Path | bytes | None,
    client_certificate: tuple[str | Path | bytes, str | Path | bytes] | None,
) -> grpc.Channel:
    options = [
        ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
    ]
    if not (tls or root_certificates is not None or client_certificate is not None):
        return grpc.insecure_channel(address, options=options)
    key, chain = (
        (_pem(client_certificate[0]), _pem(client_certificate[1]))
        if client_certificate is not None
        else (None, None)
    )
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_pem(root_certificates), private_key=key, certificate_chain=chain
    )
    return grpc.secure_channel(address, credentials, options=options)


def _pem(source: str | Path | bytes | None) -> bytes | None:
    """PEM bytes from a file path or the bytes themselves."""
    if source is None or isinstance(source, bytes):
        return source
    return Path(source).read_bytes()
