"""Watermark benchmark: report-to-follower latency, one-round-trip table LWM read, apply rate.

Run: ``python -m bench.watermark [--quick]`` (a private redis-server on loopback).

* **report latency**: a server's ``report`` until the broker's follower serves the new LWM;
* **read LWM**: ``read_table_lwm`` on a table of 1,000 servers x 64 partitions (one EVALSHA);
* **full sync**: a follower's start-up rebuild of that state;
* **apply rate**: a follower catching up on a backlog of logged events.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import redis

from bench.report import print_table, summarize, write_results
from horizon_broker._core.redis_calls import connect
from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor
from horizon_broker.watermark.follower import Follower
from horizon_broker.watermark.read import read_table_lwm
from horizon_broker.watermark.server import ServerClient
from tests.processes import RedisProcess


def descriptor(name: str) -> TableDescriptor:
    return TableDescriptor(name, (ColumnSpec("id", "bigint"),), primary_key=("id",))


def report_latency(url: str, samples: int) -> dict[str, float]:
    server = ServerClient(url, "latency-server")
    server.register()
    server.register_table(descriptor("latency"))
    server.report("latency", {0: (1, 1)})
    follower = Follower(url)
    follower.start()
    follower.wait_until_synced()
    latencies = []
    for i in range(2, samples + 2):
        started = time.perf_counter()
        server.report("latency", {0: (i, i)})
        if not follower.wait_for(lambda f, i=i: f.view("latency").lwm == i, 5):
            raise RuntimeError("follower did not see a report within 5 s")
        latencies.append((time.perf_counter() - started) * 1000)
    follower.stop()
    server.close()
    return summarize(latencies)


def big_table(url: str, servers: int, partitions: int) -> dict[str, Any]:
    shared = connect(url)
    clients = [ServerClient(shared, f"server-{s:04d}") for s in range(servers)]
    clients[0].register_table(descriptor("big"))
    base = 1_800_000_000_000 << 16
    started = time.perf_counter()
    for s, client in enumerate(clients):
        client.register()
        client.report(
            "big",
            {
                s * partitions + p: (base + s * 1000 + p + 7, base + s * 1000 + p)
                for p in range(partitions)
            },
        )
    populate_s = time.perf_counter() - started
    reader = redis.Redis.from_url(url)
    read_table_lwm(reader, "big")
    reads = []
    for _ in range(500):
        started = time.perf_counter()
        found = read_table_lwm(reader, "big")
        reads.append((time.perf_counter() - started) * 1000)
    assert found is not None and found.lwm == base and found.partitions == servers * partitions
    started = time.perf_counter()
    follower = Follower(url)
    follower.start()
    follower.wait_until_synced(120)
    sync_s = time.perf_counter() - started
    assert follower.lwm("big") == base
    follower.stop()
    reader.close()
    shared.close()
    return {"read_ms": summarize(reads), "populate_s": populate_s, "full_sync_s": sync_s}


def apply_rate(url: str, events: int) -> dict[str, float]:
    server = ServerClient(url, "rate-server")
    server.register()
    server.register_table(descriptor("rate"))
    follower = Follower(url)
    follower.start()
    follower.wait_until_synced()
    follower.stop()  # fall behind, keeping the state, while a backlog builds up
    started = time.perf_counter()
    for i in range(events):
        server.report("rate", {i % 64: (i + 1, i + 1)})
    produce_s = time.perf_counter() - started
    before = follower.events_applied
    started = time.perf_counter()
    follower.start()
    if not follower.wait_for(lambda f: f.events_applied - before >= events, 120):
        raise RuntimeError("follower did not catch up")
    apply_s = time.perf_counter() - started
    follower.stop()
    server.close()
    return {"events": events, "produce_per_s": events / produce_s, "apply_per_s": events / apply_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    args = parser.parse_args()
    samples, servers, events = (200, 100, 2_000) if args.quick else (2_000, 1_000, 20_000)
    partitions = 64
    process = RedisProcess().start()
    try:
        latency = report_latency(process.url, samples)
        big = big_table(process.url, servers, partitions)
        rate = apply_rate(process.url, events)
    finally:
        process.close()
    rows = [
        [
            "report -> follower latency",
            f"{latency['p50']:.2f} ms",
            f"{latency['p99']:.2f} ms",
            "p99 <= 20 ms",
        ],
        [
            f"read_table_lwm ({servers} servers x {partitions} partitions)",
            f"{big['read_ms']['p50']:.3f} ms",
            f"{big['read_ms']['p99']:.3f} ms",
            "<= 5 ms, 1 round trip",
        ],
        [
            f"follower full sync ({servers * partitions} partitions)",
            f"{big['full_sync_s']:.2f} s",
            "",
            "",
        ],
        [
            f"follower apply rate ({events} events)",
            f"{rate['apply_per_s']:.0f} events/s",
            "",
            "thousands/s",
        ],
    ]
    print_table("watermark benchmark", ["measure", "p50 / value", "p99", "target"], rows)
    path = write_results(
        "watermark",
        {
            "quick": args.quick,
            "report_latency_ms": latency,
            "read_table_lwm": {"servers": servers, "partitions_per_server": partitions, **big},
            "apply": rate,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
