"""Bearer-token authentication and per-table grants (pure: metadata in, principal out).

With no tokens configured the broker is open (a laptop default, loopback only unless TLS): every
caller is the anonymous principal with every grant. With tokens, each call must carry
``authorization: Bearer <token>``; the token's grant names the tables it may read and whether it
may inspect timelines and watermarks.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from broker.config import ALL_TABLES, TokenGrant
from timeline.errors import PermissionDenied, Unauthenticated

AUTH_HEADER = "authorization"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling and what they may do."""

    name: str
    tables: frozenset[str]
    inspect: bool

    def may_read(self, table: str) -> bool:
        return ALL_TABLES in self.tables or table.lower() in self.tables


ANONYMOUS = Principal("anonymous", frozenset({ALL_TABLES}), inspect=True)


class Authenticator:
    """Maps a call's metadata to a :class:`Principal` and checks grants."""

    def __init__(self, grants: Sequence[TokenGrant]) -> None:
        self._grants = tuple(grants)

    @property
    def enabled(self) -> bool:
        return bool(self._grants)

    def authenticate(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> Principal:
        if not self._grants:
            return ANONYMOUS
        header = next((value for key, value in metadata or () if key.lower() == AUTH_HEADER), None)
        if header is None:
            raise Unauthenticated("missing bearer token: send 'authorization: Bearer <token>'")
        if isinstance(header, bytes):
            header = header.decode("utf-8", "replace")
        scheme, _, secret = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise Unauthenticated("malformed authorization header: expected 'Bearer <token>'")
        secret = secret.strip()
        for grant in self._grants:
            # Compare every token in constant time so timing tells nothing about near misses.
            if hmac.compare_digest(grant.token.encode(), secret.encode()):
                return Principal(grant.name, grant.tables, grant.inspect)
        raise Unauthenticated("unknown bearer token")


def check_read(principal: Principal, tables: Iterable[str]) -> None:
    """Fail with PERMISSION_DENIED unless ``principal`` may read every table in ``tables``."""
    denied = sorted({table for table in tables if not principal.may_read(table)})
    if denied:
        raise PermissionDenied(
            f"token {principal.name!r} may not read table(s): {', '.join(denied)}"
        )


def check_inspect(principal: Principal, table: str | None = None) -> None:
    """Fail with PERMISSION_DENIED unless ``principal`` may inspect (``table``'s) state."""
    if not principal.inspect:
        raise PermissionDenied(f"token {principal.name!r} may not inspect timelines and watermarks")
    if table is not None:
        check_read(principal, [table])
