"""Who is calling: the call's headers, bearer tokens, and Flight's handshake with basic auth.

Every call is authenticated by :class:`horizon_broker.broker.api.auth.Authenticator`, the main API's, from the same
``authorization: Bearer <token>`` header. Flight's handshake maps basic credentials onto the same
``[[tokens]]``: the user is a token's ``name``, the password its ``token``; the handshake answers
with ``authorization: Bearer <token>``, which Flight clients then send on every call.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pyarrow.flight as fl

from horizon_broker._core.errors import HorizonError, Unauthenticated
from horizon_broker.broker.api.auth import AUTH_HEADER, Authenticator
from horizon_broker.broker.flight.errors import flight_error
from horizon_broker.broker.grants import Principal, TokenGrant

MIDDLEWARE_KEY = "horizon"


class CallHeaders(fl.ServerMiddleware):
    """One call's request headers, and headers to send back."""

    def __init__(self, headers: Mapping[str, Sequence[Any]]) -> None:
        self.headers = {name.lower(): list(values) for name, values in headers.items()}
        self.response: dict[str, str] = {}
        self.on_complete: list[Callable[[], None]] = []
        """Run when the call ends (while its context is still valid)."""

    def first(self, name: str) -> str | None:
        """The first value of header ``name`` (text), or None."""
        values = self.headers.get(name.lower())
        if not values:
            return None
        value = values[0]
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

    def metadata(self) -> list[tuple[str, Any]]:
        """The headers as gRPC metadata pairs (what :class:`Authenticator` reads)."""
        return [(name, value) for name, values in self.headers.items() for value in values]

    def sending_headers(self) -> dict[str, str]:
        return self.response

    def call_completed(self, exception: BaseException | None) -> None:
        for callback in self.on_complete:
            callback()
        self.on_complete.clear()


class CallHeadersFactory(fl.ServerMiddlewareFactory):
    """Keeps every call's headers; answers the handshake with a bearer token."""

    def __init__(self, grants: Sequence[TokenGrant]) -> None:
        self.grants = tuple(grants)

    def start_call(self, info: fl.CallInfo, headers: Mapping[str, Sequence[Any]]) -> CallHeaders:
        call = CallHeaders(headers)
        if info.method == fl.FlightMethod.HANDSHAKE and self.grants:
            try:
                token = handshake_token(self.grants, call.first(AUTH_HEADER))
            except HorizonError as error:
                raise flight_error(error) from None
            call.response[AUTH_HEADER] = f"Bearer {token}"
        return call


class HandshakeAuth(fl.ServerAuthHandler):
    """Lets Flight's handshake through to :class:`CallHeadersFactory`, which checked its
    credentials and answers with the bearer token (pyarrow refuses a handshake without an auth
    handler). Calls are authenticated from their headers, not from Flight's handshake token."""

    def authenticate(self, outgoing: Any, incoming: Any) -> None:
        return None

    def is_valid(self, token: bytes) -> str:
        return ""


def call_headers(context: fl.ServerCallContext) -> CallHeaders:
    headers = context.get_middleware(MIDDLEWARE_KEY)
    return headers if headers is not None else CallHeaders({})


def principal(auth: Authenticator, context: fl.ServerCallContext) -> Principal:
    """The caller of this Flight call, exactly as the main API authenticates it from its
    headers. With mutual TLS the certificate was verified when the connection was made, but
    pyarrow's Flight server does not show a handler the certificate's name, so a certificate is
    no identity here: a caller names itself with a token."""
    headers = call_headers(context)
    if auth.certificate_identities and headers.first(AUTH_HEADER) is None:
        raise Unauthenticated(
            "missing bearer token: the Flight SQL endpoint verifies client certificates but "
            "cannot tell who a certificate names, so [[tokens]] client_cn identities are not "
            "known here; send 'authorization: Bearer <token>' (or log in with the token's name "
            "and secret)"
        )
    return auth.authenticate(headers.metadata())


def handshake_token(grants: Iterable[TokenGrant], header: str | None) -> str:
    """The bearer token a handshake's ``authorization`` header proves: ``Basic`` with a token's
    name and secret, or ``Bearer`` with a secret."""
    if header is None:
        raise Unauthenticated(
            "missing credentials: send 'authorization: Basic <name:token>' (a token's name and "
            "secret) or 'authorization: Bearer <token>'"
        )
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer" and value:
        return _matching(grants, None, value).token
    if scheme.lower() == "basic" and value:
        try:
            padded = value + "=" * (-len(value) % 4)  # Go clients send it unpadded
            decoded = base64.b64decode(padded, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise Unauthenticated(
                "malformed basic credentials: expected base64 of 'name:token'"
            ) from None
        name, sep, secret = decoded.partition(":")
        if not sep or not secret:
            raise Unauthenticated("malformed basic credentials: expected 'name:token'")
        return _matching(grants, name, secret).token
    raise Unauthenticated("malformed authorization header: expected 'Basic ...' or 'Bearer ...'")


def _matching(grants: Iterable[TokenGrant], name: str | None, secret: str) -> TokenGrant:
    found = None
    for grant in grants:
        # Compare every secret in constant time, as the main API does.
        if hmac.compare_digest(grant.token.encode(), secret.encode()) and found is None:
            found = grant
    if found is None or (name is not None and name != found.name):
        raise Unauthenticated("unknown user or token")
    return found
