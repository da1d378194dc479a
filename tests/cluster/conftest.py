"""A broker process on a real Spark cluster or Spark Connect server, for the cluster tests.

The test process keeps its one local Spark; the broker under test runs as ``horizon serve`` in
its own process (one process can hold one Spark context), with a private Redis and test tables
written with pyarrow. Each test module starts its cluster once and stops it by process id.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from horizon_broker.broker.spark.local_cluster import BrokerProcess
from horizon_broker.client import HorizonClient, connect
from horizon_broker.watermark.server import ServerClient
from tests.broker.data import UpsertTable, big_table
from tests.processes import RedisProcess

LWM = 1200

SLOW_SQL = "SELECT count(DISTINCT sha2(repeat(owner, 400000), 256)) AS n FROM big"
"""Within every work budget, yet about 80 GB of hashing (400 kB for each of 200,000 rows: tens
of seconds on two cores, where the cancel comes after about one and the deadline at four), in
tasks that a cancel interrupts between Parquet batches."""


@dataclass
class ClusterEnv:
    target: str
    redis: RedisProcess
    server_client: ServerClient
    tables: dict[str, UpsertTable]
    root: Path

    def client(self, **options: object) -> HorizonClient:
        return connect(self.target, **options)  # type: ignore[arg-type]


def publish(redis: RedisProcess, root: Path) -> tuple[ServerClient, dict[str, UpsertTable]]:
    """The test tables: two upsert tables with an overwrite (one to lose a file) and a big one."""
    server = ServerClient(redis.url, "srv-a")
    server.register()
    tables = {name: UpsertTable(name, root) for name in ("accounts", "fallback_t")}
    for table in tables.values():
        server.register_table(table.desc)
        server.announce(table.segments)
        server.report(table.name, {0: (LWM, LWM), 1: (1500, 1500)})
    big_desc, big_segments = big_table("big", root, rows=200_000, files=2)
    server.register_table(big_desc)
    server.announce(big_segments)
    server.report("big", {0: (LWM, LWM)})
    server.start_heartbeats(0.5)
    return server, tables


def cluster_env(tmp: Path, spark_section: str) -> Iterator[ClusterEnv]:
    """A private Redis with the test tables, and a broker process with ``spark_section``."""
    redis = RedisProcess().start()
    server, tables = publish(redis, tmp / "segments")
    broker = BrokerProcess(tmp, redis.url, spark_section)
    try:
        broker.start()
        yield ClusterEnv(broker.target, redis, server, tables, tmp / "segments")
    finally:
        broker.stop()
        server.close()
        redis.close()


@pytest.fixture
def client(env: ClusterEnv) -> Iterator[HorizonClient]:
    with env.client() as horizon:
        yield horizon
