"""Point-query scaling: a key lookup through gRPC as a table's segments grow from 10 to 1,000.

The cost of a lookup should not grow with the segments that cannot hold its key. The same keys
(3 versions each: two closed, one open) are written as 10, 100 and 1,000 segments in two layouts:

* ``ranges``: each segment holds a contiguous key range, sorted by key (what compaction and a
  key-sorted load leave): the footers' statistics rule out every segment but one;
* ``spread``: keys hashed over the segments, versions of one key in different segments, each
  sorted by key (what hash-partitioned ingestion batches leave): every segment's key range spans
  the table, so the statistics rule out only row groups, and the reader looks into every segment.
  This is the honest worst case, not a flattering one.

One broker (embedded Spark, direct lookups on) serves all six tables; each is warmed up, then
queried with random keys, one client, p50/p99 end to end, with the broker's own share
(rewrite + views) from each answer's trailer. Every answer is checked against the key's open
version. Files are written with pyarrow (no Spark job), published through the server-side Redis
client at a fixed LWM.

    .venv/bin/python -m bench.point_query [--quick]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.report import print_table, summarize, write_results

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

SEGMENT_COUNTS = (10, 100, 1_000)
LAYOUTS = ("ranges", "spread")
VERSIONS = ((100, 200), (200, 300), (300, None))
"""(validFrom, validUntil) of each key's versions: the last one is open."""
LWM = 1_000
ROW_GROUP_ROWS = 2_000


