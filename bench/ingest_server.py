"""One ingestion server for eight tables against eight servers of one table each.

Eight tables of a TPC-H-like schema (region, nation, supplier, customer, part, partsupp, orders,
lineitem), three changelog batches each (inserts, then updates and deletes), ingested by real
``horizon ingest --watch`` processes against a real redis-server, in two ways:

* **one server**: ``horizon ingest --config server.toml``, one process and one Spark application
  for the eight tables (batches of different tables at once, in FAIR scheduler pools);
* **eight processes**: ``horizon ingest --table <t>.toml`` once per table, each with its own JVM.

Measured per way: **start-up** (launch until every server is ready: Spark up, tables registered,
partitions claimed), **total** (launch until the third batch of every table is committed), the
time of each round of batches, and **peak memory** (the highest sum of the resident memory of
every process involved, the JVMs included, sampled every 0.2 s). Results go to
``bench/results/ingest_server.json``.

Run: ``python -m bench.ingest_server`` (``--quick`` for a small run).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.report import print_table, write_results

SIZES = {
    "region": 5,
    "nation": 25,
    "supplier": 1_000,
    "customer": 15_000,
    "part": 20_000,
    "partsupp": 40_000,
    "orders": 60_000,
    "lineitem": 120_000,
}
QUICK_DIVISOR = 20
BATCHES = 3
TIMEOUT_S = 1_800.0


def changelog(name: str, rows: int, number: int) -> list[dict[str, Any]]:
    """Batch ``number``: 1 inserts every row; later ones update a tenth and delete a fiftieth."""
    found = []
    for key in range(rows):
        if number == 1:
            found.append({"id": key, "parent": key % 97, "amount": key, "seq": 1, "deleted": False})
        elif key % 50 == number:
            found.append(
                {"id": key, "parent": key % 97, "amount": 0, "seq": number, "deleted": True}
            )
        elif key % 10 == number:
            found.append({"id": key, "parent": key % 97, "amount": key + number, "seq": number,
                          "deleted": False})  # fmt: skip
    return found


def table_toml(name: str, storage: Path) -> str:
    return (
        f'name = "{name}"\nprimary_key = ["id"]\ncomparison = ["seq"]\n'
        f'delete_column = "deleted"\nkey_partitions = 2\nstorage_root = "{storage}"\n'
        '[columns]\nid = "bigint"\nparent = "bigint"\namount = "bigint"\nseq = "bigint"\n'
        'deleted = "boolean"\n'
    )


class Run:
    """Processes of one way of ingesting, their output lines and their memory."""

    def __init__(self, commands: list[list[str]], log: Path) -> None:
        self.started = time.monotonic()
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        self.log = log.open("w")
        self.processes = [
            subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
            for command in commands
        ]
        for process in self.processes:
            threading.Thread(target=self._read, args=(process,), daemon=True).start()
        self.peak_rss = 0
        self.batches: dict[str, int] = {}
        """Batch lines printed per table."""
        self._stop = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        for line in iter(process.stdout.readline, ""):  # type: ignore[union-attr]
            self.lines.put((time.monotonic(), line.rstrip("\n")))

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self.peak_rss = max(self.peak_rss, sum(tree_rss(p.pid) for p in self.processes))

    def wait_for(self, done: Any, what: str) -> float:
        """Read lines until ``done(line)`` says everything awaited was seen; the time of the
        last line read. Counts each table's batch lines (``<table>: batch ...``) on the way."""
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            if time.monotonic() > deadline:
                raise RuntimeError(f"never saw {what}")
            try:
                at, line = self.lines.get(timeout=1.0)
            except queue.Empty:
                if all(p.poll() is not None for p in self.processes):
                    raise RuntimeError(f"the servers exited before {what}") from None
                continue
            self.log.write(line + "\n")
            table, _, rest = line.partition(": ")
            if rest.startswith("batch ") and " rows" in rest:
                self.batches[table] = self.batches.get(table, 0) + 1
            if done(line):
                return at

    def stop(self) -> list[int | None]:
        """SIGTERM every server (each parks), then collect their exit codes."""
        for process in self.processes:
            process.send_signal(signal.SIGTERM)
        codes = []
        for process in self.processes:
            try:
                codes.append(process.wait(timeout=300))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                codes.append(None)
        self._stop.set()
        self.log.close()
        return codes


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        total += rss.get(current, 0)
        stack.extend(children.get(current, []))
    return total


