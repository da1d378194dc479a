"""Browsers signed in to the console with a bearer token.

A browser shows its token once (the sign-in form); the console answers with a random session id
in an HttpOnly, SameSite=Strict cookie and keeps the identity it stands for in memory, so the
token itself is never stored in the browser nor sent again. Sessions end after ``ttl_s`` without
use, at sign-out, or when the broker stops. With no tokens configured every visitor is the
anonymous principal (loopback only, see :mod:`horizon_broker.broker.console.server`). Scripts may send
``Authorization: Bearer <token>`` instead.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Mapping

from horizon_broker._core.errors import Unauthenticated
from horizon_broker.broker.api.auth import Authenticator
from horizon_broker.broker.grants import Principal

COOKIE = "horizon_session"


class Sessions:
    """Session id -> principal, each forgotten after ``ttl_s`` seconds unused."""

    def __init__(
        self, auth: Authenticator, ttl_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.auth = auth
        self.ttl_s = ttl_s
        self._clock = clock
        self._sessions: dict[str, tuple[Principal, float]] = {}
        self._lock = threading.Lock()

    def sign_in(self, token: str) -> tuple[str, Principal]:
        """A new session for the token's identity (UNAUTHENTICATED for an unknown token)."""
        principal = self.auth.principal_for_token(token.strip())
        session = secrets.token_urlsafe(32)
        with self._lock:
            self._sessions[session] = (principal, self._clock() + self.ttl_s)
        return session, principal

    def sign_out(self, session: str) -> None:
        with self._lock:
            self._sessions.pop(session, None)

    def principal(self, cookies: Mapping[str, str], headers: Mapping[str, str]) -> Principal:
        """Who a request is: its bearer header, else its session cookie; UNAUTHENTICATED when
        neither names a live identity (never with no tokens configured)."""
        if not self.auth.enabled or "authorization" in headers:
            return self.auth.authenticate(
                [("authorization", headers["authorization"])] if "authorization" in headers else []
            )
        session = cookies.get(COOKIE, "")
        now = self._clock()
        with self._lock:
            for key in [k for k, (_, expires) in self._sessions.items() if expires <= now]:
                del self._sessions[key]
            found = self._sessions.get(session)
            if found is None:
                raise Unauthenticated("sign in with a token to use the console")
            self._sessions[session] = (found[0], now + self.ttl_s)
        return found[0]
