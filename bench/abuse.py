"""``python -m bench.abuse``: a hostile-input run against a broker process.

A broker (``horizon serve``, embedded local Spark, its own JVM) with a private Redis and two
tables gets every kind of hostile or careless query issue 27 names, each followed at once by a
trivial query from another client. Per kind it prints the status code, the time to refuse, and
whether the broker stayed up (the next query answered). It samples the peak resident memory of
the broker process and its JVM throughout, and measures, on local Spark, a standalone cluster and
Spark Connect, how long the next query waits after a cancel, a deadline and a killed JVM. The
compaction kinds (a reply lost during a compaction's publish) are in :mod:`bench.abuse_compaction`.

``--quick`` runs the local broker only, with a smaller table.
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.abuse_identity import (
    OTHER_TOKEN,
    Exposure,
    _code,
    _error_of,
    engine_restarts,
    identity_run,
    limit_flight,
    listeners,
    tokens_section,
)
from bench.abuse_memory import MemoryWatch, jvm_of
from bench.report import print_table, write_results

LWM = 1200
TOKEN = "abuse-token"
SLOW_SQL = "SELECT count(DISTINCT sha2(repeat(owner, 100000), 256)) AS n FROM big"
TRIVIAL = "SELECT count(*) AS n FROM accounts"


@dataclass
class Outcome:
    kind: str
    code: str
    seconds: float
    next_answered: bool
    next_seconds: float
    expected: tuple[str, ...]
    detail: str = ""  # the message, when the code was not the expected one

    @property
    def bounded(self) -> bool:
        return self.code in self.expected


def _write(path: Path, ids: np.ndarray) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    count = len(ids)
    pq.write_table(
        pa.table(
            {
                "id": pa.array(ids),
                "owner": pa.array(["o"] * count, pa.string()),
                "balance": pa.array(ids % 1000),
                "validFrom": pa.array([500] * count, pa.int64()),
                "validUntil": pa.nulls(count, pa.int64()),
            }
        ),
        path,
    )
    return str(path)


def publish(redis_url: str, root: Path, big_rows: int) -> Any:
    """Two tables (``accounts`` 1,000 keys, ``big``), announced by a heartbeating server."""
    from horizon_broker.timeline.interval import Interval
    from horizon_broker.timeline.segment import Segment
    from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor
    from horizon_broker.watermark.server import ServerClient

    server = ServerClient(redis_url, "abuse-server")
    server.register()
    columns = (
        ColumnSpec("id", "bigint"),
        ColumnSpec("owner", "string"),
        ColumnSpec("balance", "bigint"),
    )
    for name, rows, files in (("accounts", 1_000, 1), ("big", big_rows, 2)):
        table_root = root / name
        server.register_table(
            TableDescriptor(name, columns, primary_key=("id",), storage_root=str(table_root))
        )
        per_file = rows // files
        segments = [
            Segment(
                table=name,
                interval=Interval(0, 86_400_000),
                version="2026-01-01T00:00:00.000Z",
                partition=part,
                core_partitions=files,
                location=(_write(table_root / f"p{part}.parquet",
                                 np.arange(part * per_file, (part + 1) * per_file)),),
                row_count=per_file,
            )
            for part in range(files)
        ]  # fmt: skip
        server.announce(segments)
        server.report(name, {0: (LWM, LWM)})
    server.start_heartbeats(0.5)
    return server


def _timed(call: Callable[[], Any]) -> tuple[str, float]:
    started = time.perf_counter()
    try:
        call()
        error = None
    except Exception as caught:  # the code is what we record
        error = caught
    return _code(error), time.perf_counter() - started


def _next_query(target: str, timeout: float = 120.0) -> tuple[bool, float]:
    """Whether (and how soon) another client's trivial query is answered."""
    from horizon_broker.client import connect

    started = time.perf_counter()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with connect(target, OTHER_TOKEN, timeout=10, monotonic=False) as other:
                other.query(TRIVIAL, cache=False)
            return True, time.perf_counter() - started
        except Exception:
            time.sleep(0.2)
    return False, time.perf_counter() - started


