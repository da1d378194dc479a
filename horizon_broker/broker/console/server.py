"""Serving the console: uvicorn on a thread of its own, on ``[console] listen``.

Who may reach it follows the broker's listen policy (:func:`horizon_broker.broker.api.listen.check_listen_policy`)
with one more rule: left unset, ``[console] enabled`` turns the console on only where it cannot
show every table to anyone (a loopback address, or identities configured). With TLS configured
for ``[server]`` the console serves HTTPS with the same certificate.

It answers only to the Host names :class:`horizon_broker.broker.console.guard.HostPolicy` allows, and takes
client addresses from the connection, never from ``X-Forwarded-For`` (uvicorn would trust it
from loopback by default, letting any local client pick the address its failed sign-ins count
against).
"""

from __future__ import annotations

import asyncio
import logging
import threading

import uvicorn

from horizon_broker._core.errors import Unavailable
from horizon_broker.broker.api.auth import Authenticator
from horizon_broker.broker.api.inspection import Inspection
from horizon_broker.broker.api.listen import check_listen_policy, is_loopback
from horizon_broker.broker.api.offload import Offload
from horizon_broker.broker.config import BrokerConfig, parse_listen
from horizon_broker.broker.console.guard import HostPolicy
from horizon_broker.broker.console.pages import Console
from horizon_broker.broker.console.sessions import Sessions
from horizon_broker.broker.console.stream_lags import StreamLags
from horizon_broker.broker.subscribe import OpenSubscriptions

log = logging.getLogger(__name__)


def console_wanted(config: BrokerConfig) -> bool:
    """Whether the console starts: ``[console] enabled``, or when unset, loopback or tokens."""
    enabled = config.console.enabled
    if enabled is not None:
        return enabled
    host, _ = parse_listen(config.console_address)
    return is_loopback(host) or config.auth_enabled


class ConsoleServer:
    """The console of one broker, until :meth:`stop`."""

    def __init__(
        self,
        config: BrokerConfig,
        inspection: Inspection,
        engine: object,
        subscriptions: OpenSubscriptions | None = None,
        offload: Offload | None = None,
    ) -> None:
        check_listen_policy(config, config.console_address, "[console] listen")
        self.config = config
        self.host, port = parse_listen(config.console_address)
        sessions = Sessions(Authenticator(config.tokens), config.console.session_ttl_s)
        hosts = HostPolicy.of(self.host, config.console.allowed_host_names)
        self.stream_lags = StreamLags(config.state.redis_url, config.state.key_prefix)
        self.pages = Console(
            inspection, engine, sessions, config.console, subscriptions, offload, self.stream_lags
        )
        app = self.pages.app(hosts)
        tls = config.server
        self._server = uvicorn.Server(
            uvicorn.Config(
                app,
                host=self.host,
                port=port,
                log_level="warning",
                access_log=False,
                lifespan="off",
                proxy_headers=False,
                ssl_certfile=tls.tls_cert if tls.tls else None,
                ssl_keyfile=tls.tls_key if tls.tls else None,
            )
        )
        self._thread = threading.Thread(target=self._run, name="horizon-console", daemon=True)
        self._failed: BaseException | None = None
        self.port = 0

    def _run(self) -> None:
        try:
            asyncio.run(self._server.serve())
        except BaseException as error:  # reported by start()
            self._failed = error

    def start(self) -> ConsoleServer:
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive() or self._failed is not None:
                raise Unavailable(
                    f"cannot serve the console on {self.config.console_address}: {self._failed}"
                )
            self._thread.join(0.02)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        log.info("horizon console on %s", self.url)
        return self

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        host = f"[{host}]" if ":" in host else host
        scheme = "https" if self.config.server.tls else "http"
        return f"{scheme}://{host}:{self.port}/"

    def stop(self) -> None:
        self.pages.live_tables.closing.set()  # open live tables end, so uvicorn can
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self.stream_lags.close()
