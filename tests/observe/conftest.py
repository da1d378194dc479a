"""A broker to watch: a private redis-server, a publishing server, the session's Spark and a real
gRPC server on loopback with its metrics endpoint on a free port."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.broker.config import config_from_mapping
from horizon_broker.client import HorizonClient, connect
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.server import ServerClient
from tests.broker.data import UpsertTable
from tests.observe.browser import start_chromium
from tests.processes import RedisProcess

ADMIN = "admin-secret-token-1"
READER = "reader-secret-token-2"
BLIND = "blind-secret-token-3"
TOKENS = [
    {"name": "admin", "token": ADMIN, "tables": ["*"], "inspect": True},
    {"name": "reader", "token": READER, "tables": ["accounts"], "inspect": True},
    {"name": "blind", "token": BLIND, "tables": ["accounts"], "inspect": False},
]
LWM = 1200


@dataclass
class WatchedBroker:
    redis: RedisProcess
    server: ServerClient
    broker: BrokerServer
    tables: dict[str, UpsertTable]
    root: Path

    def client(self, token: str | None = ADMIN) -> HorizonClient:
        return connect(self.broker.target, token=token)

    @contextmanager
    def unreadable(self, segment: Segment, reason: str) -> Iterator[None]:
        """The segment's file is really gone while the block runs, and the broker has marked it.

        A mark on a file that still reads would be cleared by the broker's periodic recheck, at a
        moment the test does not choose."""
        path = Path(segment.location[0])
        hidden = path.with_name(path.name + ".away")
        path.rename(hidden)
        try:
            assert self.broker.follower.mark_unreadable(segment.id, reason)
            yield
        finally:
            hidden.rename(path)
            self.broker.follower.clear_unreadable(segment.id)


def watched_config(redis_url: str, **sections: dict) -> object:
    data: dict = {
        "server": {"listen": "127.0.0.1:0", "grace_s": 1.0},
        "state": {"redis_url": redis_url, "heartbeat_timeout_s": 2.0},
        "limits": {"max_concurrent": 2, "queue_size": 4},
        "metrics": {"listen": "127.0.0.1:0"},
        "logging": {"state_check_s": 0.2},
        "console": {"listen": "127.0.0.1:0", "refresh_s": 3600.0},
        "tokens": TOKENS,
    }
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    return config_from_mapping(data)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's headless Chromium through its ChromeDriver."""
    driver = start_chromium()
    yield driver
    driver.quit()


@pytest.fixture(scope="package")
def watched(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WatchedBroker]:  # type: ignore[no-untyped-def]
    redis = RedisProcess().start()
    root = tmp_path_factory.mktemp("observed")
    tables = {name: UpsertTable(name, root) for name in ("accounts", "secret")}
    server = ServerClient(redis.url, "srv-a")
    server.register()
    for table in tables.values():
        server.register_table(table.desc)
        server.announce(table.segments)
        server.report(table.name, {0: (LWM, LWM), 1: (1500, 1500)})
    server.start_heartbeats(0.3)
    broker = BrokerServer(watched_config(redis.url), spark=spark).start()  # type: ignore[arg-type]
    assert broker.follower.wait_for(lambda f: f.view("secret").lwm == LWM, 10)
    yield WatchedBroker(redis, server, broker, tables, root)
    broker.stop(0)
    broker.follower.stop()
    server.close()
    redis.close()