HOSTILE_SQL: list[tuple[str, str, tuple[str, ...]]] = [
    ("range of 10^12 rows", "SELECT * FROM range(1000000000000)", ("RESOURCE_EXHAUSTED",)),
    ("computed columns of 10^11 rows",
     "SELECT id * 2 AS a, sha2(cast(id AS string), 256) AS b FROM range(100000000000)",
     ("RESOURCE_EXHAUSTED",)),
    ("range with 10^8 partitions", "SELECT * FROM range(0, 10, 1, 100000000)", ("RESOURCE_EXHAUSTED",)),
    ("REPARTITION(10^8) hint", "SELECT /*+ REPARTITION(100000000) */ * FROM accounts", ("RESOURCE_EXHAUSTED",)),
    ("unknown hint", "SELECT /*+ NO_SUCH_HINT(accounts) */ * FROM accounts", ("INVALID_ARGUMENT",)),
    ("explode(sequence(1, 10^9))", "SELECT explode(sequence(1, 1000000000))", ("RESOURCE_EXHAUSTED",)),
    ("sequence sized by the data", "SELECT size(sequence(1, id * 1000000)) FROM accounts", ("RESOURCE_EXHAUSTED",)),
    ("repeat to 1 GB strings", "SELECT repeat(owner, 1000000000) FROM accounts", ("RESOURCE_EXHAUSTED",)),
    ("three-way cross join", "SELECT count(*) FROM big a CROSS JOIN big b CROSS JOIN big c", ("RESOURCE_EXHAUSTED",)),
    ("theta join of big x big", "SELECT count(*) FROM big a JOIN big b ON a.id < b.id", ("RESOURCE_EXHAUSTED",)),
    ("100 KB of table references", "SELECT count(*) FROM " + ", ".join(f"accounts a{i}" for i in range(6_000)),
     ("RESOURCE_EXHAUSTED",)),
    ("whole big table (row cap as LIMIT)", "SELECT * FROM big", ("RESOURCE_EXHAUSTED", "OK")),
    ("whole big table ordered", "SELECT * FROM big ORDER BY id DESC", ("RESOURCE_EXHAUSTED", "OK")),
    ("raise_error", "SELECT raise_error(concat('boom ', owner)) FROM accounts", ("INVALID_ARGUMENT",)),
    ("assert_true", "SELECT assert_true(balance < 0) FROM accounts", ("INVALID_ARGUMENT",)),
    ("invalid regular expression", "SELECT regexp_like(owner, concat('[', owner)) FROM accounts", ("INVALID_ARGUMENT",)),
    ("element_at out of range", "SELECT element_at(array(1, 2), cast(id AS int) + 5) FROM accounts", ("INVALID_ARGUMENT",)),
    ("division by zero", "SELECT balance / (id - id) FROM accounts", ("INVALID_ARGUMENT",)),
    ("raise_error naming a segment file",
     "SELECT raise_error('[FAILED_READ_FILE.FILE_NOT_EXIST] reading file {path}: does not exist') FROM accounts",
     ("INVALID_ARGUMENT",)),
    ("raise_error naming a missing view",
     "SELECT raise_error('[TABLE_OR_VIEW_NOT_FOUND] `__horizon_accounts_g1` cannot be found') FROM accounts",
     ("INVALID_ARGUMENT",)),
    ("reflect()", "SELECT reflect('java.lang.System', 'exit', '0')", ("INVALID_ARGUMENT",)),
    ("file-path table", "SELECT * FROM parquet.`/etc/passwd`", ("INVALID_ARGUMENT",)),
    ("an unknown table", "SELECT * FROM no_such_table", ("NOT_FOUND",)),
]  # fmt: skip


def hostile_run(target: str, root: Path, flight_target: str, exposure: Exposure) -> list[Outcome]:
    from horizon_broker.client import connect

    record = _Recorder(target, exposure)
    segment_file = str(root / "accounts" / "p0.parquet")
    with connect(target, TOKEN, monotonic=False) as client:
        for kind, sql, expected in HOSTILE_SQL:
            text = sql.replace("{path}", segment_file)
            record(kind, lambda text=text: client.query(text, cache=False), expected)
        record(
            "slow query past a 3 s deadline",
            lambda: client.query(SLOW_SQL, timeout=3, cache=False),
            ("DEADLINE_EXCEEDED",),
        )
        record("50 callers waiting on a far min_snapshot (health + a query meanwhile)",
               lambda: _far_waiters(client, target), ("OK",))  # fmt: skip
        record("taking pins until refused", lambda: _pins_until_refused(client),
               ("RESOURCE_EXHAUSTED",))  # fmt: skip
        record("a pin with a 1 ms lease", lambda: client.pin("accounts", lease=0.001, renew=False),
               ("INVALID_ARGUMENT",))  # fmt: skip
        record("a flood of 2,000 pins at the minimum lease", lambda: _pin_flood(client), ("OK",))
        record("a reader that stops reading", lambda: _slow_reader(client), ("DEADLINE_EXCEEDED",))
        identity_run(client, target, flight_target, TOKEN, exposure, record)
    return record.outcomes


