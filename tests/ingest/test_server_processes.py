"""Ingestion as users run it, through real processes: a broker started with ``horizon serve
--embedded-redis``, ingestion servers started with ``horizon ingest`` (stopped with SIGTERM, or
killed), in-process ``horizon.IngestServer``\\ s on the session's Spark, and queries through the
gRPC client with its default monotonic session (rule 7 of ``docs/design/contract/watermarks.md``:
idle and parked partitions)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from horizon_broker import IngestServer, tokens
from horizon_broker import cli as horizon_cli
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.client import HorizonClient, connect
from horizon_broker.ingest.cli import main_ingest
from horizon_broker.watermark.embedded_redis import free_port
from tests.ingest import tpch_tables

HORIZON = str(Path(sys.executable).with_name("horizon"))
PARKED = pb.PARTITION_STATE_PARKED
IDLE = pb.PARTITION_STATE_IDLE
WAIT_S = 240.0


class Lines:
    """A child process's output, line by line, read from a thread (never blocks the test)."""

    def __init__(self, stream: Any) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: Any) -> None:
        for line in iter(stream.readline, ""):
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, predicate: Any, what: str, timeout: float = WAIT_S) -> str:
        """The first line (printed so far, or from now on) for which ``predicate`` holds."""
        for line in self.seen:
            if predicate(line):
                return line
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                continue
            self.seen.append(line)
            if predicate(line):
                return line
        raise AssertionError(f"never saw {what}; output so far:\n" + "\n".join(self.seen[-40:]))


