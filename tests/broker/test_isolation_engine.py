"""The broker survives its engine: a Spark JVM killed under a running broker (``kill -9``) turns
health NOT_SERVING, fails the query that was running with UNAVAILABLE saying why, and the broker
starts a new session by itself: health SERVING again and queries answered, no restart of the
broker. Runs a broker process of its own (its own JVM), never the test run's shared Spark."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from horizon_broker._core.errors import Unavailable
from horizon_broker.broker.spark.local_cluster import BrokerProcess
from horizon_broker.client import connect
from horizon_broker.watermark.server import ServerClient
from tests.broker.data import UpsertTable, big_table
from tests.processes import RedisProcess

LWM = 1200


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def jvm_of(pid: int) -> int | None:
    """The Java process under ``pid`` (the broker's embedded Spark driver)."""
    pending = [pid]
    while pending:
        current = pending.pop()
        for child in _children(current):
            try:
                command = (Path("/proc") / str(child) / "cmdline").read_bytes()
            except OSError:
                continue
            if b"java" in command.split(b"\0")[0]:
                return child
            pending.append(child)
    return None


def _health(target: str) -> str:
    try:
        with connect(target, timeout=3) as client:
            return client.health()
    except Exception as error:  # the broker process is what we watch, not one call
        return type(error).__name__


def _spark_jobs(client: Any, query_id: str) -> int:
    """How many Spark jobs the broker reports running for ``query_id`` (0: none yet)."""
    record = next((q for q in client.queries() if q.query_id == query_id), None)
    return record.spark_jobs_running if record is not None else 0


def _wait_for(condition, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


@dataclass
class OwnSpark:
    """A broker process with a Spark of its own, the server that publishes its tables, and
    where their files go."""

    broker: BrokerProcess
    server: ServerClient
    root: Path


@pytest.fixture(scope="module")
def own_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnSpark]:
    tmp = tmp_path_factory.mktemp("engine")
    redis = RedisProcess().start()
    server = ServerClient(redis.url, "srv-a")
    server.register()
    accounts = UpsertTable("accounts", tmp / "segments")
    server.register_table(accounts.desc)
    server.announce(accounts.segments)
    server.report("accounts", {0: (LWM, LWM), 1: (LWM, LWM)})
    big_desc, big_segments = big_table("big", tmp / "segments", rows=200_000, files=2)
    server.register_table(big_desc)
    server.announce(big_segments)
    server.report("big", {0: (LWM, LWM)})
    server.start_heartbeats(0.5)
    section = '[spark]\nmaster = "local[1]"\nprobe_interval_s = 0.5\nprobe_timeout_s = 5.0\n'
    broker = BrokerProcess(tmp, redis.url, section)
    try:
        yield OwnSpark(broker.start(), server, tmp / "segments")
    finally:
        broker.stop()
        server.close()
        redis.close()


@pytest.fixture(scope="module")
def broker_process(own_spark: OwnSpark) -> BrokerProcess:
    return own_spark.broker


def _warmed_after_restart(log: Path) -> set[str]:
    """The tables the broker's log says it warmed up after its last Spark restart."""
    text = log.read_text(errors="replace")
    _, restarted, after = text.rpartition("the Spark engine was restarted")
    if not restarted:
        return set()
    return {line.split("warm-up of table ", 1)[1].split()[0] for line in after.splitlines()
            if "warm-up of table " in line and " took " in line}  # fmt: skip


def test_a_killed_spark_jvm_is_replaced_and_the_broker_answers_again(broker_process):
    target = broker_process.target
    assert broker_process.process is not None
    with connect(target) as client:
        assert client.query("SELECT count(*) AS n FROM accounts").to_pylist() == [{"n": 100}]
        running = client.start_query(
            "SELECT count(DISTINCT sha2(repeat(owner, 100000), 256)) FROM big",
            cache=False,
            query_id="slow",
        )
        assert _wait_for(lambda: _spark_jobs(client, "slow") > 0, 60), "it never ran on Spark"
        jvm = jvm_of(broker_process.process.pid)
        assert jvm is not None, "no Spark JVM under the broker process"
        os.kill(jvm, signal.SIGKILL)
        with pytest.raises(Unavailable, match="stopped answering"):
            running.result()
    assert _wait_for(lambda: _health(target) == "NOT_SERVING", 30), "health never said so"
    assert _wait_for(lambda: _health(target) == "SERVING", 180), "the engine never came back"
    with connect(target) as client:
        assert client.query("SELECT count(*) AS n FROM accounts").to_pylist() == [{"n": 100}]
        assert client.query("SELECT count(*) AS n FROM big").to_pylist() == [{"n": 200_000}]
    replacement = jvm_of(broker_process.process.pid)
    assert replacement is not None and replacement != jvm
    assert broker_process.process.poll() is None  # the broker itself never stopped
    # The new session is cold: the broker read a row of every table on it, as at its start.
    assert _wait_for(lambda: _warmed_after_restart(broker_process.log) == {"accounts", "big"}, 120)


def test_an_idle_broker_builds_the_views_of_a_table_whose_timeline_moved(own_spark: OwnSpark):
    table, server = UpsertTable("moved", own_spark.root), own_spark.server
    server.register_table(table.desc)
    server.announce([table.p0, table.p1])
    server.report("moved", {0: (LWM, LWM), 1: (LWM, LWM)})

    def kept() -> int:
        log = own_spark.broker.log.read_text(errors="replace")
        return log.count("views of table moved kept at generation")

    assert _wait_for(lambda: kept() >= 1, 60), "the new table's views were never built"
    time.sleep(6)  # a pass between the announcement and the report builds twice: let it settle
    built = kept()
    server.announce([table.o0])  # the timeline moves while no query runs
    assert _wait_for(lambda: kept() > built, 60), "the moved table's views were not built again"
