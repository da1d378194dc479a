"""The broker file's sections ``[server]``, ``[state]``, ``[spark]``, ``[limits]``, ``[reads]`` and
``[flight]``: each key declared once, with its default, its constraint and what it means (the
generated reference, docs/reference/configuration.md, is made of these declarations).

``[metrics]``, ``[logging]`` and ``[console]`` are in :mod:`.operations_config`; the whole file
and its loading in :mod:`.config`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, PlainValidator, model_validator
from pydantic.config import JsonDict

from horizon_broker._config import Rule, Section, refusing, section
from horizon_broker._core.errors import InvalidArgument
from horizon_broker._core.store_address import check_store_url
from horizon_broker.broker.sql.model import WorkBudget

_BUDGET = WorkBudget()
"""The work budget's defaults: ``[limits]`` takes them from the rewriter, which checks them."""

RegressionPolicy = Literal["keep", "fail"]
DEFAULT_FLIGHT_PORT = 50052
LISTEN_RULE: JsonDict = {"rule": "host:port ([::1]:50051 for IPv6); port 0: any free port"}


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


def _listen(value: str) -> str:
    if value:
        try:
            parse_listen(value)
        except InvalidArgument as error:
            raise Rule("", str(error)) from None
    return value


Listen = Annotated[str, AfterValidator(_listen)]
"""A ``host:port`` address; empty (where allowed) means the listener's default."""


def _store_url(value: str) -> str:
    with refusing(""):
        return check_store_url(value)


StoreUrl = Annotated[str, AfterValidator(_store_url)]
"""A state-store URL (:mod:`horizon_broker._core.store_address`), refused when it does not parse."""
STORE_URL_RULE: JsonDict = {
    "rule": "redis://, rediss://, unix:// or redis+sentinel://host:port[,host:port...]/master[/db]"
}


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


@section
class ServerConfig(Section):
    """Where and how the gRPC server listens."""

    listen: Listen = Field(
        "127.0.0.1:50051", description="The gRPC address.", json_schema_extra=LISTEN_RULE
    )
    tls_cert: str | None = Field(None, description="PEM certificate; with tls_key: TLS.")
    tls_key: str | None = Field(None, description="PEM private key; given with tls_cert.")
    tls_client_ca: str | None = Field(
        None,
        description="With TLS: require client certificates signed by this CA (mutual TLS); a "
        "certificate's common name is the caller's identity (``[[tokens]] client_cn``).",
    )
    allow_insecure_remote: bool = Field(
        False, description="Allow plaintext on a non-loopback address (refused by default)."
    )
    allow_anonymous: bool = Field(
        False,
        description="Serve callers without a token or certificate on a non-loopback address "
        "(refused by default: with no ``[[tokens]]`` every caller could read every table).",
    )
    grace_s: float = Field(
        5.0, ge=0, description="How long a stopping server lets running calls finish."
    )
    reflection: bool = Field(
        False,
        description="Serve gRPC server reflection (``grpcurl list`` without the .proto files). "
        "Off by default: reflection answers before any token is checked, so it would describe "
        "the API to anyone.",
    )

    @model_validator(mode="after")
    def _tls_settings_agree(self) -> ServerConfig:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise Rule(
                "tls_key" if self.tls_cert else "tls_cert", "give tls_cert and tls_key together"
            )
        if self.tls_client_ca and not self.tls:
            raise Rule("tls_client_ca", "needs tls_cert and tls_key (mutual TLS)")
        return self

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert and self.tls_key)


