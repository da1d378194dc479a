"""The HTTP endpoint a Horizon process serves its Prometheus metrics on.

Every process role keeps its metrics in registries of its own (the broker's, an ingestion
server's, a compactor's, the locks both of those take), so one process never shows another role's
families; the endpoint serves the registries of its role together. The HTTP server and the text
exposition are ``prometheus_client``'s own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import start_http_server
from prometheus_client.registry import Collector, CollectorRegistry


class CombinedRegistries(Collector):
    """Several registries served as one (a name registered in two would be served twice)."""

    def __init__(self, registries: Iterable[CollectorRegistry]) -> None:
        self.registries = tuple(registries)

    def collect(self) -> Iterator[Any]:
        for registry in self.registries:
            yield from registry.collect()


def split_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:9464`` for IPv6) as its parts; ValueError when malformed."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"listen address {listen!r} must be host:port")
    return host.strip("[]"), int(port)


class MetricsEndpoint:
    """``/metrics`` of some registries on ``host:port`` (port 0: any free port), on a daemon
    thread until :meth:`stop`."""

    def __init__(self, listen: str, registries: Iterable[CollectorRegistry]) -> None:
        self.host, port = split_listen(listen)
        self.source = CombinedRegistries(registries)
        self._server, self._thread = start_http_server(port, self.host, registry=self.source)
        self.port = int(self._server.server_port)
        self._stopped = threading.Event()

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
