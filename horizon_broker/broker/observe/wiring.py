"""What a broker starts to be watched: its metrics endpoint, its query log, its state watcher.

:class:`BrokerObserver` is built by the broker once its parts exist and stopped with it. The
endpoint serves the process-wide families counted as work happens (:mod:`horizon_broker.broker.observe.metrics`)
together with this broker's state (:mod:`horizon_broker.broker.observe.state_metrics`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any, TextIO
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry

from horizon_broker._core.errors import Unavailable
from horizon_broker._core.logs import configure_logging
from horizon_broker._core.metrics_endpoint import MetricsEndpoint
from horizon_broker.broker.config import BrokerConfig
from horizon_broker.broker.observe import metrics
from horizon_broker.broker.observe.query_log import log_query
from horizon_broker.broker.observe.state_changes import StateWatch
from horizon_broker.broker.observe.state_metrics import BrokerParts, BrokerStateCollector


class BrokerObserver:
    """Metrics, the query log and the state watcher of one broker."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        follower: Any,
        engine: Callable[[], Any],
        supervisor: Callable[[], Any],
        pins: Callable[[], Any],
        locks: Callable[[], Any],
    ) -> None:
        self.config = config
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(
            BrokerStateCollector(BrokerParts(follower, engine, supervisor, pins))
        )
        self.endpoint: MetricsEndpoint | None = None
        self.watch = StateWatch(
            follower, locks=locks, supervisor=supervisor, interval=config.logging.state_check_s
        )
        self._engine = engine

    def start(self) -> BrokerObserver:
        """Listen on ``[metrics] listen`` (when enabled), hear every finished query, and start
        looking for state changes."""
        queries = self._engine().queries
        queries.add_listener(metrics.count_query)
        if self.config.logging.queries:
            with_messages = self.config.logging.error_messages
            queries.add_listener(partial(log_query, error_messages=with_messages))
        if self.config.metrics.enabled:
            address = self.config.metrics_address
            try:
                self.endpoint = MetricsEndpoint(address, [metrics.REGISTRY, self.registry])
            except OSError as error:
                raise Unavailable(f"cannot serve metrics on {address}: {error}") from None
        self.watch.start()
        return self

    @property
    def metrics_url(self) -> str:
        """``http://host:port/metrics`` ("" when metrics are off)."""
        return self.endpoint.url if self.endpoint is not None else ""

    def stop(self) -> None:
        self.watch.stop()
        if self.endpoint is not None:
            self.endpoint.stop()


def secrets_of(config: BrokerConfig) -> list[str]:
    """What no log line may show: every token, and the password of the Redis URL."""
    found = [grant.token for grant in config.tokens if grant.token]
    password = urlsplit(config.state.redis_url).password
    if password:
        found.append(password)
    return found


def configure_broker_logging(
    config: BrokerConfig, *, verbose: bool = False, stream: TextIO | None = None
) -> logging.Handler:
    """The process's log lines as ``[logging]`` says (``verbose``: DEBUG, libraries' loggers
    still at ``library_level``), secrets redacted."""
    settings = config.logging
    handler = configure_logging(
        settings.format,
        "DEBUG" if verbose else settings.level,
        secrets=secrets_of(config),
        stream=stream,
        library_level=settings.library_level,
    )
    _through(handler, PYSPARK_LOGGERS, enabled=settings.error_messages)
    return handler


PYSPARK_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
"""PySpark's loggers of analysis errors: they write the error message and the query plan
(literals included) to stderr with a handler of their own and do not propagate, so they would
bypass the redaction; they are silent unless ``[logging] error_messages`` asks for messages."""


def _through(handler: logging.Handler, names: tuple[str, ...], *, enabled: bool) -> None:
    """Send these PySpark loggers' lines through ``handler`` only (redacted, in our format),
    or nowhere when not ``enabled``."""
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # no PySpark, none of its lines
        return
    for name in names:
        logger = PySparkLogger.getLogger(name)
        for old in list(logger.handlers):
            logger.removeHandler(old)
        # PySparkLogger.addHandler would put its own formatter on our handler.
        logging.Logger.addHandler(logger, handler)
        logger.propagate = False  # as PySpark sets it: one line, not two
        logger.disabled = not enabled
