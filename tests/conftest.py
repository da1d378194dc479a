"""Session-wide real dependencies: one redis-server and one local Spark session per test run."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis

from tests.processes import RedisProcess

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisProcess]:
    """A real redis-server on a free loopback port, shared by the whole run."""
    server = RedisProcess().start()
    yield server
    server.close()


@pytest.fixture
def redis_client(redis_server: RedisProcess) -> Iterator[redis.Redis]:
    """A client on the shared server; the database is flushed before each test."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    yield client
    client.close()


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """The one local Spark session of the run (2 cores, 2 shuffle partitions)."""
    from horizon_broker._core.spark_session import create_spark_session

    session = create_spark_session(
        master="local[2]", app_name="horizon-tests", conf={"spark.sql.shuffle.partitions": "2"}
    )
    yield session
    session.stop()
