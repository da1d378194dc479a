"""Broker benchmark: point-query latency through gRPC and the broker's own overhead per query.

Writes a table once with Spark (5M rows, or 200k with ``--quick``; sorted by key, small row groups),
publishes it as segments through the server-side Redis client, starts a real broker on loopback,
then measures from the client:

* point query by primary key: end-to-end p50/p99 (target p50 <= 150 ms on local Spark). The
  broker answers it from the segment files with pyarrow (``horizon_broker.broker.direct_lookup.direct_read``); the same
  query through a second broker with ``direct_lookups = false`` (the Spark lookup session) runs
  interleaved with it, so both see the same machine load;
* broker overhead = end-to-end latency minus Spark's own execution (the trailer's ``spark_ms``),
  and separately the rewrite + planning share (``rewrite_ms`` + ``views_ms``);
* the same for a small aggregate;
* the same point query written so it is not recognised as a key lookup (``id = K OR id = K``,
  which Spark simplifies back to ``id = K``): it runs on the default session with whole-stage
  code generation, interleaved with the lookups so both see the same machine load;
* a repeated dashboard query (1,000 rows) answered from the result cache vs run again on Spark
  (``cache=False``), interleaved (target: a hit >= 20x faster than a miss, p50 < 5 ms);
* read-your-writes: a server reports a commit, and a query sent at once with that commit's token
  waits until the broker's follower has it: the time from the report to the answer;
* the point query and a full aggregate through three brokers over the same files: this one on
  local Spark, one on a Spark standalone cluster (a master and two one-core workers on
  loopback) and one over Spark Connect (a Connect server on local[2]), interleaved, as ratios to
  local mode (``--no-modes`` skips it).

    .venv/bin/python -m bench.broker [--quick]
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

TABLE = "bench_accounts"
LWM = 1_000


def write_dataset(spark: Any, directory: Path, rows: int, files: int) -> list[str]:
    """``rows`` keys, one open version each, range-partitioned into ``files`` sorted files."""
    frame = spark.range(rows).selectExpr(
        "id",
        "concat('owner', id) AS owner",
        "id % 1000 AS balance",
        "CAST(500 AS BIGINT) AS validFrom",
        "CAST(NULL AS BIGINT) AS validUntil",
    )
    (
        frame.repartitionByRange(files, "id")
        .sortWithinPartitions("id")
        .write.option("parquet.block.size", 1024 * 1024)
        .mode("overwrite")
        .parquet(str(directory))
    )
    return sorted(str(path) for path in directory.glob("part-*.parquet"))


def publish(redis_url: str, files: list[str], rows: int) -> Any:
    from horizon_broker.timeline.interval import Interval
    from horizon_broker.timeline.segment import Segment
    from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor
    from horizon_broker.watermark.server import ServerClient

    descriptor = TableDescriptor(
        name=TABLE,
        columns=(
            ColumnSpec("id", "bigint"),
            ColumnSpec("owner", "string"),
            ColumnSpec("balance", "bigint"),
        ),
        primary_key=("id",),
        storage_root=os.path.commonpath([os.path.dirname(path) for path in files]),
    )
    client = ServerClient(redis_url, "bench-server")
    client.register()
    client.register_table(descriptor)
    client.announce(
        Segment(
            table=TABLE,
            interval=Interval(0, 86_400_000),
            version="2026-01-01T00:00:00.000Z",
            partition=partition,
            core_partitions=len(files),
            location=(path,),
            row_count=rows // len(files),
        )
        for partition, path in enumerate(files)
    )
    client.report(TABLE, {0: (LWM, LWM)})
    client.start_heartbeats(1.0)
    return client


def measure(
    client: Any, make_sql: Any, iterations: int, samples: dict[str, list[float]] | None = None
) -> dict[str, list[float]]:
    samples = samples or {
        "end_to_end_ms": [],
        "spark_ms": [],
        "overhead_ms": [],
        "rewrite_planning_ms": [],
    }
    for index in range(iterations):
        sql = make_sql(index)
        started = time.perf_counter()
        result = client.execute(sql)
        elapsed = (time.perf_counter() - started) * 1000
        timings = result.trailer.timings
        samples["end_to_end_ms"].append(elapsed)
        samples["spark_ms"].append(timings.spark_ms)
        samples["overhead_ms"].append(elapsed - timings.spark_ms)
        samples["rewrite_planning_ms"].append(timings.rewrite_ms + timings.views_ms)
    return samples


DASHBOARD_SQL = f"SELECT id, owner, balance FROM {TABLE} WHERE id BETWEEN 5000 AND 5999 ORDER BY id"


def cache_hit_vs_miss(client: Any, iterations: int) -> dict[str, Any]:
    """The dashboard query from the cache and on Spark, interleaved; both answers compared."""
    first = client.execute(DASHBOARD_SQL)
    assert first.table.num_rows == 1000, first.table.num_rows
    hits: list[float] = []
    misses: list[float] = []
    for _ in range(iterations):
        started = time.perf_counter()
        miss = client.execute(DASHBOARD_SQL, cache=False)
        misses.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        hit = client.execute(DASHBOARD_SQL)
        hits.append((time.perf_counter() - started) * 1000)
        assert hit.metadata.cache == "hit", hit.metadata.cache
        assert hit.table.equals(miss.table)
    hit_p50, miss_p50 = summarize(hits)["p50"], summarize(misses)["p50"]
    return {
        "rows": 1000,
        "hit_ms": summarize(hits),
        "miss_ms": summarize(misses),
        "miss_over_hit_p50": round(miss_p50 / hit_p50, 1),
        "target": "hit >= 20x faster than a miss, hit p50 < 5 ms",
    }


def read_your_writes(client: Any, server_client: Any, iterations: int) -> dict[str, Any]:
    """From a server's commit report to the answer of a query sent with that commit's token."""
    from horizon_broker.watermark import tokens

    to_answer: list[float] = []
    waited: list[float] = []
    watermark = LWM
    for index in range(iterations):
        watermark += 10
        token = tokens.encode({TABLE: watermark})
        started = time.perf_counter()
        server_client.report(TABLE, {0: (watermark, watermark)})
        result = client.execute(f"SELECT * FROM {TABLE} WHERE id = {index}", min_snapshot=token)
        to_answer.append((time.perf_counter() - started) * 1000)
        waited.append(result.metadata.waited_ms)
        assert result.snapshot is not None and result.snapshot >= watermark
    return {"commit_to_answer_ms": summarize(to_answer), "waited_ms": summarize(waited)}


MODES_AGGREGATE_SQL = f"SELECT count(*) AS n, sum(balance) AS s FROM {TABLE}"


def modes_side_by_side(
    local: Any, redis_url: str, workdir: Path, rows: int, iterations: int
) -> dict[str, Any]:
    """The point query and the full aggregate through the local broker, a broker on a standalone
    cluster and one over Spark Connect, one after another in each round (the cache skipped)."""
    from horizon_broker.broker.spark.local_cluster import (
        BrokerProcess,
        ConnectServer,
        StandaloneCluster,
    )
    from horizon_broker.client import connect

    cluster_conf = (
        '[spark.conf]\n"spark.cores.max" = "2"\n"spark.executor.memory" = "1g"\n'
        '"spark.sql.shuffle.partitions" = "4"\n"spark.driver.host" = "127.0.0.1"\n'
    )
    rng = random.Random(11)
    samples: dict[str, dict[str, list[float]]] = {}
    with (
        StandaloneCluster(workers=2, cores=1, memory="1536m") as cluster,
        ConnectServer(master="local[2]", conf={"spark.sql.shuffle.partitions": "4"}) as server,
        BrokerProcess(
            workdir, redis_url, f'[spark]\nmaster = "{cluster.url}"\n\n{cluster_conf}',
            name="standalone",
        ) as on_cluster,
        BrokerProcess(workdir, redis_url, f'[spark]\nremote = "{server.url}"\n', name="connect")
        as on_connect,
        connect(on_cluster.target) as cluster_client,
        connect(on_connect.target) as connect_client,
    ):  # fmt: skip
        clients = {"local": local, "standalone": cluster_client, "connect": connect_client}
        for client in clients.values():  # warm up each: view build, JIT, executors
            client.query(f"SELECT * FROM {TABLE} WHERE id = 1", cache=False)
            client.query(MODES_AGGREGATE_SQL, cache=False)
        expected = local.query(MODES_AGGREGATE_SQL, cache=False)
        for _ in range(iterations):
            key = rng.randrange(rows)
            for mode, client in clients.items():
                for kind, sql in (
                    ("point", f"SELECT * FROM {TABLE} WHERE id = {key}"),
                    ("aggregate", MODES_AGGREGATE_SQL),
                ):
                    started = time.perf_counter()
                    answer = client.query(sql, cache=False)
                    elapsed = (time.perf_counter() - started) * 1000
                    samples.setdefault(mode, {}).setdefault(kind, []).append(elapsed)
                    if kind == "aggregate":
                        assert answer.equals(expected), (mode, answer)
    results: dict[str, Any] = {"iterations": iterations}
    for mode, kinds in samples.items():
        results[mode] = {kind: summarize(values) for kind, values in kinds.items()}
    for mode in ("standalone", "connect"):
        for kind in ("point", "aggregate"):
            ratio = results[mode][kind]["p50"] / results["local"][kind]["p50"]
            results[mode][f"{kind}_p50_over_local"] = round(ratio, 2)
    return results


def point_queries(
    client: Any, on_spark: Any, rng: random.Random, rows: int, iterations: int
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, list[float]]]:
    """Timings of key lookups answered directly, the same run on Spark, and lookups written so
    that they are not recognised as one (``id = k OR id = k``), interleaved."""
    point: dict[str, list[float]] | None = None
    point_spark: dict[str, list[float]] | None = None
    unrecognised: dict[str, list[float]] | None = None
    for _ in range(iterations):
        key = rng.randrange(rows)
        point = measure(client, lambda _, k=key: f"SELECT * FROM {TABLE} WHERE id = {k}", 1, point)
        point_spark = measure(
            on_spark,
            lambda _, k=key: f"SELECT * FROM {TABLE} WHERE id = {k}",
            1,
            point_spark,
        )
        unrecognised = measure(
            client,
            lambda _: f"SELECT * FROM {TABLE} WHERE id = {(k := rng.randrange(rows))} OR id = {k}",
            1,
            unrecognised,
        )
    assert point is not None and point_spark is not None and unrecognised is not None
    return point, point_spark, unrecognised


def _print_tables(
    rows: int,
    files: int,
    latencies: tuple[tuple[str, dict[str, list[float]]], ...],
    cache: dict[str, Any],
    ryw: dict[str, Any],
    modes: dict[str, Any] | None,
) -> None:
    """The run's tables: latencies by query, the read controls, the Spark modes if measured."""
    table_rows = []
    for label, samples in latencies:
        for name, values in samples.items():
            stats = summarize(values)
            table_rows.append(
                (label, name, f"{stats['p50']:.1f}", f"{stats['p99']:.1f}", f"{stats['mean']:.1f}")
            )
    print_table(
        f"Broker latency through gRPC ({rows:,} rows, {files} files, local Spark)",
        ("query", "measure", "p50 ms", "p99 ms", "mean ms"),
        table_rows,
    )
    print_table(
        "Read controls",
        ("measure", "p50 ms", "p99 ms"),
        [
            (
                "dashboard query (1,000 rows), cache hit",
                f"{cache['hit_ms']['p50']:.2f}",
                f"{cache['hit_ms']['p99']:.2f}",
            ),
            (
                "same, run on Spark (miss)",
                f"{cache['miss_ms']['p50']:.1f}",
                f"{cache['miss_ms']['p99']:.1f}",
            ),
            (
                "read-your-writes: commit report to answer",
                f"{ryw['commit_to_answer_ms']['p50']:.1f}",
                f"{ryw['commit_to_answer_ms']['p99']:.1f}",
            ),
            (
                "  of which waiting for the LWM",
                f"{ryw['waited_ms']['p50']:.1f}",
                f"{ryw['waited_ms']['p99']:.1f}",
            ),
        ],
    )
    if modes is not None:
        print_table(
            f"The same broker on three kinds of Spark ({modes['iterations']} interleaved rounds)",
            ("mode", "point p50 ms", "vs local", "full aggregate p50 ms", "vs local"),
            [
                (
                    mode,
                    f"{modes[mode]['point']['p50']:.1f}",
                    f"{modes[mode].get('point_p50_over_local', 1.0)}x",
                    f"{modes[mode]['aggregate']['p50']:.1f}",
                    f"{modes[mode].get('aggregate_p50_over_local', 1.0)}x",
                )
                for mode in ("local", "standalone", "connect")
            ],
        )
    print(
        f"cache: a hit is {cache['miss_over_hit_p50']}x faster than a miss at p50 "
        "(target >= 20x, hit p50 < 5 ms)"
    )


