"""Session-wide real dependencies: one redis-server and one local Spark session per test run."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis
from hypothesis import settings

from tests.logging_state import logging_kept
from tests.processes import RedisProcess

# A shared 2-core machine can stall any example past Hypothesis's 200 ms deadline (a property
# test of the change feed's picks did, under load): examples are checked, never timed.
settings.register_profile("horizon", deadline=None)
settings.load_profile("horizon")

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(autouse=True)
def _logging_undone_after_each_test() -> Iterator[None]:
    """No test leaves a log handler behind (see :mod:`tests.logging_state`)."""
    with logging_kept():
        yield


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


PROCESS_TESTS = (
    "tests/chaos/",
    "tests/cluster/",
    "tests/failover/",
    "tests/demo/test_demo_run.py",
    "tests/compaction/test_cli.py",
    "tests/ingest/test_server_processes.py",
    "tests/ingest/test_redis_stream_processes.py",
    "tests/broker/test_isolation_engine.py",
    "tests/packaging/test_wheel.py",
)
"""Tests that start programs of their own (brokers, ingestion servers, clusters, a fresh virtual
environment): slow whether or not they use the session's Spark."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by what it needs, from its fixtures and its file, so ``make test-fast``
    can leave out Spark and processes: ``spark`` (the session's Spark, directly or through a
    broker), ``redis`` (the session's redis-server), ``processes``."""
    root = config.rootpath
    for item in items:
        needs = set(getattr(item, "fixturenames", ()))
        if "spark" in needs:
            item.add_marker(pytest.mark.spark)
        if "redis_server" in needs:
            item.add_marker(pytest.mark.redis)
        where = item.path.relative_to(root).as_posix()
        if where.startswith(PROCESS_TESTS):
            item.add_marker(pytest.mark.processes)
