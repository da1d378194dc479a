"""One broker for the whole tests/broker package: a private redis-server, a server-side client that
publishes the test tables, the session's Spark, and a real gRPC server on a free loopback port."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.broker.config import config_from_mapping
from horizon_broker.client import HorizonClient, connect
from horizon_broker.watermark.server import ServerClient
from tests.broker.data import UpsertTable, big_table, descriptor
from tests.processes import RedisProcess

ADMIN = "admin-token"
READER = "reader-token"
NO_INSPECT = "no-inspect-token"
LWM = 1200
TOKENS = [
    {"name": "admin", "token": ADMIN, "tables": ["*"], "inspect": True},
    {"name": "reader", "token": READER, "tables": ["accounts"], "inspect": True},
    {"name": "blind", "token": NO_INSPECT, "tables": ["accounts"], "inspect": False},
]


@dataclass
class BrokerEnv:
    redis: RedisProcess
    server_client: ServerClient
    broker: BrokerServer
    tables: dict[str, UpsertTable]
    root: Path

    @property
    def target(self) -> str:
        return self.broker.target

    def client(self, token: str | None = ADMIN, **options: object) -> HorizonClient:
        return connect(self.target, token=token, **options)  # type: ignore[arg-type]


def broker_config(redis_url: str, **sections: dict) -> object:
    data: dict = {
        "server": {"listen": "127.0.0.1:0", "grace_s": 1.0},
        "state": {"redis_url": redis_url, "max_staleness_s": 30.0, "unreadable_recheck_s": 0.5},
        "limits": {"max_concurrent": 3, "queue_size": 8},
        "tokens": TOKENS,
    }
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values} if isinstance(values, dict) else values
    return config_from_mapping(data)


def publish_table(env: BrokerEnv, desc, segments, *others: BrokerServer) -> None:  # type: ignore[no-untyped-def]
    """Register and announce a table, then wait until every broker's follower sees all of it."""
    server = env.server_client
    server.register_table(desc)
    server.announce(segments)
    server.report(desc.name, {0: (LWM, LWM), 1: (1500, 1500)})

    def ready(follower) -> bool:  # type: ignore[no-untyped-def]
        if desc.name not in follower.tables():
            return False
        view = follower.view(desc.name)
        return view.lwm == LWM and len(view.visible_segments) > 0

    for broker in (env.broker, *others):
        assert broker.follower.wait_for(ready, 10), f"the broker never saw {desc.name}"


@pytest.fixture(scope="package")
def broker_env(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerEnv]:  # type: ignore[no-untyped-def]
    redis = RedisProcess().start()
    root = tmp_path_factory.mktemp("segments")
    tables = {name: UpsertTable(name, root) for name in ("accounts", "secret", "fallback_t")}
    server_client = ServerClient(redis.url, "srv-a")
    server_client.register()
    for table in tables.values():
        server_client.register_table(table.desc)
        server_client.announce(table.segments)
        server_client.report(table.name, {0: (LWM, LWM), 1: (1500, 1500)})
    big_desc, big_segments = big_table("big", root, rows=2_000_000, files=4)
    server_client.register_table(big_desc)
    server_client.announce(big_segments)
    server_client.report("big", {0: (LWM, LWM)})
    server_client.register_table(descriptor("empty_t"))
    server_client.report("empty_t", {0: (LWM, LWM)})
    server_client.start_heartbeats(0.5)
    broker = BrokerServer(broker_config(redis.url), spark=spark).start()  # type: ignore[arg-type]
    env = BrokerEnv(redis, server_client, broker, tables, root)
    yield env
    broker.stop(0)
    broker.follower.stop()
    server_client.close()
    redis.close()


@pytest.fixture
def client(broker_env: BrokerEnv) -> Iterator[HorizonClient]:
    with broker_env.client() as horizon:
        yield horizon
