"""Broker restart benchmark: from a ``horizon serve`` process's start to its first answers.

Publishes one table (``--segments`` Parquet files written with pyarrow, one segment each) in a
private redis-server, then starts ``horizon serve`` ``--repeat`` times (each killed with SIGKILL
after its first answers, as a crashed broker is) and measures from the launcher's clock, each
start side by side with the others:

* the first inspection answer (GetWatermarks) and the first health SERVING;
* the first query answered (a point query, sent as soon as the port accepts; it waits for the
  engine), then the first aggregate (a Spark job);
* where the time goes, from the broker's own start-up line: process start -> ``start()``
  (interpreter, imports, configuration), the state loaded from Redis, the gRPC server bound
  (inspection answers), Spark up (started in the background at the beginning of ``start()``),
  the engine built (queries answer);
* the import cost alone: ``import horizon_broker.cli`` and the broker server's module in fresh
  interpreters.

    .venv/bin/python -m bench.broker_restart [--segments 200] [--repeat 3]

Run it under ``flock /tmp/horizon-spark.lock`` on a shared machine (each start runs a Spark).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.report import print_table, summarize, write_results

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

TABLE = "bench_accounts"
STARTUP_LINE = re.compile(r"start-up \(began_at (?P<began>[\d.]+)\): (?P<marks>.*)")
MARK = re.compile(r"(?P<part>[a-z ]+) (?P<seconds>[\d.]+) s")


def write_files(directory: Path, rows: int, files: int) -> list[str]:
    """``rows`` keys in ``files`` sorted Parquet files of the upsert layout (pyarrow: no Spark)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    per_file = max(1, rows // files)
    paths = []
    for number in range(files):
        ids = pa.array(range(number * per_file, (number + 1) * per_file), pa.int64())
        table = pa.table(
            {
                "id": ids,
                "owner": pa.array([f"owner{i}" for i in ids.to_pylist()]),
                "balance": pa.array([i % 1000 for i in ids.to_pylist()], pa.int64()),
                "validFrom": pa.array([500] * per_file, pa.int64()),
                "validUntil": pa.nulls(per_file, pa.int64()),
            }
        )
        path = directory / f"part-{number:05d}.parquet"
        pq.write_table(table, path)
        paths.append(str(path))
    return paths


def import_seconds(module: str, repeat: int) -> dict[str, Any]:
    """Wall time of a fresh interpreter importing ``module`` (and nothing else)."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
        samples.append(time.perf_counter() - started)
    return summarize([s * 1000 for s in samples])


def _config(directory: Path, redis_url: str, port: int) -> Path:
    path = directory / "broker.toml"
    path.write_text(
        f'[server]\nlisten = "127.0.0.1:{port}"\ngrace_s = 1.0\n\n'
        f'[state]\nredis_url = "{redis_url}"\n\n'
        '[flight]\nenabled = false\n\n[metrics]\nlisten = "127.0.0.1:0"\n\n'
        '[spark]\nmaster = "local[2]"\n\n[spark.conf]\n"spark.sql.shuffle.partitions" = "4"\n'
    )
    return path


class FirstAnswers:
    """Threads that keep asking a starting broker until each kind of call is answered; the
    launcher-clock time (epoch seconds) of each first answer."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.at: dict[str, float] = {}
        self._threads = [
            threading.Thread(target=self._ask, args=(name, call), daemon=True)
            for name, call in (
                ("inspection", lambda c: c.watermarks(TABLE)),
                ("health serving", lambda c: c.health() == "SERVING" or None),
                ("first query", lambda c: c.query(f"SELECT * FROM {TABLE} WHERE id = 7")),
            )
        ]
        for thread in self._threads:
            thread.start()

    def _ask(self, name: str, call: Any) -> None:
        from horizon_broker._core.errors import HorizonError
        from horizon_broker.client import connect

        with connect(self.target, timeout=300) as client:
            while True:
                try:
                    if call(client) is not None:
                        self.at[name] = time.time()
                        return
                except HorizonError:  # not listening yet
                    pass
                time.sleep(0.02)

    def wait(self) -> dict[str, float]:
        for thread in self._threads:
            thread.join(timeout=600)
        return self.at


def one_start(directory: Path, redis_url: str) -> dict[str, float]:
    """Start ``horizon serve``, time its first answers, kill it (SIGKILL); seconds from launch."""
    from horizon_broker.client import connect
    from horizon_broker.watermark.embedded_redis import free_port

    port = free_port()
    config = _config(directory, redis_url, port)
    log_path = directory / "broker.log"
    horizon = str(Path(sys.executable).with_name("horizon"))
    with log_path.open("wb") as log:
        launched = time.time()
        process = subprocess.Popen(
            [horizon, "serve", "--config", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        first = FirstAnswers(f"127.0.0.1:{port}").wait()
        with connect(f"127.0.0.1:{port}", timeout=300) as client:
            client.query(f"SELECT count(*) AS n, sum(balance) AS s FROM {TABLE}", cache=False)
            first["first aggregate"] = time.time()
    finally:
        process.kill()
        process.wait(timeout=30)
    figures = {name: at - launched for name, at in first.items()}
    figures.update(_startup_marks(log_path.read_text(errors="replace"), launched))
    return figures


def _startup_marks(log: str, launched: float) -> dict[str, float]:
    """The broker's start-up line as seconds from launch (``start() began`` first)."""
    found = STARTUP_LINE.search(log)
    if found is None:
        raise RuntimeError(f"no start-up line in the broker's output:\n{log[-2000:]}")
    began = float(found["began"]) - launched
    marks = {"start() began": began}
    for mark in MARK.finditer(found["marks"]):
        marks[f"{mark['part'].strip()}"] = began + float(mark["seconds"])
    return marks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=200, help="segments (files) announced")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3, help="starts measured")
    args = parser.parse_args(argv)
    from bench.broker import publish
    from horizon_broker.watermark.embedded_redis import EmbeddedRedis

    with tempfile.TemporaryDirectory(prefix="horizon-bench-restart-") as work:
        directory = Path(work)
        files = write_files(directory / "segments", args.rows, args.segments)
        redis = EmbeddedRedis().start()
        server = publish(redis.url, files, args.rows)
        try:
            starts = [one_start(directory, redis.url) for _ in range(args.repeat)]
        finally:
            server.close()
            redis.close()
    imports = {
        "import horizon_broker.cli": import_seconds("horizon_broker.cli", args.repeat),
        "import broker.api.server": import_seconds("horizon_broker.broker.api.server", args.repeat),
    }
    report(starts, imports, args)
    write_results(
        "broker_restart", {"segments": args.segments, "starts": starts, "imports": imports}
    )
    return 0


def _parts(starts: list[dict[str, float]]) -> list[list[str]]:
    """Each part's own duration: the moments above as differences, medians over the starts."""
    spans = {
        "interpreter, imports, configuration": lambda s: s["start() began"],
        "state loaded from Redis": lambda s: s["state loaded"] - s["start() began"],
        "gRPC bound (inspection answers)": lambda s: s["inspection answers"] - s["state loaded"],
        "Spark start (in the background, from start())": lambda s: (
            s["spark up"] - s["start() began"]
        ),
        "engine built after Spark": lambda s: s["queries answer"] - s["spark up"],
        "to the client's first answer": lambda s: s["first query"] - s["queries answer"],
    }
    rows = []
    for name, span in spans.items():
        median = summarize([span(start) * 1000 for start in starts])["p50"] / 1000
        rows.append([name, f"{median:.2f}"])
    return rows


def report(starts: list[dict[str, float]], imports: dict[str, Any], args: Any) -> None:
    order = [
        "start() began",
        "state loaded",
        "inspection answers",
        "inspection",
        "spark up",
        "queries answer",
        "health serving",
        "first query",
        "first aggregate",
    ]
    rows = []
    for name in order:
        values = [start[name] for start in starts if name in start]
        if values:
            stats = summarize([v * 1000 for v in values])
            rows.append([name, f"{stats['p50'] / 1000:.2f}", f"{max(values):.2f}"])
    title = (
        f"broker restart: {args.segments} segments, {args.rows} rows, {len(starts)} starts "
        "(seconds from the process launch; 'inspection' etc. as the client saw them)"
    )
    print_table(title, ["moment", "median s", "max s"], rows)
    print_table("where the time goes (median s)", ["part", "seconds"], _parts(starts))
    first_query = summarize([s["first query"] for s in starts])["p50"]
    inspection = summarize([s["inspection"] for s in starts])["p50"]
    spark_up = summarize([s["spark up"] for s in starts])["p50"]
    print(
        f"inspection answered at {inspection / first_query:.2f}x the first query's time; the "
        f"first query came {first_query - spark_up:.2f} s after Spark was up"
    )
    for name, stats in imports.items():
        print(f"{name}: median {stats['p50']:.0f} ms (fresh interpreter)")


if __name__ == "__main__":
    raise SystemExit(main())
