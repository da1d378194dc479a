"""Helpers for tests that watch a query's Spark jobs, and extra brokers on the test Spark."""

from __future__ import annotations

import itertools
import time

from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.broker.config import BrokerConfig
from tests.waiting import eventually

_namespaces = itertools.count()


class ExtraBroker:
    """A second broker on the same Spark session (cheap: shares the function policy too)."""

    def __init__(self, config: BrokerConfig, spark, env, *, own_follower: bool = False) -> None:  # type: ignore[no-untyped-def]
        self.server = BrokerServer(
            config,
            spark=spark,
            follower=None if own_follower else env.broker.follower,
            functions=env.broker.engine.functions,
            view_namespace=f"x{next(_namespaces)}_",
        )

    def __enter__(self) -> BrokerServer:
        return self.server.start()

    def __exit__(self, *exc: object) -> None:
        self.server.stop(0)


def job_statuses(spark, group: str) -> list[str]:  # type: ignore[no-untyped-def]
    tracker = spark.sparkContext.statusTracker()
    infos = [tracker.getJobInfo(job) for job in tracker.getJobIdsForGroup(group)]
    return [info.status for info in infos if info is not None]


def wait_for_jobs(spark, group: str, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    """Wait until the query's long job runs (not just a quick broadcast job before it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "RUNNING" in job_statuses(spark, group):
            time.sleep(0.5)
            if "RUNNING" in job_statuses(spark, group):
                return
        time.sleep(0.05)
    raise AssertionError(f"no long Spark job running in group {group}")


def settled_statuses(spark, group: str, timeout: float = 15.0) -> list[str]:  # type: ignore[no-untyped-def]
    """The group's job states once none is running (or as they are when ``timeout`` ends)."""
    deadline = time.monotonic() + timeout
    states = job_statuses(spark, group)
    while "RUNNING" in states and time.monotonic() < deadline:
        time.sleep(0.1)
        states = job_statuses(spark, group)
    return states


def assert_group_finished(spark, group: str, timeout: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    """The group's jobs ran and none is running any more (succeeded at a limit, or stopped)."""
    assert job_statuses(spark, group), f"the query never started a Spark job in group {group}"
    states = settled_statuses(spark, group, timeout)
    assert "RUNNING" not in states, f"jobs of {group} still run: {states}"


def assert_group_stopped(spark, group: str, timeout: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    """The group's jobs ran and were cancelled (a job that ran to its end was not stopped)."""
    assert job_statuses(spark, group), f"the query never started a Spark job in group {group}"
    states = settled_statuses(spark, group, timeout)
    assert "RUNNING" not in states, f"Spark jobs of {group} still running after the cancel"
    assert "FAILED" in states, f"jobs of {group} ended without being cancelled: {states}"


def engine_group(server: BrokerServer, query_id: str) -> str:
    """The Spark job group of the query labelled ``query_id`` on ``server`` (the broker names
    engine groups by handles of its own, never by the caller's id)."""
    from horizon_broker.broker.spark.executor import job_group

    def labelled() -> str | None:
        registry = server.engine.queries
        for record in (*registry.running(), *registry.recent()):
            if record.query_id == query_id:
                return job_group(record.handle)
        return None

    return eventually(labelled, f"a query labelled {query_id} reached the broker")
