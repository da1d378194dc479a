"""A broker process on a real Spark cluster or Spark Connect server, for the cluster tests.

The test process keeps its one local Spark; the broker under test runs as ``horizon serve`` in
its own process (one process can hold one Spark context), with a private Redis and test tables
written with pyarrow. Each test module starts its cluster once and stops it by process id.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.client import HorizonClient, connect
from tests.broker.data import UpsertTable, big_table
from tests.processes import RedisProcess, free_port
from watermark.server import ServerClient

LWM = 1200

# Minutes of work even on two cores (2 * 10^11 combinations), interruptible (a cancel frees them).
SLOW_SQL = (
    "SELECT count(*) AS n FROM big a CROSS JOIN accounts b CROSS JOIN accounts c "
    "CROSS JOIN accounts d WHERE a.balance + b.balance + c.balance + d.balance > 0"
)


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


class BrokerProcess:
    """``horizon serve`` with a TOML configuration, stopped with SIGTERM (then SIGKILL)."""

    def __init__(self, directory: Path, spark_section: str, redis_url: str) -> None:
        self.port = free_port()
        self.config = directory / "broker.toml"
        self.config.write_text(
            f'[server]\nlisten = "127.0.0.1:{self.port}"\ngrace_s = 1.0\n\n'
            f'[state]\nredis_url = "{redis_url}"\nunreadable_recheck_s = 0.5\n\n'
            f"{spark_section}"
        )
        self.log = directory / "broker.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 180.0) -> BrokerProcess:
        horizon = str(Path(sys.executable).with_name("horizon"))
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [horizon, "serve", "--config", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the broker exited:\n{self.log.read_text()[-3000:]}")
            try:
                with connect(self.target, timeout=2) as client:
                    if client.health() == "SERVING":
                        return self
            except Exception:
                pass
            time.sleep(1)
        self.stop()
        raise RuntimeError(f"the broker did not start:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def cluster_env(tmp: Path, spark_section: str) -> Iterator[ClusterEnv]:
    """A private Redis with the test tables, and a broker process with ``spark_section``."""
    redis = RedisProcess().start()
    server, tables = publish(redis, tmp / "segments")
    broker = BrokerProcess(tmp, spark_section, redis.url)
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
