"""The configuration sections for operating a broker: ``[metrics]``, ``[logging]``, ``[console]``.

Parts of the one typed configuration (:class:`horizon_broker.broker.config.BrokerConfig`), loaded from TOML and
``HORIZON_<SECTION>_<FIELD>`` variables like every other section::

    [metrics]
    enabled = true
    listen = "127.0.0.1:9464"    # default; any free port when [server] asks for one (port 0)

    [logging]
    format = "json"              # or "text" (the default)
    level = "INFO"
    queries = true               # one line per query end
    error_messages = false       # a failed query's line: status and Spark's condition only
    library_level = "WARNING"    # py4j, urllib3, asyncio, gRPC, PySpark's own loggers
    state_check_s = 1.0          # how often state changes are looked for

    [console]
    # enabled: unset = on for a loopback address, or wherever [[tokens]] are configured
    listen = "127.0.0.1:50053"   # default: [server]'s host, port 50053 (free port with port 0)
    max_rows = 1000              # a query box answer over this fails like max_rows does
    allowed_hosts = ""           # more names for it, "console.example.org, 10.0.0.5:50053"
    login_failures_per_minute = 5
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from horizon_broker._core.errors import InvalidArgument

DEFAULT_METRICS_PORT = 9464
DEFAULT_CONSOLE_PORT = 50053

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """The Prometheus endpoint (:mod:`horizon_broker.broker.observe`): no credentials, so loopback by default."""

    enabled: bool = True
    listen: str = ""
    """Empty: ``127.0.0.1:9464``, or any free port when ``[server]`` asks for one (port 0)."""


@dataclass(frozen=True, slots=True)
class LoggingConfig:
    """How the broker's log lines are written (:mod:`horizon_broker._core.logs`)."""

    format: Literal["text", "json"] = "text"
    level: LogLevel = "INFO"
    queries: bool = True
    """One line per query end (identity, tables, snapshot, status, rows, timings, cache)."""
    error_messages: bool = False
    """Write a failed query's error message in its line. Off: the status code and Spark's error
    condition only, as the message may quote the caller's literals and logs promise no SQL."""
    library_level: LogLevel = "WARNING"
    """The level of third-party loggers (py4j writes an INFO line per Spark probe otherwise)."""
    state_check_s: float = 1.0
    """How often the broker looks for state changes to log (stale servers, revoked locks...)."""


@dataclass(frozen=True, slots=True)
class ConsoleConfig:
    """The web console (:mod:`horizon_broker.broker.console`): the same identities and grants as the gRPC API."""

    enabled: bool | None = None
    """Unset: on when it listens on loopback or ``[[tokens]]`` are configured, off otherwise (a
    console open to every machine would show every table). ``true`` on another address without
    tokens is refused unless ``[server] allow_anonymous``."""
    listen: str = ""
    """Empty: ``[server]``'s host with port 50053, or any free port when ``[server]``'s is 0."""
    max_rows: int = 1000
    """Rows a query box answer may have (more: RESOURCE_EXHAUSTED, as ExecuteQuery's max_rows)."""
    session_ttl_s: float = 12 * 3600.0
    """A signed-in browser's session lasts this long without use."""
    refresh_s: float = 2.0
    """How often pages of live state (timeline, locks, queries) refresh themselves."""
    allowed_hosts: str = ""
    """More names browsers may reach the console by, comma-separated ``name`` or ``name:port``
    (a name without a port matches any port, as behind a proxy), besides its bound address,
    ``localhost``, ``127.0.0.1`` and ``[::1]`` on its own port. Requests naming any other Host
    are refused (421), so a page that rebinds its name to this machine reads nothing."""
    login_failures_per_minute: int = 5
    """Failed sign-ins (and unknown bearer tokens) one client address may have in a minute;
    then 429 with ``Retry-After`` until the oldest is a minute old."""

    @property
    def allowed_host_names(self) -> tuple[str, ...]:
        return tuple(name.strip() for name in self.allowed_hosts.split(",") if name.strip())


def check_operations(console: ConsoleConfig, logging: LoggingConfig) -> None:
    """The console and logging sections' own rules (addresses are checked with the other
    listeners')."""
    if logging.state_check_s <= 0:
        raise InvalidArgument("[logging] state_check_s must be > 0")
    if console.max_rows < 1:
        raise InvalidArgument("[console].max_rows must be >= 1")
    if console.session_ttl_s <= 0 or console.refresh_s <= 0:
        raise InvalidArgument("[console] session_ttl_s and refresh_s must be > 0")
    if console.login_failures_per_minute < 1:
        raise InvalidArgument("[console].login_failures_per_minute must be >= 1")
    for name in console.allowed_host_names:
        if "/" in name or any(c.isspace() for c in name):
            raise InvalidArgument(
                f"[console].allowed_hosts names hosts (name or name:port), not {name!r}"
            )
