"""The broker's configuration: one typed, immutable object.

Loaded from an optional TOML file, then overridden by ``HORIZON_<SECTION>_<FIELD>`` environment
variables (``HORIZON_SERVER_LISTEN=0.0.0.0:50051``, ``HORIZON_LIMITS_MAX_CONCURRENT=8``), with
defaults that work on a laptop: loopback, a local Redis, embedded Spark, no tokens. Tokens and Spark
settings, being structured, come from ``HORIZON_TOKENS`` and ``HORIZON_SPARK_CONF`` as JSON.

TOML layout (every key optional)::

    [server]
    listen = "127.0.0.1:50051"
    tls_cert = "/etc/horizon/tls.crt"
    tls_key = "/etc/horizon/tls.key"
    allow_insecure_remote = false

    [state]
    redis_url = "redis://127.0.0.1:6379/0"
    key_prefix = "horizon"
    unreadable_recheck_s = 10.0  # a segment found unreadable is checked again this often

    [spark]
    master = "local[*]"          # or spark://host:7077
    remote = ""                  # or sc://host:15002 (Spark Connect)
    direct_lookups = true        # plain key lookups on local files: pyarrow, no Spark job
    direct_lookup_max_rows = 1000000
    direct_lookup_warm_s = 0.5   # reading new files of looked-up tables before they are visible
    [spark.conf]
    "spark.sql.shuffle.partitions" = "8"

    [limits]
    max_concurrent = 4

    [reads]
    max_wait_s = 30.0            # min_snapshot / floor wait when the call has no deadline
    persist_floor = true         # a restarted broker never serves an older default snapshot
    cache = true                 # answers at a fixed snapshot and timeline, memory-bounded LRU
    cache_max_bytes = 268435456

    [flight]
    enabled = true               # the Arrow Flight SQL endpoint (same TLS and tokens as [server])
    listen = "127.0.0.1:50052"   # default: [server]'s host, port 50052 (any free one if [server]'s is 0)

    [metrics] / [logging] / [console]   # see broker/operations_config.py

    [[tokens]]
    name = "analyst"
    token = "s3cret"
    tables = ["orders"]          # or ["*"]
    inspect = true
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.broker.config_values import build_section, json_env
from horizon_broker.broker.grants import TokenGrant, grants_from_entries
from horizon_broker.broker.operations_config import (
    DEFAULT_CONSOLE_PORT,
    DEFAULT_METRICS_PORT,
    ConsoleConfig,
    LoggingConfig,
    MetricsConfig,
    check_operations,
)
from horizon_broker.broker.sql.model import WorkBudget

_BUDGET = WorkBudget()
"""The work budget's defaults: ``[limits]`` takes them from the rewriter, which checks them."""

RegressionPolicy = Literal["keep", "fail"]


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Where and how the gRPC server listens."""

    listen: str = "127.0.0.1:50051"
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    """With TLS: require client certificates signed by this CA (mutual TLS); a certificate's
    common name is the caller's identity (``[[tokens]] client_cn``)."""
    allow_insecure_remote: bool = False
    """Allow plaintext on a non-loopback address (refused by default)."""
    allow_anonymous: bool = False
    """Serve callers without a token or certificate on a non-loopback address (refused by
    default: with no ``[[tokens]]`` every caller could read every table)."""
    grace_s: float = 5.0
    """How long a stopping server lets running calls finish."""
    reflection: bool = False
    """Serve gRPC server reflection (``grpcurl list`` without the .proto files). Off by default:
    reflection answers before any token is checked, so it would describe the API to anyone."""

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert and self.tls_key)


@dataclass(frozen=True, slots=True)
class StateConfig:
    """The Redis state store the broker follows."""

    redis_url: str = "redis://127.0.0.1:6379/0"
    key_prefix: str = "horizon"
    heartbeat_timeout_s: float = 5.0
    max_staleness_s: float = 30.0
    regression_policy: RegressionPolicy = "keep"
    sync_timeout_s: float = 10.0
    unreadable_recheck_s: float = 10.0
    """How often a segment found unreadable is checked again (readable: visible again)."""


