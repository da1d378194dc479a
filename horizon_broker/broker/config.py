"""The broker's configuration: one typed, immutable object.

Loaded from an optional TOML file, then overridden by ``HORIZON_<SECTION>_<KEY>`` environment
variables (``HORIZON_SERVER_LISTEN=0.0.0.0:50051``, ``HORIZON_LIMITS_MAX_CONCURRENT=8``), with
defaults that work on a laptop: loopback, a local Redis, embedded Spark, no tokens. Tokens and Spark
settings, being structured, come from ``HORIZON_TOKENS`` and ``HORIZON_SPARK_CONF`` as JSON; an
empty variable unsets an optional key. The sections are pydantic dataclasses (see
:mod:`horizon_broker._config` for why pydantic): their keys, defaults and rules are declared in
:mod:`.config_sections`, :mod:`.operations_config` and :mod:`.config_tokens`, and a bad value is
refused naming the file, section, key and rule::

    broker.toml: [limits] max_concurrent: must be >= 1 (got 0)

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
    warm_up = true               # a started broker reads a row of every table before callers do
    keep_views_s = 5.0           # idle, it builds the views of tables whose timeline moved
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
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from horizon_broker._config import Rule, Section, section, validated
from horizon_broker._config.environment import environment_overrides, json_value, merged
from horizon_broker._core.errors import InvalidArgument
from horizon_broker.broker.config_sections import (
    DEFAULT_FLIGHT_PORT,
    FlightConfig,
    LimitsConfig,
    ReadsConfig,
    RegressionPolicy,
    ServerConfig,
    SparkConfig,
    StateConfig,
    parse_listen,
    service_address,
)
from horizon_broker.broker.config_tokens import Grants
from horizon_broker.broker.operations_config import (
    DEFAULT_CONSOLE_PORT,
    DEFAULT_METRICS_PORT,
    ConsoleConfig,
    LoggingConfig,
    MetricsConfig,
)

__all__ = [
    "DEFAULT_FLIGHT_PORT",
    "BrokerConfig",
    "ConsoleConfig",
    "FlightConfig",
    "LimitsConfig",
    "LoggingConfig",
    "MetricsConfig",
    "ReadsConfig",
    "RegressionPolicy",
    "ServerConfig",
    "SparkConfig",
    "StateConfig",
    "config_from_mapping",
    "load_config",
    "parse_listen",
    "service_address",
    "with_overrides",
]

ENVIRONMENT_PREFIX = "HORIZON"


@section
class BrokerConfig(Section):
    """Everything the broker needs, in one object."""

    server: ServerConfig = Field(ServerConfig(), description="``[server]``")
    state: StateConfig = Field(StateConfig(), description="``[state]``")
    spark: SparkConfig = Field(SparkConfig(), description="``[spark]``")
    limits: LimitsConfig = Field(LimitsConfig(), description="``[limits]``")
    reads: ReadsConfig = Field(ReadsConfig(), description="``[reads]``")
    flight: FlightConfig = Field(FlightConfig(), description="``[flight]``")
    metrics: MetricsConfig = Field(MetricsConfig(), description="``[metrics]``")
    logging: LoggingConfig = Field(LoggingConfig(), description="``[logging]``")
    console: ConsoleConfig = Field(ConsoleConfig(), description="``[console]``")
    tokens: Grants = Field((), description="``[[tokens]]``: the identities and their grants.")

    @model_validator(mode="after")
    def _identities_are_distinct(self) -> BrokerConfig:
        secrets = [grant.token for grant in self.tokens if grant.token]
        if len(set(secrets)) != len(secrets):
            raise Rule("[[tokens]]", "two entries have the same token (secret)")
        names = [grant.name for grant in self.tokens]
        if len(set(names)) != len(names):
            raise Rule("[[tokens]]", "two entries have the same name (an identity owns pins)")
        if any(grant.client_cn for grant in self.tokens) and not self.server.tls_client_ca:
            raise Rule("[[tokens]]", "client_cn needs [server] tls_client_ca (mutual TLS)")
        return self

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


SECTIONS: dict[str, Any] = {
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
"""The file's sections by name (``[[tokens]]`` besides)."""


def load_config(
    path: str | Path | None = None, *, env: Mapping[str, str] | None = None
) -> BrokerConfig:
    """Load the configuration from ``path`` (TOML, optional), then ``HORIZON_*`` variables.

    ``path`` defaults to ``$HORIZON_CONFIG`` when set.
    """
    environ = os.environ if env is None else env
    path = path or environ.get("HORIZON_CONFIG") or None
    if path is None:
        return config_from_mapping({}, env=environ)
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise InvalidArgument(f"configuration file {path} does not exist") from None
    except tomllib.TOMLDecodeError as error:
        raise InvalidArgument(f"configuration file {path} is not valid TOML: {error}") from None
    return config_from_mapping(data, env=environ, source=str(path))


def config_from_mapping(
    data: Mapping[str, Any], *, env: Mapping[str, str] | None = None, source: str | None = None
) -> BrokerConfig:
    """Build the configuration from TOML-shaped data plus environment overrides (``source``:
    the file it came from, named in errors)."""
    overrides, origins = environment_overrides(env or {}, ENVIRONMENT_PREFIX, SECTIONS)
    combined = merged(data, overrides)
    if env and "HORIZON_TOKENS" in env:
        combined["tokens"] = json_value("HORIZON_TOKENS", env["HORIZON_TOKENS"])
        origins[("tokens",)] = "HORIZON_TOKENS"
    return validated(BrokerConfig, combined, source=source, origins=origins)


def with_overrides(config: BrokerConfig, **sections: Any) -> BrokerConfig:
    """A copy of ``config`` with whole sections replaced (handy in tests and the CLI)."""
    return replace(config, **sections)
