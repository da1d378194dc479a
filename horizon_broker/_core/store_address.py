"""Where the state store is: one URL, parsed and checked (rule F1 of
``docs/design/contract/failover.md``).

Every component takes the same URL, so a Sentinel deployment and the ``WAIT`` options are
configured once and followed by all of them::

    redis://[:password@]host:port/db[?wait_replicas=N&wait_timeout_ms=MS]
    redis+sentinel://[:password@]host:port[,host:port...]/master_name[/db][?wait_replicas=N...]

``rediss+sentinel://`` talks TLS to the primary; ``sentinel_password`` (a query option) is the
sentinels' own password. Pure: no connection is made here.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from horizon_broker._core.errors import InvalidArgument

PLAIN_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
WAIT_OPTIONS = ("wait_replicas", "wait_timeout_ms")

STORE_URL_HELP = (
    "state store URL, redis://host:port/db, or a Sentinel group: "
    "redis+sentinel://host:26379,host:26379/master/db"
)
"""The ``--redis`` option's help, the same in every command that takes a state store."""

SENTINEL_OPTIONS = (*WAIT_OPTIONS, "sentinel_password")
DEFAULT_WAIT_TIMEOUT_MS = 1000
DEFAULT_SENTINEL_PORT = 26379


@dataclass(frozen=True, slots=True)
class StoreAddress:
    """A parsed state-store URL: a plain Redis or a Sentinel group, and what a write waits for."""

    plain_url: str = ""
    """The URL redis-py opens (our options removed); empty for Sentinel."""
    sentinels: tuple[tuple[str, int], ...] = ()
    master_name: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None
    tls: bool = False
    wait_replicas: int = 0
    """Replicas that must confirm an acknowledged write (``WAIT``; 0: none)."""
    wait_timeout_ms: int = DEFAULT_WAIT_TIMEOUT_MS

    @property
    def sentinel(self) -> bool:
        return bool(self.sentinels)

    def describe(self) -> str:
        """The address without its passwords, for logs and errors."""
        if self.sentinel:
            hosts = ",".join(f"{host}:{port}" for host, port in self.sentinels)
            return f"sentinel {hosts} master {self.master_name!r} db {self.db}"
        parts = urlsplit(self.plain_url)
        netloc = parts.hostname or ""
        if parts.port:
            netloc = f"{netloc}:{parts.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def parse_store_url(url: str) -> StoreAddress:
    """Parse a state-store URL; a malformed one raises InvalidArgument naming the problem."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidArgument("the state store URL is empty")
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in SENTINEL_SCHEMES:
        return _sentinel(url, scheme)
    if scheme in PLAIN_SCHEMES:
        return _plain(url)
    raise InvalidArgument(
        f"state store URL {_redacted(url)!r}: the scheme must be one of "
        f"{', '.join(PLAIN_SCHEMES + SENTINEL_SCHEMES)}"
    )


def check_store_url(url: str) -> str:
    """``url`` if it parses (for configuration validators)."""
    parse_store_url(url)
    return url


def _plain(url: str) -> StoreAddress:
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours = {key: value for key, value in query if key in WAIT_OPTIONS}
    rest = [(key, value) for key, value in query if key not in WAIT_OPTIONS]
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as error:
        raise InvalidArgument(f"state store URL {_redacted(url)!r}: {error}") from None
    plain = urlunsplit(parts._replace(query=urlencode(rest)))
    wait_replicas, wait_timeout_ms = _wait(ours, url)
    return StoreAddress(
        plain_url=plain, wait_replicas=wait_replicas, wait_timeout_ms=wait_timeout_ms
    )


def _sentinel(url: str, scheme: str) -> StoreAddress:
    rest = url.split("://", 1)[1]
    rest, _, query_text = rest.partition("?")
    authority, _, path = rest.partition("/")
    userinfo, _, hosts = authority.rpartition("@")
    username, password = _userinfo(userinfo)
    query = dict(parse_qsl(query_text, keep_blank_values=True))
    unknown = sorted(set(query) - set(SENTINEL_OPTIONS))
    if unknown:
        raise InvalidArgument(
            f"state store URL {_redacted(url)!r}: unknown option(s) {', '.join(unknown)} "
            f"(known: {', '.join(SENTINEL_OPTIONS)})"
        )
    pieces = [unquote(piece) for piece in path.split("/") if piece]
    if not pieces:
        raise InvalidArgument(
            f"state store URL {_redacted(url)!r}: name the master after the sentinels "
            "(redis+sentinel://host:26379,host:26379/mymaster/0)"
        )
    if len(pieces) > 2:
        raise InvalidArgument(
            f"state store URL {_redacted(url)!r}: the path is /master_name[/db], got /{path}"
        )
    db = _number(pieces[1], "db", url) if len(pieces) == 2 else 0
    wait_replicas, wait_timeout_ms = _wait(query, url)
    return StoreAddress(
        sentinels=tuple(_host_port(item, url) for item in hosts.split(",")),
        master_name=pieces[0],
        db=db,
        username=username,
        password=password,
        sentinel_password=query.get("sentinel_password") or None,
        tls=scheme.startswith("rediss"),
        wait_replicas=wait_replicas,
        wait_timeout_ms=wait_timeout_ms,
    )


def _userinfo(text: str) -> tuple[str | None, str | None]:
    if not text:
        return None, None
    user, sep, password = text.partition(":")
    if not sep:
        return None, unquote(user) or None
    return unquote(user) or None, unquote(password) or None


def _host_port(item: str, url: str) -> tuple[str, int]:
    item = item.strip()
    if item.startswith("["):
        host, _, port_text = item[1:].partition("]")
        port_text = port_text.removeprefix(":")
    else:
        host, _, port_text = item.partition(":")
    if not host:
        raise InvalidArgument(
            f"state store URL {_redacted(url)!r}: a sentinel address is empty (host:port, ...)"
        )
    port = _number(port_text, "sentinel port", url) if port_text else DEFAULT_SENTINEL_PORT
    if not 0 < port < 65536:
        raise InvalidArgument(
            f"state store URL {_redacted(url)!r}: sentinel port {port} is out of range"
        )
    return host, port


def _wait(options: dict[str, str], url: str) -> tuple[int, int]:
    replicas = _number(options.get("wait_replicas", "0"), "wait_replicas", url)
    timeout = _number(
        options.get("wait_timeout_ms", str(DEFAULT_WAIT_TIMEOUT_MS)), "wait_timeout_ms", url
    )
    if timeout <= 0:
        raise InvalidArgument(
            f"state store URL {_redacted(url)!r}: wait_timeout_ms must be > 0 (got {timeout})"
        )
    return replicas, timeout


def _number(text: str, name: str, url: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidArgument(
            f"state store URL {_redacted(url)!r}: {name} must be a whole number (got {text!r})"
        ) from None
    if value < 0:
        raise InvalidArgument(
            f"state store URL {_redacted(url)!r}: {name} must be >= 0 (got {value})"
        )
    return value


def _redacted(url: str) -> str:
    """The URL without the password in its user part (errors must not quote secrets)."""
    if "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    authority, sep, tail = rest.partition("/")
    userinfo, at, hosts = authority.rpartition("@")
    if at and ":" in userinfo:
        authority = f"{userinfo.split(':', 1)[0]}:***@{hosts}"
    elif at:
        authority = f"***@{hosts}"
    return f"{scheme}://{authority}{sep}{tail}".split("?", 1)[0]
