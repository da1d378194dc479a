"""Bearer-token authentication and per-table grants (pure: metadata in, principal out).

With no tokens configured the broker is open (a laptop default: loopback only, unless
``allow_anonymous`` says otherwise): every caller is the anonymous principal with every grant.
With tokens, each call must carry ``authorization: Bearer <token>`` or (mutual TLS) a client
certificate whose common name is a configured ``client_cn``; the identity's grant names the
tables it may read and whether it may inspect timelines and watermarks.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from broker.config import ALL_TABLES, TokenGrant
from timeline.errors import InvalidArgument, NotFound, PermissionDenied, Unauthenticated

AUTH_HEADER = "authorization"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling and what they may do."""

    name: str
    tables: frozenset[str]
    inspect: bool

    def may_read(self, table: str) -> bool:
        return ALL_TABLES in self.tables or table.lower() in self.tables

    @property
    def restricted(self) -> bool:
        """Whether some tables are not granted (such a caller must not learn which exist)."""
        return ALL_TABLES not in self.tables


ANONYMOUS = Principal("anonymous", frozenset({ALL_TABLES}), inspect=True)


class Authenticator:
    """Maps a call's metadata (and, with mutual TLS, its client certificate) to a
    :class:`Principal`."""

    def __init__(self, grants: Sequence[TokenGrant]) -> None:
        self._grants = tuple(grants)
        self._by_certificate = {grant.client_cn: grant for grant in grants if grant.client_cn}

    @property
    def enabled(self) -> bool:
        return bool(self._grants)

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


def check_read(principal: Principal, tables: Iterable[str]) -> None:
    """Fail with PERMISSION_DENIED unless ``principal`` may read every table in ``tables``."""
    denied = sorted({table for table in tables if not principal.may_read(table)})
    if denied:
        raise not_readable(principal, denied)


def not_readable(principal: Principal, tables: Iterable[str]) -> PermissionDenied:
    """The one answer a caller gets for a table it may not read, whether or not the table
    exists: a caller without the grant learns nothing about ungranted tables."""
    return PermissionDenied(
        f"token {principal.name!r} may not read table(s): {', '.join(tables)} "
        "(not granted, or not registered)"
    )


def resolve_readable(principal: Principal, registered: Iterable[str], name: str) -> str:
    """The registered spelling of ``name`` if ``principal`` may read it. An unknown name is
    NOT_FOUND only for a caller that may read every table; for any other caller it answers
    exactly like an ungranted one."""
    if not name:
        raise InvalidArgument("a table name is required")
    found = next((table for table in registered if table.lower() == name.lower()), None)
    if found is not None and principal.may_read(found):
        return found
    if found is None and not principal.restricted:
        raise NotFound(f"table {name!r} is not registered")
    raise not_readable(principal, [name])


def check_inspect(principal: Principal, table: str | None = None) -> None:
    """Fail with PERMISSION_DENIED unless ``principal`` may inspect (``table``'s) state."""
    if not principal.inspect:
        raise PermissionDenied(f"token {principal.name!r} may not inspect timelines and watermarks")
    if table is not None:
        check_read(principal, [table])