@dataclass(frozen=True, slots=True)
class SparkConfig:
    """Where queries run: embedded local Spark, a standalone master, or a Spark Connect remote."""

    master: str = "local[*]"
    remote: str | None = None
    app_name: str = "horizon-broker"
    conf: tuple[tuple[str, str], ...] = ()
    direct_lookups: bool = True
    """Answer plain key lookups over local segment files with pyarrow, without a Spark job."""
    direct_lookup_max_rows: int = 1_000_000
    """A direct lookup whose candidate row groups hold more rows than this runs on Spark."""
    direct_lookup_warm_s: float = 0.5
    """At most this long per change, the broker reads what direct lookups need of the files
    ingestion adds to a table it answered a direct lookup of in the last ten minutes, before the
    change becomes visible (its queries wait that long at most); 0: lookups read them."""
    driver_memory: str = "4g"
    """The embedded driver's JVM heap (local and cluster client mode)."""
    memory_fraction: float = 0.6
    """``spark.memory.fraction``: the heap share for execution and storage."""
    max_result_size: str = ""
    """``spark.driver.maxResultSize`` ("": twice ``[limits].max_result_bytes``, at least 64m)."""
    task_max_failures: int = 1
    """Attempts per task before the query fails (a caller's error fails at once)."""
    exit_on_oom: bool = False
    """End the embedded JVM at any ``OutOfMemoryError`` (``-XX:+ExitOnOutOfMemoryError``; the
    supervisor then restarts Spark). Off: a task that runs out of memory fails its query alone
    (``spark.executor.killOnFatalError.depth=0``) and the JVM goes on serving the others."""
    probe_interval_s: float = 2.0
    """How often the broker checks that its Spark session answers."""
    probe_timeout_s: float = 10.0
    """A session that does not answer a probe within this is wedged: the broker replaces it."""

    @property
    def conf_dict(self) -> dict[str, str]:
        return dict(self.conf)


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """Admission and result limits; the SQL limits are handed to the rewriter."""

    max_concurrent: int = 4
    queue_size: int = 16
    max_result_rows: int = 1_000_000
    max_result_bytes: int = 256 * 1024 * 1024
    query_timeout_s: float = 300.0
    """Upper bound on any query's run time, whatever deadline the client sets."""
    max_sql_length: int = 100_000
    max_sql_nesting: int = 100
    """Brackets, CASE blocks and prefix-operator runs, counted before parsing."""
    max_sql_tree_depth: int = 1_000
    batch_bytes: int = 1024 * 1024
    """Target size of one Arrow batch message (well under gRPC's 4 MiB default)."""
    max_generated_rows: int = _BUDGET.max_generated_rows
    """Rows one ``range(...)`` may generate."""
    max_array_elements: int = _BUDGET.max_array_elements
    """Elements one ``sequence(...)`` or ``array_repeat(...)`` may make."""
    max_string_length: int = _BUDGET.max_string_length
    """Characters one ``repeat``, ``space``, ``lpad`` or ``rpad`` may make."""
    max_partitions: int = _BUDGET.max_partitions
    """Partitions ``range(...)``'s fourth argument or a partitioning hint may ask for."""
    max_table_references: int = _BUDGET.max_table_references
    """Tables, CTE references and table functions one query may read."""
    max_cross_joins: int = _BUDGET.max_cross_joins
    """Joins without a join condition (between sources of more than one row)."""
    max_estimated_rows: int = _BUDGET.max_estimated_rows
    """Rows one SELECT may build from its sources (stored rows; joins and generators multiply)."""
    max_value_size: int = _BUDGET.max_value_size
    """Characters and elements one value may hold, all nesting counted."""
    max_grouping_sets: int = _BUDGET.max_grouping_sets
    """Grouping sets one GROUP BY may ask for (CUBE of n expressions: 2^n)."""
    max_waiting: int = 256
    """Calls that may wait besides the running and queued queries (for a snapshot, a pin, a
    slow Redis); each waits on a thread of its own, so the bound keeps threads finite."""

    @property
    def budget(self) -> WorkBudget:
        """The part of these limits the rewriter checks before Spark runs anything."""
        return WorkBudget(**{f.name: getattr(self, f.name) for f in fields(WorkBudget)})


@dataclass(frozen=True, slots=True)
class ReadsConfig:
    """The read controls (:mod:`horizon_broker.broker.engine.read_options`, ``freshness``, ``floor``,
    ``pinning``): waiting for a snapshot, the monotonic floor, the snapshot pins and the result
    cache."""

    max_wait_s: float = 30.0
    """How long a query waits for a table's LWM to reach its ``min_snapshot`` (or the broker's
    floor) when the call sets no deadline."""
    persist_floor: bool = True
    """Keep the highest snapshot served per table in the state store, so a restarted broker
    never serves an older default snapshot."""
    max_pin_lease_s: float = 86_400.0
    cache: bool = True
    cache_max_bytes: int = 256 * 1024 * 1024
    cache_max_entry_bytes: int = 32 * 1024 * 1024
    """A larger answer is not kept (it would push out many small dashboard answers)."""
    max_pins_per_identity: int = 16
    """Live snapshot pins one identity (token name) may hold."""
    max_pin_lease_total_s: float = 2 * 86_400.0
    """The leases of one identity's live pins, summed from now, may not exceed this."""
    min_pin_lease_s: float = 1.0
    """A shorter lease is refused: pins that expire at once would never count in the quotas."""


