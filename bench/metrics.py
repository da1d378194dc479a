"""Metrics benchmark: one Prometheus scrape of a broker's state with 100 tables.

Run: ``python -m bench.metrics [--quick]`` (a private redis-server on loopback, no Spark).

The broker's state collector (:mod:`horizon_broker.broker.observe.state_metrics`) reads a real follower and a
real pin store at each scrape; this serves it on the real endpoint (``prometheus_client``'s HTTP
server) with the process-wide families, fills Redis with 100 tables of 4 servers' partitions and
8 segments each (some pinned), and times scrapes over HTTP. Target: under 50 ms per scrape.
"""

from __future__ import annotations

import argparse
import time
import urllib.request
from typing import Any

from prometheus_client import CollectorRegistry

from bench.report import print_table, summarize, write_results
from horizon_broker._core.hlc import hlc_from_ms
from horizon_broker._core.metrics_endpoint import MetricsEndpoint
from horizon_broker.broker.observe import metrics
from horizon_broker.broker.observe.state_metrics import BrokerParts, BrokerStateCollector
from horizon_broker.pins.store import PinStore
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor
from horizon_broker.watermark.follower import Follower
from horizon_broker.watermark.server import ServerClient
from tests.processes import RedisProcess

DAY_MS = 86_400_000


def fill(url: str, tables: int) -> None:
    """``tables`` tables, each with 2 chunks x 4 partitions and 4 servers reporting."""
    servers = [ServerClient(url, f"srv-{s}") for s in range(4)]
    for server in servers:
        server.register()
    now = hlc_from_ms(int(time.time() * 1000))
    for t in range(tables):
        name = f"table_{t:03d}"
        servers[0].register_table(
            TableDescriptor(
                name, (ColumnSpec("id", "bigint"),), primary_key=("id",), storage_root="/data"
            )
        )
        servers[0].announce(
            [
                Segment(
                    table=name,
                    interval=Interval(c * DAY_MS, (c + 1) * DAY_MS),
                    version="2026-01-01T00:00:00.000Z",
                    partition=p,
                    core_partitions=4,
                    location=(f"/data/{name}/{c}-{p}.parquet",),
                    row_count=1000,
                )
                for c in range(2)
                for p in range(4)
            ]
        )
        for s, server in enumerate(servers):
            server.report(name, {s: (now - s, now - s)})
    for server in servers:
        server.close()


def run(tables: int, scrapes: int) -> dict[str, Any]:
    redis = RedisProcess().start()
    try:
        fill(redis.url, tables)
        follower = Follower(redis.url)
        follower.start()
        follower.wait_until_synced(30)
        pins = PinStore(redis.url)
        for t in range(0, tables, 10):
            pins.pin([f"table_{t:03d}"], 1 << 16, lease_s=600.0, owner="bench")
        registry = CollectorRegistry(auto_describe=False)
        registry.register(
            BrokerStateCollector(BrokerParts(follower, lambda: None, lambda: None, lambda: pins))
        )
        endpoint = MetricsEndpoint("127.0.0.1:0", [metrics.REGISTRY, registry])
        try:
            timings, size = [], 0
            for _ in range(scrapes):
                started = time.perf_counter()
                with urllib.request.urlopen(endpoint.url, timeout=10) as answer:
                    size = len(answer.read())
                timings.append((time.perf_counter() - started) * 1000)
        finally:
            endpoint.stop()
            pins.close()
            follower.stop()
    finally:
        redis.close()
    return {"tables": tables, "scrape_bytes": size, "scrape_ms": summarize(timings)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    result = run(100, 20 if args.quick else 200)
    ms = result["scrape_ms"]
    print_table(
        "Metrics scrape (100 tables, HTTP, prometheus_client)",
        ["tables", "bytes", "p50 ms", "p99 ms", "mean ms"],
        [[result["tables"], result["scrape_bytes"], f"{ms['p50']:.1f}", f"{ms['p99']:.1f}",
          f"{ms['mean']:.1f}"]],
    )  # fmt: skip
    result["targets"] = {"scrape_p50_ms": ms["p50"], "under_50_ms": ms["p50"] < 50}
    write_results("metrics", result)


if __name__ == "__main__":
    main()