class _Recorder:
    """Runs one hostile call, records its outcome and whether the next query still answers."""

    def __init__(self, target: str, exposure: Exposure) -> None:
        self.target = target
        self.exposure = exposure
        self.outcomes: list[Outcome] = []

    def __call__(self, kind: str, call: Callable[[], Any], expected: tuple[str, ...]) -> None:
        started = time.perf_counter()
        error = _error_of(call)
        seconds = time.perf_counter() - started
        code, message = _code(error), "" if error is None else str(error)
        self.exposure.shown.append(message)
        answered, next_seconds = _next_query(self.target)
        detail = "" if code in expected else message[:300]
        self.outcomes.append(Outcome(kind, code, seconds, answered, next_seconds, expected, detail))
        print(
            f"  {kind}: {code} in {seconds:.3f}s; next query {'answered' if answered else 'FAILED'}"
            + (f"\n    UNEXPECTED: {detail}" if code not in expected else "")
        )


def _far_waiters(client: Any, target: str) -> None:
    """50 callers wait on a snapshot far ahead; health and a query must answer meanwhile."""
    from horizon_broker.client import connect
    from horizon_broker.watermark import tokens

    far = tokens.encode({"accounts": LWM + 10**12})
    clients = [connect(target, TOKEN, monotonic=False) for _ in range(50)]
    calls = [c.start_query(TRIVIAL, min_snapshot=far, timeout=30, cache=False) for c in clients]
    time.sleep(2)
    try:
        if client.health() != "SERVING":
            raise RuntimeError("health starved")
        client.query(TRIVIAL, cache=False)
    finally:
        for call in calls:
            call.cancel()
        for c in clients:
            c.close()


def _pins_until_refused(client: Any) -> None:
    held = []
    try:
        while len(held) < 100:
            held.append(client.pin("accounts", lease=60, renew=False))
    finally:
        for pin in held:
            pin.release()


def _pin_flood(client: Any) -> None:
    """2,000 pins at the 1 s minimum lease: the quota refuses most, the rest expire and are
    dropped by later takes, so what stays live is what the quota allows."""
    from horizon_broker._core.errors import ResourceExhausted

    refused = 0
    for _ in range(2_000):
        try:
            client.pin("accounts", lease=1, renew=False)
        except ResourceExhausted:
            refused += 1
    live = len(client.watermarks("accounts").pins)
    if live > 8 or not refused:  # [reads] max_pins_per_identity below
        raise RuntimeError(f"{live} pins live after the flood, {refused} refused")


def _slow_reader(client: Any) -> None:
    call = client.start_query("SELECT id, owner, balance FROM big WHERE id < 900000", cache=False)
    stream = iter(call._call)
    next(stream)
    time.sleep(25)  # past the broker's query timeout (20 s): the broker cuts it off
    for _ in stream:
        pass


def _spark_section(master: str) -> str:
    return (
        f"[spark]\n{master}\nprobe_interval_s = 0.5\nprobe_timeout_s = 5.0\n\n"
        f"[limits]\nquery_timeout_s = 20.0\n\n"
        f"[reads]\nmax_pins_per_identity = 8\n\n" + tokens_section(TOKEN)
    )


def recovery_times(target: str, kill: Callable[[], None]) -> dict[str, float | None]:
    """Seconds until the next query answers after a cancel, a deadline and a killed JVM."""
    from horizon_broker.client import connect

    times: dict[str, float | None] = {}
    with connect(target, TOKEN, monotonic=False) as client:
        client.query(TRIVIAL, cache=False)
        call = client.start_query(SLOW_SQL, cache=False)
        time.sleep(3)
        call.cancel()
        answered, seconds = _next_query(target)
        times["after_cancel_s"] = seconds if answered else None
        _timed(lambda: client.query(SLOW_SQL, timeout=3, cache=False))
        answered, seconds = _next_query(target)
        times["after_deadline_s"] = seconds if answered else None
    kill()
    answered, seconds = _next_query(target, timeout=240)
    times["after_killed_jvm_s"] = seconds if answered else None
    return times


def _kill_jvm_of(pid: int) -> Callable[[], None]:
    def kill() -> None:
        jvm = jvm_of(pid)
        if jvm is not None:
            os.kill(jvm, signal.SIGKILL)

    return kill