@dataclass
class Broker:
    process: subprocess.Popen[str]
    target: str
    redis_url: str
    output: Lines

    def client(self, **options: Any) -> HorizonClient:
        return connect(self.target, timeout=60.0, **options)


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    """``horizon serve --embedded-redis``: a broker with its own Redis, printing its URL."""
    port = free_port()
    # Any free port for Flight SQL, metrics and the console: their fixed defaults (50052, 9464,
    # 50053) may be held by another process on this machine, which once failed the fixture.
    free = {
        f"HORIZON_{section}_LISTEN": "127.0.0.1:0" for section in ("FLIGHT", "METRICS", "CONSOLE")
    }
    process = subprocess.Popen(
        [HORIZON, "serve", "--embedded-redis", "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, **free},
    )
    output = Lines(process.stdout)
    try:
        url_line = output.wait_for(lambda line: "redis://" in line, "the state store's URL")
        redis_url = next(word for word in url_line.split() if word.startswith("redis://"))
        output.wait_for(lambda line: "listening on" in line, "the broker listening")
        yield Broker(process, f"127.0.0.1:{port}", redis_url, output)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def ingest_process(*args: str) -> tuple[subprocess.Popen[str], Lines]:
    process = subprocess.Popen(
        [HORIZON, "ingest", "--spark-master", "local[1]", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    return process, Lines(process.stdout)


def batch_line(table: str, number: int, prefix: str) -> Any:
    """The progress line of batch ``number`` of ``<prefix><table>``."""
    return lambda line: (
        line.startswith(f"{prefix}{table}: batch ")
        and "token hz1." in line
        and (f" {len(tpch_tables.batch(table, number))} rows" in line)
    )


def token_of(line: str) -> str:
    return line.rsplit("token ", 1)[1].strip()


def states(client: HorizonClient, table: str) -> set[int]:
    return {row.state for row in client.watermarks(table).partitions}


def wait_until(check: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.2)


def amounts(client: HorizonClient, table: str, **read: Any) -> dict[int, int]:
    rows = client.query(f"SELECT id, amount FROM {table}", **read).to_pylist()
    return {row["id"]: row["amount"] for row in rows}


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_one_server_process_serves_eight_tables_and_a_sigterm_parks_them_all(
    broker: Broker, tmp_path: Path
) -> None:
    files = tpch_tables.write_tables(tmp_path, prefix="p1_")
    landing = tmp_path / "landing"
    for name in tpch_tables.TABLES:
        tpch_tables.write_batch(landing / f"p1_{name}", name, 1)
    config = tmp_path / "server.toml"
    config.write_text(
        f'server_id = "tpch"\nredis = "{broker.redis_url}"\nwatch = 0.5\n'
        f'source_root = "{landing}"\n'
        + "".join(f'[[tables]]\ndefinition = "{files[n].name}"\n' for n in tpch_tables.TABLES)
    )
    metrics = f"127.0.0.1:{free_port()}"
    process, output = ingest_process("--config", str(config), "--metrics-listen", metrics)
    try:
        first = {n: token_of(output.wait_for(batch_line(n, 1, "p1_"), f"{n} 1")) for n in files}
        for name in ("orders", "lineitem"):
            tpch_tables.write_batch(landing / f"p1_{name}", name, 2)
        second = {
            n: token_of(output.wait_for(batch_line(n, 2, "p1_"), f"{n} batch 2"))
            for n in ("orders", "lineitem")
        }
        # The process's own metrics: every batch counted and timed, stage by stage.
        samples = scrape(f"http://{metrics}/metrics")
        orders = (("outcome", "committed"), ("table", "p1_orders"))
        assert samples[("horizon_ingest_batches_total", orders)] == 2
        assert samples[("horizon_ingest_batch_seconds_count", (("table", "p1_orders"),))] == 2
        stage = (("stage", "write segments"), ("table", "p1_lineitem"))
        assert samples[("horizon_ingest_stage_seconds_count", stage)] == 2
        assert samples[("horizon_ingest_updater_backlog", (("table", "p1_region"),))] == 0
        waited = (("table", "p1_orders"),)
        assert samples[("horizon_ingest_arrival_to_announced_seconds_count", waited)] == 2
        assert samples[("horizon_ingest_arrival_to_announced_seconds_sum", waited)] > 0
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=WAIT_S) == 0
        output.wait_for(lambda line: "parked 16 partitions" in line, "the park")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    everything = tokens.merge(list(first.values()), list(second.values()))
    with broker.client() as client:
        for name in tpch_tables.TABLES:
            batches = 2 if name in second else 1
            assert amounts(client, f"p1_{name}", min_snapshot=[first[name], everything]) == (
                tpch_tables.expected(name, batches)
            )
            marks = client.watermarks(f"p1_{name}")
            assert {row.state for row in marks.partitions} == {PARKED}
            assert [s.status for s in marks.servers] == ["parked"] and not marks.stale_servers


def test_a_one_shot_run_parks_and_its_tables_lwm_follows_the_state_stores_clock(
    broker: Broker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tpch_tables.write_tables(tmp_path, ("region",), prefix="p2_")["region"]
    tpch_tables.write_batch(tmp_path / "landing", "region", 1)
    argv = ["--table", str(table), "--source", str(tmp_path / "landing"),
            "--server-id", "one-shot", "--redis", broker.redis_url]  # fmt: skip
    assert main_ingest(argv) == 0
    token = token_of(capsys.readouterr().out)
    with broker.client() as client:
        assert amounts(client, "p2_region", min_snapshot=token) == tpch_tables.expected("region", 1)
        wait_until(lambda: states(client, "p2_region") == {PARKED}, "region parked")
        before = client.watermarks("p2_region").lwm
        wait_until(lambda: client.watermarks("p2_region").lwm > before, "the parked LWM moving")
        now = client.watermarks("p2_region").lwm
    # The query command takes several tokens: it reads at or after the highest of each table.
    later = tokens.encode({"p2_region": now})
    argv = ["query", "SELECT count(*) AS n FROM p2_region", "--target", broker.target, "--json",
            "--min-snapshot", token, "--min-snapshot", later]  # fmt: skip
    assert horizon_cli.main(argv) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["rows"] == [{"n": 5}] and int(answer["metadata"]["snapshot"]) >= now
    # horizon watermarks shows the parked partitions and the parked server.
    assert horizon_cli.main(["watermarks", "p2_region", "--target", broker.target]) == 0
    shown = capsys.readouterr().out
    assert "parked" in shown and "one-shot parked" in shown


def test_a_join_of_a_busy_table_with_a_parked_one_is_answered_at_once_above_its_last_commit(
    broker: Broker, spark: Any, tmp_path: Path
) -> None:
    files = tpch_tables.write_tables(tmp_path, ("nation", "supplier"), prefix="p3_")
    tpch_tables.write_batch(tmp_path / "nation", "nation", 1)
    with IngestServer(broker.redis_url, "nations", spark) as parked_later:
        parked_later.add_table(files["nation"], source=str(tmp_path / "nation"))
        parked_later.run_once()
    busy = IngestServer(broker.redis_url, "suppliers", spark, heartbeat_s=0.2)
    try:
        busy.add_table(files["supplier"], source=str(tmp_path / "supplier"))
        with broker.client() as client:
            nations = amounts(client, "p3_nation")  # the session now holds a nation snapshot
            for number in (1, 2):
                tpch_tables.write_batch(tmp_path / "supplier", "supplier", number)
                batch = busy.run_directory("p3_supplier")
                alone = client.execute(
                    "SELECT count(*) AS n FROM p3_supplier", min_snapshot=batch.token
                )
                assert alone.snapshot >= batch.high
                joined = client.execute(
                    "SELECT s.id, n.amount FROM p3_supplier s JOIN p3_nation n ON s.parent = n.id"
                )
                assert joined.metadata.waited_ms == 0.0
                assert joined.snapshot >= alone.snapshot >= batch.high
                expected = tpch_tables.expected("supplier", number)
                assert sorted(r["id"] for r in joined.table.to_pylist()) == sorted(
                    key for key in expected if key % 7 in nations
                )
            assert states(client, "p3_nation") == {PARKED}
    finally:
        busy.close()


def test_a_parked_partition_resumed_by_another_server_commits_above_every_snapshot_served(
    broker: Broker, spark: Any, tmp_path: Path
) -> None:
    table = tpch_tables.write_tables(tmp_path, ("part",), prefix="p4_")["part"]
    tpch_tables.write_batch(tmp_path / "landing", "part", 1)
    with IngestServer(broker.redis_url, "part-1", spark) as first:
        first.add_table(table, source=str(tmp_path / "landing"))
        first.run_once()
    served: dict[int, dict[int, int]] = {}
    with broker.client() as client:
        wait_until(lambda: states(client, "p4_part") == {PARKED}, "part parked")
        for _ in range(3):
            result = client.execute("SELECT id, amount FROM p4_part")
            served[result.snapshot] = {r["id"]: r["amount"] for r in result.table.to_pylist()}
            lwm = client.watermarks("p4_part").lwm
            wait_until(lambda lwm=lwm: client.watermarks("p4_part").lwm > lwm, "the LWM moving")
        highest = max(served)
        tpch_tables.write_batch(tmp_path / "landing", "part", 2)
        with IngestServer(broker.redis_url, "part-2", spark) as second:
            second.add_table(table, source=str(tmp_path / "landing"))
            resumed = second.run_directory("p4_part")
        assert resumed.rows > 0 and resumed.base > highest
        assert amounts(client, "p4_part", min_snapshot=resumed.token) == (
            tpch_tables.expected("part", 2)
        )
        for snapshot, answer in served.items():
            again = client.query(f"SELECT id, amount FROM p4_part VERSION AS OF {snapshot}")
            assert {r["id"]: r["amount"] for r in again.to_pylist()} == answer
        owners = {row.server for row in client.watermarks("p4_part").partitions}
        assert owners == {"part-2"}


def test_an_idle_table_advances_while_another_table_of_its_server_ingests(
    broker: Broker, spark: Any, tmp_path: Path
) -> None:
    files = tpch_tables.write_tables(tmp_path, ("customer", "orders"), prefix="p5_")
    landing = tmp_path / "landing"
    server = IngestServer(broker.redis_url, "shop", spark, heartbeat_s=0.2)
    try:
        for name, path in files.items():
            server.add_table(path, source=str(landing / name))
        tpch_tables.write_batch(landing / "customer", "customer", 1)
        quiet = server.run_directory("p5_customer")
        with broker.client(monotonic=False) as client:
            wait_until(
                lambda: client.watermarks("p5_customer").lwm >= quiet.high, "customer's batch"
            )
            seen = [client.watermarks("p5_customer").lwm]
            for number in (1, 2):
                tpch_tables.write_batch(landing / "orders", "orders", number)
                busy = server.run_directory("p5_orders")
                wait_until(
                    lambda high=busy.high: client.watermarks("p5_customer").lwm > high,
                    "the idle table passing the busy one's commit",
                )
                seen.append(client.watermarks("p5_customer").lwm)
            assert seen == sorted(seen) and len(set(seen)) == 3
            marks = client.watermarks("p5_customer")
            assert {row.state for row in marks.partitions} == {IDLE}
            assert all(row.live for row in marks.partitions)
            assert [s.status for s in marks.servers] == ["live"]
    finally:
        server.close()


def test_a_server_killed_without_parking_freezes_its_partitions(
    broker: Broker, spark: Any, tmp_path: Path
) -> None:
    table = tpch_tables.write_tables(tmp_path, ("partsupp",), prefix="p6_")["partsupp"]
    tpch_tables.write_batch(tmp_path / "landing", "partsupp", 1)
    process, output = ingest_process(
        "--table", str(table), "--source", str(tmp_path / "landing"), "--server-id", "doomed",
        "--redis", broker.redis_url, "--watch", "0.5",
    )  # fmt: skip
    try:
        output.wait_for(batch_line("partsupp", 1, "p6_"), "partsupp batch 1")
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    other = tpch_tables.write_tables(tmp_path, ("lineitem",), prefix="p6_")
    with broker.client(monotonic=False) as client:
        wait_until(
            lambda: list(client.watermarks("p6_partsupp").stale_servers) == ["doomed"],
            "the killed server going stale",
        )
        frozen = client.watermarks("p6_partsupp").lwm
        with IngestServer(broker.redis_url, "alive", spark) as alive:
            alive.add_table(other["lineitem"], partitions=[0])  # events move the store's clock
            store = client.watermarks("p6_partsupp").store_clock_ms
            wait_until(
                lambda: client.watermarks("p6_partsupp").store_clock_ms > store, "the clock moving"
            )
        marks = client.watermarks("p6_partsupp")
        assert marks.lwm == frozen
        assert {row.state for row in marks.partitions} == {IDLE}
        assert [s.status for s in marks.servers] == ["stale"]