@section
class StateConfig(Section):
    """The Redis state store the broker follows."""

    redis_url: StoreUrl = Field(
        "redis://127.0.0.1:6379/0",
        description="The state store: ``redis://host:6379/0``, or a Sentinel group, "
        "``redis+sentinel://h1:26379,h2:26379/mymaster/0`` (the broker follows its failovers). "
        "``?wait_replicas=N&wait_timeout_ms=MS``: pins wait for N replicas (see the failover "
        "contract, docs/design/contract/failover.md).",
        json_schema_extra=STORE_URL_RULE,
    )
    key_prefix: str = Field("horizon", description="The Redis key prefix.")
    heartbeat_timeout_s: float = Field(
        5.0, gt=0, description="An ingestion server without a heartbeat this long is stale."
    )
    max_staleness_s: float = Field(
        30.0, gt=0, description="Past this without news of a table, its queries fail (UNAVAILABLE)."
    )
    regression_policy: RegressionPolicy = Field(
        "keep",
        description="When a table's LWM goes back: ``keep`` serves the previous LWM, ``fail`` "
        "answers FAILED_PRECONDITION.",
    )
    sync_timeout_s: float = Field(
        10.0, gt=0, description="How long start-up waits for the first sync with the store."
    )
    unreadable_recheck_s: float = Field(
        10.0,
        gt=0,
        description="How often a segment found unreadable is checked again (readable: visible "
        "again).",
    )


def _spark_conf(raw: Any) -> tuple[tuple[str, str], ...]:
    """``[spark.conf]``'s settings as sorted pairs of strings (a TOML number becomes its text)."""
    if isinstance(raw, tuple):
        return raw
    if not isinstance(raw, Mapping):
        raise Rule("", "must be a table of Spark settings")
    return tuple(sorted((str(key), str(value)) for key, value in raw.items()))


SparkSettings = Annotated[
    tuple[tuple[str, str], ...],
    PlainValidator(_spark_conf, json_schema_input_type=dict[str, str | int | float | bool]),
]


@section
class SparkConfig(Section):
    """Where queries run: embedded local Spark, a standalone master, or a Spark Connect remote."""

    master: str = Field("local[*]", description="Embedded Spark, or ``spark://host:7077``.")
    remote: str | None = Field(None, description="``sc://host:15002`` selects Spark Connect.")
    app_name: str = Field("horizon-broker", description="The Spark application's name.")
    conf: SparkSettings = Field((), description="More Spark settings, ``[spark.conf]``.")
    direct_lookups: bool = Field(
        True,
        description="Answer plain primary-key lookups over local segment files with pyarrow, "
        "without a Spark job (footers' key and validity statistics prune row groups; sorted key "
        "columns pick the files; large row groups are decoded once and kept, or when too large "
        "to keep read by pages with DuckDB). Embedded Spark only; anything else runs on Spark.",
    )
    warm_up: bool = Field(
        True,
        description="Once a broker that started its own Spark answers queries, read one row of "
        "every table in the background (as the broker, the result cache bypassed), so its "
        "callers' first queries do not pay for the cold session's first views and jobs (a "
        "broker taking over from a failed one answers at once); again after the broker replaced "
        "a Spark session that died.",
    )
    keep_views_s: float = Field(
        5.0,
        ge=0,
        description="While a broker that started its own Spark runs no query, build the views "
        "of every table at its newest state this often (0: never), so the first queries of an "
        "idle broker (one taking over from a failed one) do not build them for a timeline "
        "that moved since its last query.",
    )
    direct_lookup_max_rows: int = Field(
        1_000_000,
        ge=0,
        description="A direct lookup whose candidate row groups hold more rows than this runs "
        "on Spark.",
    )
    direct_lookup_warm_s: float = Field(
        0.5,
        ge=0,
        description="At most this long per change, the broker reads what direct lookups need "
        "of the files ingestion adds to a table it answered a direct lookup of in the last ten "
        "minutes, before the change becomes visible (its queries wait that long at most); 0: "
        "lookups read them.",
    )
    driver_memory: str = Field(
        "4g", description="The embedded driver's JVM heap (local and cluster client mode)."
    )
    memory_fraction: float = Field(
        0.6,
        gt=0,
        lt=1,
        description="``spark.memory.fraction``: the heap share for execution and storage.",
    )
    max_result_size: str = Field(
        "",
        description='``spark.driver.maxResultSize`` ("": twice ``[limits] max_result_bytes``, '
        "at least 64m).",
    )
    task_max_failures: int = Field(
        1, ge=1, description="Attempts per task before the query fails (a caller's error fails "
        "at once)."
    )  # fmt: skip
    exit_on_oom: bool = Field(
        False,
        description="End the embedded JVM at any ``OutOfMemoryError`` (the supervisor then "
        "restarts Spark). Off: a task that runs out of memory fails its query alone and the JVM "
        "goes on serving the others.",
    )
    probe_interval_s: float = Field(
        2.0, gt=0, description="How often the broker checks that its Spark session answers."
    )
    probe_timeout_s: float = Field(
        10.0,
        gt=0,
        description="A session that does not answer a probe within this is wedged: the broker "
        "replaces it.",
    )

    @property
    def conf_dict(self) -> dict[str, str]:
        return dict(self.conf)


