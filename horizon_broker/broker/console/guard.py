"""What the console's pages trust a browser with: the Host it names, where a POST comes from, and
the CSRF token every form carries.

A console on loopback with no tokens answers anyone who can reach it, and every web page the
operator opens can make the browser reach it. Three checks, before any page runs, keep such a
page out:

- **Host allow-list** (DNS rebinding): a name the attacker controls can be made to resolve to
  127.0.0.1, so the browser treats the console as the attacker's origin. The ``Host`` header
  still names the attacker's name: only the console's bound address, ``localhost``,
  ``127.0.0.1`` and ``[::1]`` on the console's port, and ``[console] allowed_hosts``, are served
  (else 421).
- **Origin** on every POST: ``Origin`` (or, without it, ``Referer``) must be the console's own
  origin (else 403). A page on another port of the same host is another origin but the same
  *site*, so SameSite cookies alone do not stop it.
- **CSRF token** on every POST: a form field (or ``X-CSRF-Token`` header) equal to an HMAC, under
  a key of this process, of the browser's session id, or with no session (no tokens configured,
  or not signed in yet) of a random HttpOnly cookie the console set (a signed double submit).

Scripts sending ``Authorization: Bearer`` are not browsers' forms: a page cannot add that header
to a cross-origin request without a CORS preflight, which the console never grants, so their
POSTs need neither Origin nor token. The checks are pure functions; :class:`ConsoleGuard` is the
ASGI shell that applies them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse

from horizon_broker.broker.console.sessions import COOKIE

CSRF_COOKIE = "horizon_csrf"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
MAX_FORM_BYTES = 2 * 1024 * 1024
"""A POST body read for its token: the query box's SQL (``[limits] max_sql_length``, 100,000
characters) percent-encoded fits many times over."""
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class Refusal:
    """Why a request is not served: its HTTP status and a text naming the problem."""

    status: int
    text: str


def split_host(host: str) -> tuple[str, int | None]:
    """``name[:port]`` (``[v6]:port`` for IPv6) as the lower-case name and the port, if any."""
    host = host.strip().lower()
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif host.count(":") == 1:
        name, _, port = host.partition(":")
    else:
        name, port = host, ""
    return name, int(port) if port.isdigit() else None


@dataclass(frozen=True)
class HostPolicy:
    """The names the console answers to: ``default_names`` on its own port (or with no port
    given), and ``configured`` ``(name, port)`` entries, a missing port matching any (a proxy in
    front of the console may name its own)."""

    default_names: frozenset[str]
    configured: tuple[tuple[str, int | None], ...]

    @classmethod
    def of(cls, bound_host: str, allowed_hosts: Iterable[str]) -> HostPolicy:
        defaults = {*LOOPBACK_NAMES, bound_host.strip("[]").lower()} - {"", "0.0.0.0", "::"}
        return cls(frozenset(defaults), tuple(split_host(entry) for entry in allowed_hosts))

    def check(self, host: str | None, port: int) -> Refusal | None:
        """None when ``host`` (the Host header) is allowed on a console serving ``port``."""
        if not host:
            return Refusal(400, "a Host header is required")
        name, given = split_host(host)
        if name in self.default_names and given in (port, None):
            return None
        if any(name == n and p in (given, None) for n, p in self.configured):
            return None
        return Refusal(
            421,
            f"this console does not answer to the host {host!r} (a page may have rebound its "
            "name to this machine): use the console's own address, or list the name in "
            "[console] allowed_hosts",
        )


def check_origin(headers: Mapping[str, str], scheme: str, host: str) -> Refusal | None:
    """A POST must come from the console's own pages: its ``Origin``, or without one the
    ``Referer``'s origin, is ``scheme://host`` of the request itself."""
    origin = headers.get("origin")
    if origin is None and headers.get("referer"):
        parts = urlsplit(headers["referer"])
        origin = f"{parts.scheme}://{parts.netloc}"
    expected = f"{scheme}://{host}".lower()
    if not origin:
        return Refusal(
            403,
            f"a POST to the console must come from its own pages ({expected}): the request "
            "names neither its Origin nor a Referer",
        )
    if origin.strip().lower() != expected:
        return Refusal(
            403,
            f"a POST to the console must come from its own pages ({expected}), not from {origin!r}",
        )
    return None


class CsrfTokens:
    """The CSRF token of a browser: an HMAC, under a key of this process, of its session id,
    or with no session of its ``horizon_csrf`` cookie (a broker restart asks for a reload)."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)

    @staticmethod
    def binding(cookies: Mapping[str, str]) -> str:
        """What the token is bound to: the session cookie, else the CSRF cookie ('' neither)."""
        return cookies.get(COOKIE) or cookies.get(CSRF_COOKIE) or ""

    @staticmethod
    def new_binding() -> str:
        """A value for a browser's new ``horizon_csrf`` cookie."""
        return secrets.token_urlsafe(32)

    def token_for(self, binding: str) -> str:
        digest = hmac.new(self._key, b"horizon-console-csrf\0" + binding.encode(), hashlib.sha256)
        return base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")

    def check(self, cookies: Mapping[str, str], given: str | None) -> Refusal | None:
        """None when ``given`` is the token of the browser's cookies."""
        binding = self.binding(cookies)
        if not binding:
            return Refusal(403, "the console's CSRF cookie is missing: reload the page")
        if not given:
            return Refusal(403, "the form has no CSRF token: reload the page and send it again")
        if not hmac.compare_digest(given.encode(), self.token_for(binding).encode()):
            return Refusal(403, "the CSRF token does not match: reload the page and send it again")
        return None


def form_token(content_type: str, body: bytes) -> str | None:
    """The CSRF field of a URL-encoded form body (other bodies carry it in the header)."""
    if content_type.split(";")[0].strip().lower() != "application/x-www-form-urlencoded":
        return None
    values = parse_qs(body.decode("utf-8", "replace")).get(CSRF_FIELD)
    return values[0] if values else None


class ConsoleGuard:
    """ASGI middleware: every request's Host, and every unsafe request's Origin and CSRF token
    (scripts with a bearer header excepted), before the console's pages see it."""

    def __init__(self, app: App, hosts: HostPolicy, tokens: CsrfTokens) -> None:
        self.app = app
        self.hosts = hosts
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal, receive = await self._refusal(scope, receive)
        if refusal is not None:
            response = PlainTextResponse(refusal.text + "\n", status_code=refusal.status)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _refusal(self, scope: Scope, receive: Receive) -> tuple[Refusal | None, Receive]:
        """Why the request is refused (None: serve it), and the ``receive`` the page reads."""
        request = Request(scope)
        headers = request.headers
        server = scope.get("server")
        refusal = self.hosts.check(headers.get("host"), server[1] if server else 0)
        unsafe = scope["method"] not in SAFE_METHODS and "authorization" not in headers
        if refusal is not None or not unsafe:
            return refusal, receive
        refusal = check_origin(headers, scope["scheme"], headers["host"])
        if refusal is not None:
            return refusal, receive
        body, refusal = await _read_body(receive)
        if refusal is not None:
            return refusal, receive
        given = headers.get(CSRF_HEADER) or form_token(headers.get("content-type", ""), body)
        return self.tokens.check(request.cookies, given), _replay(body, receive)


async def _read_body(receive: Receive) -> tuple[bytes, Refusal | None]:
    """The whole request body, up to :data:`MAX_FORM_BYTES` (more: 413)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            return b"", Refusal(413, f"a console form may have at most {MAX_FORM_BYTES} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks), None


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the page the body already read, then the connection's events."""
    delivered = False

    async def replayed() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
