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

from typing import Literal

from pydantic import Field, field_validator

from horizon_broker._config import Rule, Section, section
from horizon_broker.broker.config_sections import LISTEN_RULE, Listen

DEFAULT_METRICS_PORT = 9464
DEFAULT_CONSOLE_PORT = 50053

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]


@section
class MetricsConfig(Section):
    """The Prometheus endpoint (:mod:`horizon_broker.broker.observe`): no credentials, so
    loopback by default."""

    enabled: bool = Field(True, description="Serve the Prometheus endpoint.")
    listen: Listen = Field(
        "",
        description="Empty: ``127.0.0.1:9464``, or any free port when ``[server]`` asks for one "
        "(port 0).",
        json_schema_extra=LISTEN_RULE,
    )


@section
class LoggingConfig(Section):
    """How the broker's log lines are written (:mod:`horizon_broker._core.logs`)."""

    format: Literal["text", "json"] = Field(
        "text", description="``json`` writes one JSON object per line."
    )
    level: LogLevel = Field("INFO", description="The broker's own log level.")
    queries: bool = Field(
        True,
        description="One line per query end (identity, tables, snapshot, status, rows, "
        "timings, cache).",
    )
    error_messages: bool = Field(
        False,
        description="Write a failed query's error message in its line. Off: the status code "
        "and Spark's error condition only, as the message may quote the caller's literals and "
        "logs promise no SQL.",
    )
    library_level: LogLevel = Field(
        "WARNING",
        description="The level of third-party loggers (py4j, urllib3, asyncio, gRPC, PySpark; "
        "py4j writes an INFO line per Spark probe otherwise).",
    )
    state_check_s: float = Field(
        1.0,
        gt=0,
        description="How often the broker looks for state changes to log (stale servers, "
        "revoked locks...).",
    )


@section
class ConsoleConfig(Section):
    """The web console (:mod:`horizon_broker.broker.console`): the same identities and grants as
    the gRPC API."""

    enabled: bool | None = Field(
        None,
        description="Unset: on when it listens on loopback or ``[[tokens]]`` are configured, "
        "off otherwise (a console open to every machine would show every table). ``true`` on "
        "another address without tokens is refused unless ``[server] allow_anonymous``.",
    )
    listen: Listen = Field(
        "",
        description="Empty: ``[server]``'s host with port 50053, or any free port when "
        "``[server]``'s is 0.",
        json_schema_extra=LISTEN_RULE,
    )
    max_rows: int = Field(
        1000,
        ge=1,
        description="Rows a query box answer may have (more: RESOURCE_EXHAUSTED, as "
        "ExecuteQuery's max_rows).",
    )
    session_ttl_s: float = Field(
        12 * 3600.0, gt=0, description="A signed-in browser's session lasts this long unused."
    )
    refresh_s: float = Field(
        2.0,
        gt=0,
        description="How often pages of live state (timeline, locks, queries) refresh themselves.",
    )
    allowed_hosts: str = Field(
        "",
        description="More names browsers may reach the console by, comma-separated ``name`` or "
        "``name:port`` (a name without a port matches any port, as behind a proxy), besides its "
        "bound address, ``localhost``, ``127.0.0.1`` and ``[::1]`` on its own port. Requests "
        "naming any other Host are refused (421), so a page that rebinds its name to this "
        "machine reads nothing.",
        json_schema_extra={"rule": "host names (name or name:port), comma-separated"},
    )
    login_failures_per_minute: int = Field(
        5,
        ge=1,
        description="Failed sign-ins (and unknown bearer tokens) one client address may have in "
        "a minute; then 429 with ``Retry-After`` until the oldest is a minute old.",
    )

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, value: str) -> str:
        for name in _names(value):
            if "/" in name or any(c.isspace() for c in name):
                raise Rule("", f"names hosts (name or name:port), not {name!r}")
        return value

    @property
    def allowed_host_names(self) -> tuple[str, ...]:
        return _names(self.allowed_hosts)


def _names(hosts: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in hosts.split(",") if name.strip())