def _budget(name: str, description: str, minimum: int = 1) -> Any:
    """A ``[limits]`` key of the rewriter's work budget, its default the rewriter's."""
    return Field(getattr(_BUDGET, name), ge=minimum, description=description)


@section
class LimitsConfig(Section):
    """Admission and result limits; the SQL limits are handed to the rewriter, which checks the
    work budget before Spark runs anything."""

    max_concurrent: int = Field(4, ge=1, description="Queries running at once.")
    queue_size: int = Field(16, ge=0, description="Queries waiting; beyond: RESOURCE_EXHAUSTED.")
    max_result_rows: int = Field(
        1_000_000, ge=1, description="Rows per query (a request may ask for less)."
    )
    max_result_bytes: int = Field(
        256 * 1024 * 1024, ge=1, description="Arrow bytes per query (a request may ask for less)."
    )
    query_timeout_s: float = Field(
        300.0,
        gt=0,
        description="Upper bound on any query's run time, whatever deadline the client sets.",
    )
    max_sql_length: int = Field(100_000, ge=1, description="Characters of one query's SQL.")
    max_sql_nesting: int = Field(
        100,
        ge=1,
        description="Brackets, CASE blocks and prefix-operator runs, counted before parsing.",
    )
    max_sql_tree_depth: int = Field(1_000, ge=1, description="Depth of the parsed query.")
    batch_bytes: int = Field(
        1024 * 1024,
        ge=1,
        description="Target size of one Arrow batch message (well under gRPC's 4 MiB default).",
    )
    max_generated_rows: int = _budget("max_generated_rows", "Rows one ``range(...)`` may make.")
    max_array_elements: int = _budget(
        "max_array_elements", "Elements one ``sequence(...)`` or ``array_repeat(...)`` may make."
    )
    max_string_length: int = _budget(
        "max_string_length", "Characters one ``repeat``, ``space``, ``lpad`` or ``rpad`` may make."
    )
    max_partitions: int = _budget(
        "max_partitions",
        "Partitions ``range(...)``'s fourth argument or a partitioning hint may ask for.",
    )
    max_table_references: int = _budget(
        "max_table_references", "Tables, CTE references and table functions one query may read."
    )
    max_cross_joins: int = _budget(
        "max_cross_joins",
        "Joins without a join condition (between sources of more than one row).",
        minimum=0,
    )
    max_estimated_rows: int = _budget(
        "max_estimated_rows",
        "Rows one SELECT may build from its sources (stored rows; joins and generators multiply).",
    )
    max_value_size: int = _budget(
        "max_value_size", "Characters and elements one value may hold, all nesting counted."
    )
    max_grouping_sets: int = _budget(
        "max_grouping_sets", "Grouping sets one GROUP BY may ask for (CUBE of n expressions: 2^n)."
    )
    max_waiting: int = Field(
        256,
        ge=0,
        description="Calls that may wait besides the running and queued queries (for a "
        "snapshot, a pin, a slow Redis); each waits on a thread of its own, so the bound keeps "
        "threads finite.",
    )
    max_subscriptions_per_identity: int = Field(
        8,
        ge=0,
        description="Subscribe streams one identity may hold open at once; one more is "
        "RESOURCE_EXHAUSTED (0: subscriptions are off).",
    )
    subscription_max_lag_s: float = Field(
        300.0,
        ge=0,
        description="How long a subscription's next message may wait for a subscriber that "
        "does not read before the stream is ended with RESOURCE_EXHAUSTED naming the last "
        "resume token sent, to subscribe again from (0: never; meanwhile its deltas coalesce).",
    )

    @property
    def budget(self) -> WorkBudget:
        """The part of these limits the rewriter checks before Spark runs anything."""
        return WorkBudget(**{f.name: getattr(self, f.name) for f in fields(WorkBudget)})