def write_layout(directory: Path, layout: str, keys: int, segments: int, seed: int) -> list[str]:
    """``segments`` Parquet files of ``keys`` keys (3 versions each) in ``layout``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [("id", pa.int64()), ("owner", pa.string()), ("balance", pa.int64()),
         ("validFrom", pa.int64()), ("validUntil", pa.int64())]
    )  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    parts: list[list[tuple[int, int]]] = [[] for _ in range(segments)]
    rng = random.Random(seed)
    for key in range(keys):
        for version in range(len(VERSIONS)):
            target = key * segments // keys if layout == "ranges" else rng.randrange(segments)
            parts[target].append((key, version))
    paths = []
    for number, rows in enumerate(parts):
        rows.sort()
        columns: dict[str, list[Any]] = {name: [] for name in schema.names}
        for key, version in rows:
            valid_from, valid_until = VERSIONS[version]
            columns["id"].append(key)
            columns["owner"].append(f"owner{key}")
            columns["balance"].append(key * 10 + version)
            columns["validFrom"].append(valid_from)
            columns["validUntil"].append(valid_until)
        path = directory / f"part-{number:05d}.parquet"
        pq.write_table(pa.table(columns, schema=schema), path, row_group_size=ROW_GROUP_ROWS)
        paths.append(str(path))
    return paths


def publish(client: Any, table: str, paths: list[str], storage_root: str, rows: int) -> None:
    from horizon_broker.timeline.interval import Interval
    from horizon_broker.timeline.segment import Segment
    from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor

    descriptor = TableDescriptor(
        name=table,
        columns=(
            ColumnSpec("id", "bigint"),
            ColumnSpec("owner", "string"),
            ColumnSpec("balance", "bigint"),
        ),
        primary_key=("id",),
        storage_root=storage_root,
    )
    client.register_table(descriptor)
    client.announce(
        Segment(
            table=table,
            interval=Interval(0, 86_400_000),
            version="2026-01-01T00:00:00.000Z",
            partition=partition,
            core_partitions=len(paths),
            location=(path,),
            row_count=rows // len(paths),
            max_valid_from=VERSIONS[-1][0],
        )
        for partition, path in enumerate(paths)
    )
    client.report(table, {0: (LWM, LWM)})


def measure(client: Any, table: str, keys: int, iterations: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    end_to_end: list[float] = []
    broker_share: list[float] = []
    for index in range(iterations + 10):
        key = rng.randrange(keys)
        started = time.perf_counter()
        result = client.execute(f"SELECT id, owner, balance FROM {table} WHERE id = {key}")
        elapsed = (time.perf_counter() - started) * 1000
        rows = result.table.to_pylist()
        expected = [{"id": key, "owner": f"owner{key}", "balance": key * 10 + 2}]
        assert rows == expected, (table, key, rows)
        if index < 10:
            continue  # warm-up: the first lookup of a shape asks Spark for its schema
        timings = result.trailer.timings
        end_to_end.append(elapsed)
        broker_share.append(timings.rewrite_ms + timings.views_ms)
    return {
        "end_to_end_ms": summarize(end_to_end),
        "rewrite_views_ms": summarize(broker_share),
        "route": result.metadata.execution,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer keys and iterations")
    args = parser.parse_args(argv)
    keys = 50_000 if args.quick else 200_000
    iterations = 60 if args.quick else 300

    from horizon_broker._core.spark_session import create_spark_session
    from horizon_broker.broker.api.server import BrokerServer
    from horizon_broker.broker.config import config_from_mapping
    from horizon_broker.client import connect
    from horizon_broker.watermark.server import ServerClient
    from tests.processes import RedisProcess

    workdir = Path(tempfile.mkdtemp(prefix="horizon-bench-point-"))
    redis = RedisProcess().start()
    spark = create_spark_session(app_name="horizon-bench-point-query")
    server = None
    results: dict[str, Any] = {"keys": keys, "versions_per_key": len(VERSIONS)}
    try:
        server_client = ServerClient(redis.url, "bench-server")
        server_client.register()
        tables = {}
        for layout in LAYOUTS:
            for count in SEGMENT_COUNTS:
                table = f"point_{layout}_{count}"
                paths = write_layout(workdir / table, layout, keys, count, seed=count)
                publish(server_client, table, paths, str(workdir), keys * len(VERSIONS))
                tables[table] = (layout, count)
        server_client.start_heartbeats(1.0)
        config = config_from_mapping(
            {
                "server": {"listen": "127.0.0.1:0"},
                "state": {"redis_url": redis.url},
                "reads": {"cache": False},
                "metrics": {"listen": "127.0.0.1:0"},
                "console": {"listen": "127.0.0.1:0"},
                "flight": {"listen": "127.0.0.1:0"},
            }
        )
        server = BrokerServer(config, spark=spark).start()
        with connect(server.target) as client:
            for table, (layout, count) in tables.items():
                results.setdefault(layout, {})[str(count)] = measure(
                    client, table, keys, iterations, seed=7
                )
        server_client.close()
    finally:
        if server is not None:
            server.stop(0)
            server.follower.stop()
        spark.stop()
        redis.close()
        shutil.rmtree(workdir, ignore_errors=True)

    rows = []
    for layout in LAYOUTS:
        for count in SEGMENT_COUNTS:
            found = results[layout][str(count)]
            rows.append(
                [
                    layout,
                    count,
                    f"{found['end_to_end_ms']['p50']:.2f}",
                    f"{found['end_to_end_ms']['p99']:.2f}",
                    f"{found['rewrite_views_ms']['p50']:.2f}",
                    found["route"][:40],
                ]
            )
    for layout in LAYOUTS:
        low = results[layout][str(SEGMENT_COUNTS[0])]["end_to_end_ms"]["p50"]
        high = results[layout][str(SEGMENT_COUNTS[-1])]["end_to_end_ms"]["p50"]
        results[layout]["p50_1000_over_10"] = round(high / low, 2)
    print_table(
        f"point query by key through gRPC, {keys:,} keys x {len(VERSIONS)} versions "
        "(target p50 <= 10 ms, p99 <= 25 ms)",
        ["layout", "segments", "p50 ms", "p99 ms", "rewrite+views p50 ms", "route"],
        rows,
    )
    for layout in LAYOUTS:
        print(f"{layout}: p50 at 1,000 segments / at 10 = {results[layout]['p50_1000_over_10']}")
    path = write_results("point_query", results)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