@dataclass(frozen=True, slots=True)
class FlightConfig:
    """The Arrow Flight SQL endpoint (:mod:`horizon_broker.broker.flight`): its own listener, the TLS settings
    and tokens of ``[server]``, the same query path as ExecuteQuery."""

    enabled: bool = True
    listen: str = ""
    """Empty: ``[server]``'s host with port 50052, or any free port when ``[server]`` asks for one
    (port 0), so brokers started for tests or embedded never compete for a fixed port."""
    result_ttl_s: float = 60.0
    """A query's result not fetched (DoGet) this long after GetFlightInfo is dropped."""
    statement_ttl_s: float = 3600.0
    """Prepared statements and sessions unused this long are closed."""
    max_statements: int = 10_000
    max_statements_per_identity: int = 1_000
    """Open prepared statements, on the broker and of one identity (token name)."""
    max_sessions: int = 10_000
    max_sessions_per_identity: int = 1_000
    max_waiting_results: int = 64
    max_waiting_results_per_identity: int = 16
    """Results computed by GetFlightInfo and not yet read by DoGet (they hold no query slot)."""

    def address(self, server_listen: str) -> str:
        """Where the endpoint listens, given ``[server] listen``."""
        return service_address(self.listen, server_listen, DEFAULT_FLIGHT_PORT)


DEFAULT_FLIGHT_PORT = 50052


