"""A broker to subscribe to, and tables whose LWM a test moves step by step (as commits would).

Each table's whole history is written up front (rows with validFrom / validUntil, as ingestion
writes them); :meth:`Env.move` reports a new watermark and waits until the broker serves it.
Used by the tests of the bounds, the client's LiveResult and Flight's DoExchange.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.broker.config import config_from_mapping
from horizon_broker.client import HorizonClient, connect
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.server import ServerClient
from tests.broker.data import CHUNK, VERSION, Row, descriptor, version, visible, write_rows
from tests.processes import RedisProcess

ADMIN, OTHER = "admin-token", "other-token"
TOKENS = [
    {"name": "admin", "token": ADMIN, "tables": ["*"], "inspect": True},
    {"name": "other", "token": OTHER, "tables": ["nothing"], "inspect": False},
]
LIMIT = 3
STEPS = [2000, 3000, 4000, 5000]


def history() -> list[Row]:
    """Ids 1..5 from 500; then at each step a change of every kind."""
    rows = [version(i, f"o{i}", i * 10, 500, None) for i in range(1, 6)]
    rows[0]["validUntil"] = 1500  # id 1 updated at 1500
    rows.append(version(1, "o1", 11, 1500, None))
    rows.append(version(6, "o6", 60, 1500, None))  # inserted at 1500
    rows[1]["validUntil"] = 2500  # id 2 deleted at 2500
    rows.append(version(7, "o7", 70, 2500, None))
    rows[2]["validUntil"] = 3200  # id 3 updated twice within one step
    rows.append(version(3, "o3", 31, 3200, 3400))
    rows.append(version(3, "o3", 32, 3400, None))
    rows[3]["validUntil"] = 4500  # id 4 deleted, id 8 inserted
    rows.append(version(8, "o8", 80, 4500, None))
    rows[4]["validUntil"] = 5800  # id 5 updated after a quiet step
    rows.append(version(5, "o5", 51, 5800, None))
    return rows


def big_history(steps: list[int], size: int = 1_000_000) -> list[Row]:
    """Two ids with values of ``size`` characters; id 1 changes at every step (each message is
    larger than gRPC's flow-control window, so a subscriber that does not read stalls)."""
    big = "x" * size
    rows = [version(i, big, 0, 500, None) for i in (1, 2)]
    for k, at in enumerate(steps, start=1):
        rows[-2]["validUntil"] = at
        rows.insert(-1, version(1, big, k, at, None))
    return rows


@dataclass
class Env:
    redis: RedisProcess
    server: ServerClient
    broker: BrokerServer
    root: Path
    count: int = 0
    rows: dict[str, list[Row]] = field(default_factory=dict)

    def client(self, token: str = ADMIN) -> HorizonClient:
        return connect(self.broker.target, token=token)

    def table(self, rows: list[Row] | None = None) -> str:
        """A new table with ``rows`` (default :func:`history`) and its LWM at 1000."""
        self.count += 1
        name = f"sub{self.count}"
        rows = history() if rows is None else rows
        desc = descriptor(name, storage_root=self.root)
        segment = Segment(
            table=name,
            interval=CHUNK,
            version=VERSION,
            partition=0,
            core_partitions=1,
            location=(write_rows(self.root / name / "p0.parquet", desc, rows),),
            row_count=len(rows),
        )
        self.server.register_table(desc)
        self.server.announce([segment])
        self.rows[name] = rows
        self.move(name, 1000)
        return name

    def move(self, table: str, lwm: int) -> None:
        """Commit up to ``lwm`` and wait until the broker serves it."""
        self.server.report(table, {0: (lwm, lwm)})

        def seen(follower: Any) -> bool:
            try:
                return bool(follower.lwm(table) >= lwm)
            except Exception:
                return False

        assert self.broker.follower.wait_for(seen, 30), f"the broker never saw {table} at {lwm}"


@contextlib.contextmanager
def subscribe_env(
    spark: Any, root: Path, listen: str = "127.0.0.1:0", **limits: Any
) -> Iterator[Env]:
    """A broker (gRPC on ``listen``, Flight on any free port) on a private redis-server, with
    ``limits`` on top of the tests' own."""
    redis = RedisProcess().start()
    server = ServerClient(redis.url, "srv-a")
    server.register()
    server.start_heartbeats(0.5)
    config = config_from_mapping(
        {
            "server": {"listen": listen, "grace_s": 5.0},
            "flight": {"listen": "127.0.0.1:0"},
            "state": {"redis_url": redis.url, "max_staleness_s": 30.0},
            "limits": {
                "max_concurrent": 2,
                "queue_size": 8,
                "max_subscriptions_per_identity": LIMIT,
                **limits,
            },
            "tokens": TOKENS,
        }
    )
    env = Env(redis, server, BrokerServer(config, spark=spark).start(), root)
    try:
        yield env
    finally:
        env.broker.stop(0)
        env.broker.follower.stop()
        server.close()
        redis.close()


def rows_of(table: Any) -> Counter:
    """A table's rows as a multiset (whatever order Spark returned them in)."""
    return Counter(tuple(r.values()) for r in table.to_pylist())


def answer(client: HorizonClient, sql: str, snapshot: int) -> Counter:
    """ExecuteQuery's answer to ``sql`` at ``snapshot``."""
    return rows_of(client.query(f"{sql} VERSION AS OF {snapshot}"))


def oracle(rows: list[Row], snapshot: int) -> Counter:
    return Counter((r["id"], r["owner"], r["balance"]) for r in visible(rows, snapshot))
