"""What a broker starts to be watched: its metrics endpoint.

:class:`BrokerObserver` is built by the broker once its parts exist and stopped with it. The
endpoint serves the process-wide families counted as work happens (:mod:`broker.observe.metrics`)
together with this broker's state (:mod:`broker.observe.state_metrics`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from broker.config import BrokerConfig
from broker.observe import metrics
from broker.observe.state_metrics import BrokerParts, BrokerStateCollector
from core.metrics_endpoint import MetricsEndpoint
from timeline.errors import Unavailable


class BrokerObserver:
    """The metrics of one broker."""

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
        self._engine = engine

    def start(self) -> BrokerObserver:
        """Listen on ``[metrics] listen`` (when enabled) and hear every finished query."""
        queries = self._engine().queries
        queries.add_listener(metrics.count_query)
        if self.config.metrics.enabled:
            address = self.config.metrics_address
            try:
                self.endpoint = MetricsEndpoint(address, [metrics.REGISTRY, self.registry])
            except OSError as error:
                raise Unavailable(f"cannot serve metrics on {address}: {error}") from None
        return self

    @property
    def metrics_url(self) -> str:
        """``http://host:port/metrics`` ("" when metrics are off)."""
        return self.endpoint.url if self.endpoint is not None else ""

    def stop(self) -> None:
        if self.endpoint is not None:
            self.endpoint.stop()