def service_address(
    configured: str, server_listen: str, default_port: int, *, host: str | None = None
) -> str:
    """Where one of the broker's listeners listens: ``configured``, else ``host`` (default:
    ``[server]``'s) with ``default_port``, or any free port when ``[server]`` asks for one."""
    if configured:
        return configured
    server_host, port = parse_listen(server_listen)
    chosen = host or server_host
    chosen = f"[{chosen}]" if ":" in chosen else chosen
    return f"{chosen}:{default_port if port else 0}"


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Everything the broker needs, in one object."""

    server: ServerConfig = ServerConfig()
    state: StateConfig = StateConfig()
    spark: SparkConfig = SparkConfig()
    limits: LimitsConfig = LimitsConfig()
    reads: ReadsConfig = ReadsConfig()
    flight: FlightConfig = FlightConfig()
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    console: ConsoleConfig = field(default_factory=ConsoleConfig)
    tokens: tuple[TokenGrant, ...] = ()

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def auth_enabled(self) -> bool:
        return bool(self.tokens)

    @property
    def metrics_address(self) -> str:
        """``[metrics] listen``, by default on loopback whatever ``[server]`` listens on."""
        listen = self.server.listen
        return service_address(self.metrics.listen, listen, DEFAULT_METRICS_PORT, host="127.0.0.1")

    @property
    def console_address(self) -> str:
        return service_address(self.console.listen, self.server.listen, DEFAULT_CONSOLE_PORT)


_SECTIONS: dict[str, type] = {
    "server": ServerConfig,
    "state": StateConfig,
    "spark": SparkConfig,
    "limits": LimitsConfig,
    "reads": ReadsConfig,
    "flight": FlightConfig,
    "metrics": MetricsConfig,
    "logging": LoggingConfig,
    "console": ConsoleConfig,
}


def load_config(
    path: str | Path | None = None, *, env: Mapping[str, str] | None = None
) -> BrokerConfig:
    """Load the configuration from ``path`` (TOML, optional), then ``HORIZON_*`` variables.

    ``path`` defaults to ``$HORIZON_CONFIG`` when set.
    """
    environ = os.environ if env is None else env
    path = path or environ.get("HORIZON_CONFIG") or None
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise InvalidArgument(f"configuration file {path} does not exist") from None
        except tomllib.TOMLDecodeError as error:
            raise InvalidArgument(f"configuration file {path} is not valid TOML: {error}") from None
    return config_from_mapping(data, env=environ)


def config_from_mapping(
    data: Mapping[str, Any], *, env: Mapping[str, str] | None = None
) -> BrokerConfig:
    """Build the configuration from TOML-shaped data plus environment overrides."""
    environ: Mapping[str, str] = env if env is not None else {}
    unknown = set(data) - {*_SECTIONS, "tokens"}
    if unknown:
        raise InvalidArgument(f"unknown configuration section(s): {', '.join(sorted(unknown))}")
    sections: dict[str, Any] = {}
    for name, cls in _SECTIONS.items():
        raw = dict(data.get(name, {}))
        if not isinstance(raw, dict):
            raise InvalidArgument(f"configuration section [{name}] must be a table")
        sections[name] = build_section(name, cls, raw, environ)
    tokens_raw: Any = data.get("tokens", [])
    if "HORIZON_TOKENS" in environ:
        tokens_raw = json_env("HORIZON_TOKENS", environ["HORIZON_TOKENS"])
    return BrokerConfig(**sections, tokens=grants_from_entries(tokens_raw))


def _validate(config: BrokerConfig) -> None:
    limits = config.limits
    for name in (
        "max_concurrent",
        "max_result_rows",
        "max_result_bytes",
        "batch_bytes",
        "max_sql_length",
        "max_sql_nesting",
        "max_sql_tree_depth",
        "max_generated_rows",
        "max_array_elements",
        "max_string_length",
        "max_partitions",
        "max_table_references",
        "max_estimated_rows",
        "max_value_size",
        "max_grouping_sets",
    ):
        if getattr(limits, name) < 1:
            raise InvalidArgument(f"[limits].{name} must be >= 1")
    if limits.max_cross_joins < 0:
        raise InvalidArgument("[limits].max_cross_joins must be >= 0")
    if limits.queue_size < 0:
        raise InvalidArgument("[limits].queue_size must be >= 0")
    if limits.query_timeout_s <= 0:
        raise InvalidArgument("[limits].query_timeout_s must be > 0")
    if bool(config.server.tls_cert) != bool(config.server.tls_key):
        raise InvalidArgument("[server] tls_cert and tls_key must be given together")
    if config.state.max_staleness_s <= 0 or config.state.heartbeat_timeout_s <= 0:
        raise InvalidArgument("[state] staleness and heartbeat limits must be > 0")
    if config.state.unreadable_recheck_s <= 0:
        raise InvalidArgument("[state].unreadable_recheck_s must be > 0")
    reads = config.reads
    if reads.max_wait_s <= 0 or not 0 < reads.min_pin_lease_s <= reads.max_pin_lease_s:
        raise InvalidArgument("[reads] max_wait_s > 0, 0 < min_pin_lease_s <= max_pin_lease_s")
    if reads.cache_max_bytes < 0 or reads.cache_max_entry_bytes < 0:
        raise InvalidArgument("[reads] cache sizes must be >= 0")
    flight = config.flight
    for listen in (flight.address(config.server.listen), config.metrics_address):
        parse_listen(listen)
    parse_listen(config.console_address)
    check_operations(config.console, config.logging)
    if flight.result_ttl_s <= 0 or flight.statement_ttl_s <= 0:
        raise InvalidArgument("[flight] result_ttl_s and statement_ttl_s must be > 0")
    for kind in ("statements", "sessions", "waiting_results"):
        if min(getattr(flight, f"max_{kind}"), getattr(flight, f"max_{kind}_per_identity")) < 1:
            raise InvalidArgument(f"[flight] max_{kind} and max_{kind}_per_identity must be >= 1")
    secrets = [grant.token for grant in config.tokens if grant.token]
    if len(set(secrets)) != len(secrets):
        raise InvalidArgument("two configured tokens have the same secret")
    names = [grant.name for grant in config.tokens]
    if len(set(names)) != len(names):
        raise InvalidArgument("two [[tokens]] entries have the same name (an identity owns pins)")
    if config.server.tls_client_ca and not config.server.tls:
        raise InvalidArgument("[server] tls_client_ca needs tls_cert and tls_key (mutual TLS)")
    if any(grant.client_cn for grant in config.tokens) and not config.server.tls_client_ca:
        raise InvalidArgument("[[tokens]] client_cn needs [server] tls_client_ca (mutual TLS)")
    spark = config.spark
    if not 0 < spark.memory_fraction < 1 or spark.task_max_failures < 1:
        raise InvalidArgument(
            "[spark] memory_fraction must be in (0, 1) and task_max_failures >= 1"
        )
    if spark.direct_lookup_warm_s < 0:
        raise InvalidArgument("[spark].direct_lookup_warm_s must be >= 0")
    if spark.probe_interval_s <= 0 or spark.probe_timeout_s <= 0:
        raise InvalidArgument("[spark] probe_interval_s and probe_timeout_s must be > 0")
    if limits.max_waiting < 0:
        raise InvalidArgument("[limits].max_waiting must be >= 0")
    if reads.max_pins_per_identity < 1 or reads.max_pin_lease_total_s <= 0:
        raise InvalidArgument(
            "[reads] max_pins_per_identity must be >= 1 and max_pin_lease_total_s > 0"
        )


def parse_listen(listen: str) -> tuple[str, int]:
    """Split ``host:port`` (``[::1]:50051`` for IPv6); port 0 asks for any free port."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host:
        raise InvalidArgument(f"listen address {listen!r} must be host:port")
    try:
        number = int(port)
    except ValueError:
        raise InvalidArgument(f"listen address {listen!r} has a bad port") from None
    if not 0 <= number <= 65535:
        raise InvalidArgument(f"listen address {listen!r} has a port out of range")
    return host.strip("[]"), number


def with_overrides(config: BrokerConfig, **sections: Any) -> BrokerConfig:
    """A copy of ``config`` with whole sections replaced (handy in tests and the CLI)."""
    return replace(config, **sections)