def _stop_all(brokers: tuple[Any, ...], spark: Any, redis: Any, workdir: Path) -> None:
    for broker in brokers:
        if broker is not None:
            broker.stop(0)
            broker.follower.stop()
    spark.stop()
    redis.close()
    shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="200k rows, fewer iterations")
    parser.add_argument(
        "--no-modes", action="store_true", help="skip the standalone cluster / Connect comparison"
    )
    args = parser.parse_args(argv)
    rows = 200_000 if args.quick else 5_000_000
    files = 4 if args.quick else 8
    iterations = 40 if args.quick else 200

    from horizon_broker._core.spark_session import create_spark_session
    from horizon_broker.broker.api.server import BrokerServer
    from horizon_broker.broker.config import config_from_mapping
    from horizon_broker.client import connect
    from tests.processes import RedisProcess

    workdir = Path(tempfile.mkdtemp(prefix="horizon-bench-broker-"))
    redis = RedisProcess().start()
    spark = create_spark_session(app_name="horizon-bench-broker")
    server = spark_server = None
    try:
        written = time.perf_counter()
        paths = write_dataset(spark, workdir / TABLE, rows, files)
        write_s = time.perf_counter() - written
        server_client = publish(redis.url, paths, rows)
        config = config_from_mapping(
            {"server": {"listen": "127.0.0.1:0"}, "state": {"redis_url": redis.url}}
        )
        server = BrokerServer(config, spark=spark).start()
        spark_config = config_from_mapping(
            {
                "server": {"listen": "127.0.0.1:0"},
                "state": {"redis_url": redis.url},
                "spark": {"direct_lookups": False},
            }
        )
        spark_server = BrokerServer(spark_config, spark=spark, view_namespace="spark_").start()
        rng = random.Random(7)
        with connect(server.target) as client, connect(spark_server.target) as on_spark:
            for _ in range(10):  # warm up: JIT, view build, code generation caches
                key = rng.randrange(rows)
                client.query(f"SELECT * FROM {TABLE} WHERE id = {key}")
                on_spark.query(f"SELECT * FROM {TABLE} WHERE id = {key}")
            direct_before = server.engine.direct_answers
            point, point_spark, unrecognised = point_queries(
                client, on_spark, rng, rows, iterations
            )
            direct_answers = server.engine.direct_answers - direct_before
            aggregate = measure(
                client,
                lambda _: (
                    f"SELECT count(*) AS n, sum(balance) AS s FROM {TABLE} "
                    f"WHERE id BETWEEN {(start := rng.randrange(rows - 1000))} AND {start + 999}"
                ),
                iterations // 2,
            )
            check = client.query(f"SELECT * FROM {TABLE} WHERE id = 12345")
            assert check.to_pylist() and check.to_pylist()[0]["owner"] == "owner12345", check
            assert check == on_spark.query(f"SELECT * FROM {TABLE} WHERE id = 12345")
            cache = cache_hit_vs_miss(client, iterations // 2)
            modes = (
                None
                if args.no_modes
                else modes_side_by_side(client, redis.url, workdir, rows, max(5, iterations // 10))
            )
            # Last: it moves the LWM (a new snapshot per commit).
            ryw = read_your_writes(client, server_client, iterations // 2)
        server_client.close()
    finally:
        _stop_all((server, spark_server), spark, redis, workdir)

    results: dict[str, Any] = {
        "rows": rows,
        "files": files,
        "iterations": iterations,
        "dataset_write_s": round(write_s, 2),
        "point_query": {name: summarize(values) for name, values in point.items()},
        "point_query_direct_answers": direct_answers,
        "point_query_on_spark": {name: summarize(values) for name, values in point_spark.items()},
        "point_query_not_as_lookup": {
            name: summarize(values) for name, values in unrecognised.items()
        },
        "range_aggregate_1k": {name: summarize(values) for name, values in aggregate.items()},
        "target_point_p50_ms": 150,
        "dashboard_cache": cache,
        "read_your_writes": ryw,
        "modes": modes,
    }
    _print_tables(
        rows,
        files,
        (
            ("point query by key", point),
            ("same, on Spark", point_spark),
            ("same, not as lookup", unrecognised),
            ("1k-key aggregate", aggregate),
        ),
        cache,
        ryw,
        modes,
    )
    path = write_results("broker", results)
    p50 = results["point_query"]["end_to_end_ms"]["p50"]
    spark_p50 = results["point_query_on_spark"]["end_to_end_ms"]["p50"]
    print(
        f"point query p50 {p50:.1f} ms, {direct_answers}/{iterations} answered from the files "
        f"(target <= 150 ms; the same on Spark {spark_p50:.1f} ms); results in {path}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