@section
class ReadsConfig(Section):
    """The read controls (:mod:`horizon_broker.broker.engine.read_options`, ``freshness``,
    ``floor``, ``pinning``): waiting for a snapshot, the monotonic floor, the snapshot pins and
    the result cache."""

    max_wait_s: float = Field(
        30.0,
        gt=0,
        description="How long a query waits for a table's LWM to reach its ``min_snapshot`` (or "
        "the broker's floor) when the call sets no deadline.",
    )
    persist_floor: bool = Field(
        True,
        description="Keep the highest snapshot served per table in the state store, so a "
        "restarted broker never serves an older default snapshot.",
    )
    max_pin_lease_s: float = Field(
        86_400.0, gt=0, description="The longest lease one pin call may ask for."
    )
    cache: bool = Field(
        True, description="Keep answers at a fixed snapshot and timeline (a memory-bounded LRU)."
    )
    cache_max_bytes: int = Field(256 * 1024 * 1024, ge=0, description="The result cache's size.")
    cache_max_entry_bytes: int = Field(
        32 * 1024 * 1024,
        ge=0,
        description="A larger answer is not kept (it would push out many small dashboard answers).",
    )
    max_pins_per_identity: int = Field(
        16, ge=1, description="Live snapshot pins one identity (token name) may hold."
    )
    max_pin_lease_total_s: float = Field(
        2 * 86_400.0,
        gt=0,
        description="The leases of one identity's live pins, summed from now, may not exceed this.",
    )
    min_pin_lease_s: float = Field(
        1.0,
        gt=0,
        description="A shorter lease is refused (INVALID_ARGUMENT): pins that expire at once "
        "would never count in the quotas.",
        json_schema_extra={"rule": "<= max_pin_lease_s"},
    )

    @model_validator(mode="after")
    def _pin_leases_ordered(self) -> ReadsConfig:
        if self.min_pin_lease_s > self.max_pin_lease_s:
            raise Rule(
                "min_pin_lease_s",
                f"must be <= max_pin_lease_s ({self.max_pin_lease_s}) (got {self.min_pin_lease_s})",
            )
        return self


@section
class FlightConfig(Section):
    """The Arrow Flight SQL endpoint (:mod:`horizon_broker.broker.flight`): its own listener,
    the TLS settings and tokens of ``[server]``, the same query path as ExecuteQuery."""

    enabled: bool = Field(True, description="Serve Arrow Flight SQL.")
    listen: Listen = Field(
        "",
        description="Empty: ``[server]``'s host with port 50052, or any free port when "
        "``[server]`` asks for one (port 0), so brokers started for tests or embedded never "
        "compete for a fixed port.",
        json_schema_extra=LISTEN_RULE,
    )
    result_ttl_s: float = Field(
        60.0,
        gt=0,
        description="A query's result not fetched (DoGet) this long after GetFlightInfo is "
        "dropped.",
    )
    statement_ttl_s: float = Field(
        3600.0, gt=0, description="Prepared statements and sessions unused this long are closed."
    )
    max_statements: int = Field(10_000, ge=1, description="Open prepared statements.")
    max_statements_per_identity: int = Field(
        1_000, ge=1, description="Open prepared statements of one identity (token name)."
    )
    max_sessions: int = Field(10_000, ge=1, description="Open Flight SQL sessions.")
    max_sessions_per_identity: int = Field(
        1_000, ge=1, description="Open Flight SQL sessions of one identity."
    )
    max_waiting_results: int = Field(
        64,
        ge=1,
        description="Results computed by GetFlightInfo and not yet read by DoGet (they hold no "
        "query slot).",
    )
    max_waiting_results_per_identity: int = Field(
        16, ge=1, description="Such results of one identity."
    )

    def address(self, server_listen: str) -> str:
        """Where the endpoint listens, given ``[server] listen``."""
        return service_address(self.listen, server_listen, DEFAULT_FLIGHT_PORT)