def ingest_way(way: str, sizes: dict[str, int], work: Path, redis_url: str) -> dict[str, Any]:
    """Run one way of ingesting the eight tables; its figures."""
    horizon = str(Path(sys.executable).with_name("horizon"))
    root = work / way
    landing, storage = root / "landing", root / "storage"
    tables = {name: f"{way}_{name}" for name in sizes}  # one state store per way, names apart
    for name, table in tables.items():
        (landing / table).mkdir(parents=True)
        (root / f"{name}.toml").write_text(table_toml(table, storage))
    common = ["--redis", redis_url, "--watch", "0.5", "--format", "json"]
    if way == "one_server":
        config = root / "server.toml"
        config.write_text(
            f'server_id = "{way}"\nredis = "{redis_url}"\nsource_root = "{landing}"\n'
            + "".join(f'[[tables]]\ndefinition = "{name}.toml"\n' for name in sizes)
        )
        commands = [[horizon, "ingest", "--config", str(config), *common]]
    else:
        commands = [
            [horizon, "ingest", "--table", str(root / f"{name}.toml"), "--source",
             str(landing / tables[name]), "--server-id", f"{way}-{name}", *common]
            for name in sizes
        ]  # fmt: skip
    run = Run(commands, root / "output.log")
    ready: set[str] = set()

    def all_ready(line: str) -> bool:
        if " serves " in line:
            ready.add(line)
        return len(ready) == len(commands)

    try:
        startup = run.wait_for(all_ready, "every server ready") - run.started
        rounds = []
        for number in range(1, BATCHES + 1):
            began = time.monotonic()
            for name, rows in sizes.items():
                drop(landing / tables[name], number, changelog(name, rows, number))
            done = run.wait_for(
                lambda _, n=number: all(run.batches.get(t, 0) >= n for t in tables.values()),
                f"batch {number} of every table",
            )
            rounds.append(round(done - began, 2))
        total = time.monotonic() - run.started
    finally:
        codes = run.stop()
    return {
        "processes": len(commands),
        "startup_s": round(startup, 2),
        "total_s": round(total, 2),
        "batch_rounds_s": rounds,
        "peak_rss_mb": round(run.peak_rss / 2**20),
        "exit_codes": codes,
    }


def drop(directory: Path, number: int, rows: list[dict[str, Any]]) -> None:
    staging = directory / f".{number:03d}.tmp"
    staging.write_text("".join(json.dumps(row) + "\n" for row in rows))
    staging.rename(directory / f"{number:03d}.json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"tables {QUICK_DIVISOR}x smaller")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    from horizon_broker.watermark.embedded_redis import EmbeddedRedis

    sizes = {n: max(5, r // QUICK_DIVISOR) if args.quick else r for n, r in SIZES.items()}
    work = Path(tempfile.mkdtemp(prefix="horizon-bench-servers-"))
    results: dict[str, Any] = {"rows_batch_1": sum(sizes.values()), "tables": sizes}
    try:
        for way in ("one_server", "eight_processes"):
            redis = EmbeddedRedis().start()
            try:
                print(f"ingesting eight tables, three batches each: {way} ...", flush=True)
                results[way] = ingest_way(way, sizes, work, redis.url)
            finally:
                redis.close()
    finally:
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    one, eight = results["one_server"], results["eight_processes"]
    results["eight_over_one"] = {
        key: round(eight[key] / one[key], 2) for key in ("startup_s", "total_s", "peak_rss_mb")
    }
    print_table(
        "eight tables x three batches: one server vs eight processes",
        ["measure", "one server", "eight processes", "eight / one"],
        [
            ("start-up", f"{one['startup_s']} s", f"{eight['startup_s']} s",
             results["eight_over_one"]["startup_s"]),
            ("total (start-up and 3 rounds of batches)", f"{one['total_s']} s",
             f"{eight['total_s']} s", results["eight_over_one"]["total_s"]),
            ("rounds of batches", one["batch_rounds_s"], eight["batch_rounds_s"], "-"),
            ("peak memory (RSS, JVMs included)", f"{one['peak_rss_mb']} MB",
             f"{eight['peak_rss_mb']} MB", results["eight_over_one"]["peak_rss_mb"]),
        ],
    )  # fmt: skip
    print(f"wrote {write_results('ingest_server', results)}")
    return 0 if all(code == 0 for way in (one, eight) for code in way["exit_codes"]) else 1


if __name__ == "__main__":
    sys.exit(main())
