"""Concurrency: queries/s and latency with 1, 4 and 16 clients at once, for point queries and a
dashboard query, with the result cache on and off.

One broker (embedded Spark on this machine's cores, the default ``[limits]``: 4 queries run at
once, more wait in the queue) serves one table (3 versions per key, 100 segments). The clients
run in a process of their own (so their Python does not share the broker's), each a thread with
its own gRPC channel that sends queries back to back for a fixed time:

* ``point``: a key lookup by a random key (answered from the files, no Spark job);
* ``dashboard, cache off``: an aggregate over a random 10,000-key range, always run on Spark;
* ``dashboard, cache on``: the same aggregate over one of 8 ranges, so nearly all are cache hits.

Reported per kind and level: queries/s, p50/p99 end to end, and refusals (RESOURCE_EXHAUSTED when
the admission queue is full). Where throughput stops growing with clients, the bottleneck is named
from the figures: Spark's cores for the dashboard misses, the broker's Python (one GIL) for the
rest.

    .venv/bin/python -m bench.concurrency [--quick]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import shutil
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bench.point_query import VERSIONS, publish, write_layout
from bench.report import print_table, summarize, write_results

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

TABLE = "concurrency_accounts"
LEVELS = (1, 4, 16)
SEGMENTS = 100
KINDS = ("point", "dashboard, cache off", "dashboard, cache on")


def _sql(kind: str, rng: random.Random, keys: int) -> tuple[str, bool]:
    """A query of ``kind`` and whether it may use the result cache."""
    if kind == "point":
        return f"SELECT id, owner, balance FROM {TABLE} WHERE id = {rng.randrange(keys)}", True
    if kind == "dashboard, cache off":
        start = rng.randrange(keys - 10_000)
    else:
        start = rng.randrange(8) * (keys // 8)
    sql = (
        f"SELECT count(*) AS n, sum(balance) AS s FROM {TABLE} "
        f"WHERE id BETWEEN {start} AND {start + 9_999}"
    )
    return sql, kind == "dashboard, cache on"


def run_level(target: str, kind: str, clients: int, seconds: float, keys: int) -> dict[str, Any]:
    """``clients`` threads sending ``kind`` queries for ``seconds``."""
    from horizon_broker._core.errors import ResourceExhausted
    from horizon_broker.client import connect

    latencies: list[float] = []
    refused = [0]
    failures: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)
    stop_at = [0.0]

    def client(number: int) -> None:
        rng = random.Random(number)
        with connect(target, timeout=120.0) as horizon:
            start.wait()
            while time.monotonic() < stop_at[0]:
                sql, cache = _sql(kind, rng, keys)
                began = time.perf_counter()
                try:
                    horizon.execute(sql, cache=cache)
                except ResourceExhausted:
                    with lock:
                        refused[0] += 1
                    continue
                except Exception as error:  # reported, never hidden
                    with lock:
                        failures.append(f"{type(error).__name__}: {error}"[:200])
                    continue
                elapsed = (time.perf_counter() - began) * 1000
                with lock:
                    latencies.append(elapsed)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    stop_at[0] = time.monotonic() + seconds
    began = time.monotonic()
    start.wait()
    for thread in threads:
        thread.join()
    took = time.monotonic() - began
    return {
        "clients": clients,
        "queries": len(latencies),
        "queries_per_s": round(len(latencies) / took, 1),
        "latency_ms": summarize(latencies),
        "refused": refused[0],
        "failures": failures[:5],
    }


def warm_up(target: str, keys: int) -> None:
    """Five queries of each kind before measuring (JIT, views, code generation caches)."""
    from horizon_broker.client import connect

    with connect(target) as warm:
        rng = random.Random(0)
        for kind in KINDS:
            for _ in range(5):
                sql, cache = _sql(kind, rng, keys)
                warm.execute(sql, cache=cache)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer keys, shorter levels")
    args = parser.parse_args(argv)
    keys = 50_000 if args.quick else 200_000
    seconds = 4.0 if args.quick else 15.0

    from horizon_broker._core.heap import settle_startup_heap
    from horizon_broker._core.spark_session import create_spark_session
    from horizon_broker.broker.api.server import BrokerServer
    from horizon_broker.broker.config import config_from_mapping
    from horizon_broker.watermark.server import ServerClient
    from tests.processes import RedisProcess

    workdir = Path(tempfile.mkdtemp(prefix="horizon-bench-concurrency-"))
    redis = RedisProcess().start()
    spark = create_spark_session(app_name="horizon-bench-concurrency")
    server = None
    results: dict[str, Any] = {"keys": keys, "segments": SEGMENTS, "seconds_per_level": seconds}
    try:
        server_client = ServerClient(redis.url, "bench-server")
        server_client.register()
        paths = write_layout(workdir / TABLE, "ranges", keys, SEGMENTS, seed=1)
        publish(server_client, TABLE, paths, str(workdir), keys * len(VERSIONS))
        server_client.start_heartbeats(1.0)
        config = config_from_mapping(
            {
                "server": {"listen": "127.0.0.1:0"},
                "state": {"redis_url": redis.url},
                "metrics": {"listen": "127.0.0.1:0"},
                "console": {"listen": "127.0.0.1:0"},
                "flight": {"listen": "127.0.0.1:0"},
            }
        )
        server = BrokerServer(config, spark=spark).start()
        settle_startup_heap()  # as ``horizon serve`` does once its broker is up
        results["limits"] = {
            "max_concurrent": config.limits.max_concurrent,
            "queue_size": config.limits.queue_size,
        }
        warm_up(server.target, keys)
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as clients_process:
            for kind in KINDS:
                results[kind] = [
                    clients_process.submit(
                        run_level, server.target, kind, clients, seconds, keys
                    ).result()
                    for clients in LEVELS
                ]
        server_client.close()
    finally:
        if server is not None:
            server.stop(0)
            server.follower.stop()
        spark.stop()
        redis.close()
        shutil.rmtree(workdir, ignore_errors=True)

    rows = []
    for kind in KINDS:
        levels = results[kind]
        for level in levels:
            rows.append(
                [
                    kind,
                    level["clients"],
                    f"{level['queries_per_s']:.1f}",
                    f"{level['latency_ms']['p50']:.1f}",
                    f"{level['latency_ms']['p99']:.1f}",
                    level["refused"],
                    len(level["failures"]),
                ]
            )
        results[f"{kind}: queries/s 16 over 1"] = round(
            levels[-1]["queries_per_s"] / max(levels[0]["queries_per_s"], 1e-9), 2
        )
    print_table(
        f"concurrency: one broker, {os.cpu_count()} cores, {keys:,} keys, {SEGMENTS} segments",
        ["kind", "clients", "queries/s", "p50 ms", "p99 ms", "refused", "failed"],
        rows,
    )
    for kind in KINDS:
        print(f"{kind}: queries/s at 16 clients / at 1 = {results[f'{kind}: queries/s 16 over 1']}")
    path = write_results("concurrency", results)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