def main(argv: list[str] | None = None) -> int:
    from bench.abuse_compaction import compaction_run
    from horizon_broker.broker.spark.local_cluster import (
        BrokerProcess,
        ConnectServer,
        StandaloneCluster,
    )
    from horizon_broker.watermark.embedded_redis import EmbeddedRedis

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    big_rows = 200_000 if args.quick else 2_000_000
    results: dict[str, Any] = {"big_rows": big_rows}
    with tempfile.TemporaryDirectory(prefix="horizon-abuse-") as tmp:
        work = Path(tmp)
        redis = EmbeddedRedis().start()
        server = publish(redis.url, work / "data", big_rows)
        try:
            exposure = Exposure()
            exposure.plant()
            broker = BrokerProcess(work, redis.url, _spark_section('master = "local[2]"'))
            limit_flight(broker.config)
            broker.start()
            assert broker.process is not None
            memory = MemoryWatch(broker.process.pid).start()
            flight_target, metrics_url = listeners(broker.log)
            print("hostile queries against a local broker:")
            outcomes = hostile_run(broker.target, work / "data", flight_target, exposure)
            print("lost replies during a compaction's publish:")
            outcomes += compaction_run(broker.target, OTHER_TOKEN, redis, work / "ledger", Outcome)
            restarts = engine_restarts(metrics_url)
            secrets_found = exposure.found_in(broker.log, metrics_url)
            modes = {"local": recovery_times(broker.target, _kill_jvm_of(broker.process.pid))}
            memory.stop()
            deaths = 0 if broker.process.poll() is None else 1
            broker.stop()
            if not args.quick:
                with StandaloneCluster(workers=2, cores=1) as cluster:
                    on_cluster = BrokerProcess(
                        work, redis.url, _spark_section(f'master = "{cluster.url}"'),
                        name="standalone",
                    )  # fmt: skip
                    with on_cluster:
                        assert on_cluster.process is not None
                        modes["standalone"] = recovery_times(
                            on_cluster.target, _kill_jvm_of(on_cluster.process.pid)
                        )
                modes["connect"] = _connect_recovery(work, redis.url, ConnectServer, BrokerProcess)
        finally:
            server.close()
            redis.close()
    bounded = sum(o.bounded for o in outcomes)
    internal = sum(o.code == "INTERNAL" for o in outcomes)
    results.update(
        kinds=[o.__dict__ for o in outcomes],
        refused_or_bounded=f"{bounded}/{len(outcomes)}",
        all_bounded=bounded == len(outcomes),
        broker_deaths=deaths,
        engine_restarts=restarts,
        secrets_found=secrets_found,
        next_query_always_answered=all(o.next_answered for o in outcomes),
        internal_errors=internal,
        peak_rss_broker_mib=memory.peak_broker / 2**20,
        peak_rss_jvm_mib=memory.peak_jvm / 2**20,
        recovery=modes,
    )
    print_table(
        "hostile queries (each followed by another client's query)",
        ["kind", "code", "time to answer", "next query"],
        [
            (o.kind, o.code + ("" if o.bounded else " (unexpected)"), f"{o.seconds:.3f} s",
             f"answered in {o.next_seconds:.2f} s" if o.next_answered else "NOT answered")
            for o in outcomes
        ],
    )  # fmt: skip
    print_table(
        "next query after...",
        ["mode", "a cancel", "a deadline", "a killed JVM"],
        [
            (mode, *(f"{t[k]:.2f} s" if t.get(k) is not None else "never"
                     for k in ("after_cancel_s", "after_deadline_s", "after_killed_jvm_s")))
            for mode, t in modes.items()
        ],
    )  # fmt: skip
    print(
        f"refused or bounded: {bounded}/{len(outcomes)}; INTERNAL: {internal}; broker deaths: "
        f"{deaths}; engine restarts during the hostile run: {restarts}; fake secret found: "
        f"{len(secrets_found)} {secrets_found}; peak RSS: broker {results['peak_rss_broker_mib']:.0f} MiB, JVM "
        f"{results['peak_rss_jvm_mib']:.0f} MiB (driver heap 4 GiB, result cache 256 MiB)"
    )
    write_results("abuse", results)
    clean = internal == 0 and deaths == 0 and restarts == 0 and not secrets_found
    return 0 if bounded == len(outcomes) and clean else 1


def _connect_recovery(work: Path, redis_url: str, connect_server: Any, broker_process: Any) -> Any:
    """Recovery times with a Spark Connect server: its JVM killed, then started again on the same
    port (the broker cannot start a remote server; it reconnects once one answers)."""
    server = connect_server().start()
    port = server.port
    broker = broker_process(
        work, redis_url, _spark_section(f'remote = "sc://127.0.0.1:{port}"'), name="connect"
    )
    replacement: list[Any] = []

    def kill_and_restart() -> None:
        server.stop()
        again = connect_server()
        again.port = port
        replacement.append(again.start())

    try:
        with broker:
            return recovery_times(broker.target, kill_and_restart)
    finally:
        for running in (server, *replacement):
            running.stop()


if __name__ == "__main__":
    import sys

    sys.exit(main())
