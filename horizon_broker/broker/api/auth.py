"""Who is calling: bearer tokens and client certificates to a principal (pure: metadata in,
principal out); what a principal may do is :mod:`horizon_broker.broker.grants`.

With no tokens configured the broker is open (a laptop default: loopback only, unless
``allow_anonymous`` says otherwise): every caller is the anonymous principal with every grant.
With tokens, each call must carry ``authorization: Bearer <token>`` or (mutual TLS) a client
certificate whose common name is a configured ``client_cn``; the identity's grant names the
tables it may read and whether it may inspect timelines and watermarks.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from horizon_broker._core.errors import Unauthenticated
from horizon_broker.broker.grants import ANONYMOUS, Principal, TokenGrant

AUTH_HEADER = "authorization"


class Authenticator:
    """Maps a call's metadata (and, with mutual TLS, its client certificate) to a
    :class:`Principal`."""

    def __init__(self, grants: Sequence[TokenGrant]) -> None:
        self._grants = tuple(grants)
        self._by_certificate = {grant.client_cn: grant for grant in grants if grant.client_cn}

    @property
    def enabled(self) -> bool:
        return bool(self._grants)

    @property
    def certificate_identities(self) -> bool:
        """Some identity is a client certificate's common name (``[[tokens]] client_cn``)."""
        return bool(self._by_certificate)

    def authenticate(
        self,
        metadata: Iterable[tuple[str, str | bytes]] | None,
        auth_context: Mapping[str, Sequence[bytes]] | None = None,
    ) -> Principal:
        if not self._grants:
            return ANONYMOUS
        header = next((value for key, value in metadata or () if key.lower() == AUTH_HEADER), None)
        if header is None:
            certified = self._certified(auth_context)
            if certified is not None:
                return certified
            raise Unauthenticated("missing bearer token: send 'authorization: Bearer <token>'")
        if isinstance(header, bytes):
            header = header.decode("utf-8", "replace")
        scheme, _, secret = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise Unauthenticated("malformed authorization header: expected 'Bearer <token>'")
        return self.principal_for_token(secret.strip())

    def principal_for_token(self, secret: str) -> Principal:
        """The principal of a bearer token's secret (UNAUTHENTICATED when none matches)."""
        found = None
        for grant in self._grants:
            # Compare every token in constant time so timing tells nothing about near misses.
            if grant.token and hmac.compare_digest(grant.token.encode(), secret.encode()):
                found = grant
        if found is None:
            raise Unauthenticated("unknown bearer token")
        return Principal(found.name, found.tables, found.inspect)

    def _certified(self, auth_context: Mapping[str, Sequence[bytes]] | None) -> Principal | None:
        """The identity of a verified client certificate's common name, if it names one."""
        if not auth_context or not self._by_certificate:
            return None
        for value in auth_context.get("x509_common_name", ()):
            name = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            grant = self._by_certificate.get(name)
            if grant is not None:
                return Principal(grant.name, grant.tables, grant.inspect)
        raise Unauthenticated("the client certificate's common name is not a known identity")


def caller(auth: Authenticator, context: Any) -> Principal:
    """The principal of a gRPC call (its metadata and, with mutual TLS, its certificate)."""
    return auth.authenticate(context.invocation_metadata(), context.auth_context())
