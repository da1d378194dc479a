"""TPC-H through Horizon against the same Spark on plain Parquet tables of the final state.

The eight tables at ``--scale`` (0.01 by default) come from :mod:`bench.tpch_data`; each is
ingested by ingestion's own job (:class:`~horizon_broker.ingest.job.IngestJob`, what
``horizon ingest`` runs) in three upsert batches (wrong values then corrections, ghost rows then
deletes, deletes then re-inserts, late rows), so versions, closed intervals and overshadowed
files exist. A broker (result cache off) then answers the 22 queries of
:mod:`bench.tpch_queries`; a second session of the same Spark application reads plain Parquet
tables of the final state. Per query, warm and alternating round by round: the two medians,
their ratio, Horizon's time outside Spark (end to end minus the trailer's Spark time) and the
two physical plans side by side (``bench/results/tpch_plans_<phase>.md``, :mod:`bench.tpch_plans`).
Every answer of either side is checked against DuckDB's first (:mod:`bench.tpch_answers`): a
mismatch stops the run. All of it before and after one compaction of every table, each phase
ending with every query at the snapshot of the first round of batches by ``VERSION AS OF`` and
``TIMESTAMP AS OF``, checked against DuckDB on those batches (:mod:`bench.tpch_history`).

Run: ``python -m bench.tpch [--scale 0.01] [--queries 3,17,21] [--rounds 5] [--quick]``.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.report import RESULTS_DIR, print_table, write_results
from bench.tpch_answers import check, reference_answers, rows_of
from bench.tpch_data import DELETED, KEYS, SEQUENCE, batches, generate
from bench.tpch_history import check_time_travel
from bench.tpch_plans import differences, side_by_side, summarize
from bench.tpch_queries import QUERIES, parse_numbers

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

PARTITIONS = {"lineitem": 4, "orders": 4, "partsupp": 2, "part": 2, "customer": 2}
"""Key partitions (and plain files) per table; the others have one."""
SPARK_TYPES = {"int64": "bigint", "int32": "int", "string": "string", "date32[day]": "date",
               "decimal128(15, 2)": "decimal(15,2)", "bool": "boolean"}  # fmt: skip


def definition(name: str, schema: Any, root: Path) -> Any:
    """The ingestion table of one TPC-H table: its key, the batch as comparison, deletes."""
    from horizon_broker.ingest.table import TableDefinition

    return TableDefinition.from_dict(
        {
            "name": name,
            "columns": {field.name: SPARK_TYPES[str(field.type)] for field in schema},
            "primary_key": list(KEYS[name]),
            "comparison": [SEQUENCE],
            "delete_column": DELETED,
            "key_partitions": PARTITIONS.get(name, 1),
            "storage_root": str(root),
        }
    )


def ingest(spark: Any, server: Any, tables: dict[str, Any], work: Path) -> dict[str, Any]:
    """Every table through its ingestion job, round by round (every table's first batch, then
    every table's second, then third): the seconds per table, the snapshot tokens of the last
    commits (a query sent with them reads the final state), the first batches and the snapshot
    of the first round's last commit (which holds exactly them: :mod:`bench.tpch_history`)."""
    import pyarrow.parquet as pq

    from horizon_broker.ingest.job import IngestJob

    changes = {name: batches(name, final) for name, final in tables.items()}
    definitions = {
        name: definition(name, batched[0].schema, work / "horizon")
        for name, batched in changes.items()
    }
    jobs = {name: IngestJob(spark, table, server).start() for name, table in definitions.items()}
    server.start_heartbeats(1.0)  # registered by the jobs' start
    seconds = dict.fromkeys(tables, 0.0)
    first_round = 0
    for number in range(3):
        for name, job in jobs.items():
            started = time.perf_counter()
            path = work / "batches" / f"{name}-{number + 1}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(changes[name][number], path)
            result = job.run_batch(spark.read.parquet(str(path)))
            if number == len(changes[name]) - 1:
                job.flush_updates()
            if number == 0:
                first_round = max(first_round, result.high)
            seconds[name] += time.perf_counter() - started
    tokens = [job.last_result.token for job in jobs.values() if job.last_result is not None]
    return {
        "seconds": {name: round(value, 2) for name, value in seconds.items()},
        "tokens": [token for token in tokens if token],
        "definitions": definitions,
        "first_batches": {name: batched[0] for name, batched in changes.items()},
        "first_round_snapshot": first_round,
    }


def plain_session(spark: Any, tables: dict[str, Any], work: Path) -> Any:
    """A second session of the same Spark application with each table's final state as plain
    Parquet (hash-partitioned by key into as many files as Horizon has key partitions)."""
    import pyarrow.parquet as pq

    session = spark.newSession()
    for name, final in tables.items():
        source = work / "final" / f"{name}.parquet"
        source.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(final, source)
        target = work / "plain" / name
        spark.read.parquet(str(source)).repartition(PARTITIONS.get(name, 1), *KEYS[name]).write.parquet(str(target))  # fmt: skip
        # The files by name, as Horizon's views list theirs (the plans then count files alike).
        files = sorted(str(path) for path in target.glob("part-*.parquet"))
        session.read.parquet(*files).createOrReplaceTempView(name)
    return session


def start_broker(redis_url: str, spark: Any) -> Any:
    """A broker on loopback without result cache or Flight."""
    from horizon_broker.broker.api.server import BrokerServer
    from horizon_broker.broker.config import config_from_mapping

    config = config_from_mapping(
        {
            "server": {"listen": "127.0.0.1:0"},
            "state": {"redis_url": redis_url},
            "reads": {"cache": False},
            "flight": {"enabled": False},
        }
    )
    return BrokerServer(config, spark=spark).start()


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples), 1)


def check_both(number: int, client: Any, plain: Any, expected: list[Any], token: Any) -> Any:
    """Query ``number`` on both sides, each answer checked against DuckDB's; Horizon's result."""
    sql = QUERIES[number]
    answer = client.execute(sql, cache=False, min_snapshot=token)
    check(number, "Horizon", rows_of(answer.table), expected)
    check(number, "plain Spark", rows_of(plain.sql(sql).toArrow()), expected)
    return answer


def measure_query(
    number: int, client: Any, plain: Any, expected: list[Any], rounds: int, token: Any
) -> dict[str, Any]:
    """One query: both answers checked, then ``rounds`` alternating timed runs of each."""
    sql = QUERIES[number]
    answer = check_both(number, client, plain, expected, token)
    horizon: list[float] = []
    outside: list[float] = []
    plain_ms: list[float] = []
    for index in range(rounds):
        for side in ("horizon", "plain") if index % 2 == 0 else ("plain", "horizon"):
            started = time.perf_counter()
            if side == "horizon":
                result = client.execute(sql, cache=False, min_snapshot=token)
                elapsed = (time.perf_counter() - started) * 1000
                horizon.append(elapsed)
                outside.append(elapsed - result.trailer.timings.spark_ms)
            else:
                plain.sql(sql).toArrow()
                plain_ms.append((time.perf_counter() - started) * 1000)
    figures = {
        "horizon_ms": _median_ms(horizon),
        "plain_ms": _median_ms(plain_ms),
        "outside_spark_ms": _median_ms(outside),
        "rows": answer.table.num_rows,
    }
    figures["ratio"] = round(figures["horizon_ms"] / figures["plain_ms"], 3)
    return figures


def plans(number: int, client: Any, plain: Any, token: Any) -> tuple[str, str]:
    """Spark's physical plans of query ``number``: through the broker, and on plain tables."""
    sql = QUERIES[number]
    ours = client.explain(sql, include_spark_plan=True, min_snapshot=token).spark_plan
    theirs = str(plain.sql(sql)._jdf.queryExecution().executedPlan().toString())
    return ours, theirs


def measure(
    client: Any, plain: Any, numbers: list[int], expected: dict[int, Any], rounds: int,
    token: Any, phase: str, plans_dir: Path,
) -> dict[str, Any]:  # fmt: skip
    """Every chosen query measured, its plans written to ``tpch_plans_<phase>.md``."""
    per_query: dict[str, Any] = {}
    sections = [f"# TPC-H plans, {phase}: Horizon and plain Spark side by side\n"]
    for number in numbers:  # a warm-up pass over every query first (JIT, views, footers)
        check_both(number, client, plain, expected[number], token)
    for number in numbers:
        figures = measure_query(number, client, plain, expected[number], rounds, token)
        horizon_plan, plain_plan = plans(number, client, plain, token)
        figures["plans_differ_in"] = differences(summarize(horizon_plan), summarize(plain_plan))
        figures["horizon_plan"] = summarize(horizon_plan).rows()
        figures["plain_plan"] = summarize(plain_plan).rows()
        per_query[f"Q{number:02d}"] = figures
        sections.append(side_by_side(number, figures, horizon_plan, plain_plan))
        print(f"  Q{number:02d}: {figures['horizon_ms']:.0f} ms vs {figures['plain_ms']:.0f} ms "
              f"({figures['ratio']:.2f}x); plans differ in {figures['plans_differ_in']}", flush=True)  # fmt: skip
    plans_dir.mkdir(parents=True, exist_ok=True)
    (plans_dir / f"tpch_plans_{phase}.md").write_text("\n".join(sections))
    return {"queries": per_query, **totals(per_query)}


def totals(per_query: dict[str, Any]) -> dict[str, Any]:
    """The total of the medians on each side, the geometric mean of the ratios, the worst three."""
    ratios = [figures["ratio"] for figures in per_query.values()]
    worst = sorted(per_query, key=lambda name: per_query[name]["ratio"], reverse=True)[:3]
    horizon = sum(figures["horizon_ms"] for figures in per_query.values())
    plain = sum(figures["plain_ms"] for figures in per_query.values())
    return {
        "total_horizon_ms": round(horizon, 1),
        "total_plain_ms": round(plain, 1),
        "total_ratio": round(horizon / plain, 3),
        "geomean_ratio": round(math.exp(statistics.fmean(math.log(r) for r in ratios)), 3),
        "worst": [
            {
                "query": name,
                "ratio": per_query[name]["ratio"],
                "why": per_query[name]["plans_differ_in"],
            }
            for name in worst
        ],
    }


def compact(spark: Any, redis_url: str, definitions: dict[str, Any], follower: Any) -> dict[str, Any]:  # fmt: skip
    """One compaction of every table, published and shown by the broker's follower."""
    from horizon_broker.compaction.plan import CompactionSettings
    from horizon_broker.compaction.run import Compactor
    from horizon_broker.watermark.server import ServerClient

    client = ServerClient(redis_url, "bench-tpch-compactor")
    outcomes = {}
    try:
        for name, table in definitions.items():
            settings = CompactionSettings(target_rows=10**9, target_bytes=4 * 1024**3)
            compactor = Compactor(spark, table, client, settings=settings, lease_s=120.0)
            report = compactor.compact(compactor.plan())
            outcomes[name] = f"{report.outcome}: {len(report.inputs)} -> {len(report.outputs)}"
            if report.outcome == "revoked":
                raise SystemExit(f"the compaction of {name} was revoked: {report.message}")
            outputs = {segment.id for segment in report.outputs}
            shown = follower.wait_for(
                lambda f, n=name, o=outputs: o <= {s.id for s in f.view(n).visible_segments}, 60
            )
            if not shown:
                raise SystemExit(f"the follower never showed {name}'s compacted segments")
    finally:
        client.close()
    print(f"compacted: {outcomes}", flush=True)
    return outcomes


def run(
    scale: float,
    numbers: list[int],
    rounds: int,
    compaction: bool,
    *,
    spark: Any = None,
    redis_url: str | None = None,
    plans_dir: Path = RESULTS_DIR,
) -> dict[str, Any]:
    """The whole benchmark; a test passes its own Spark session and Redis (kept running) and
    a directory of its own for the plans."""
    from horizon_broker.client import connect
    from horizon_broker.watermark.server import ServerClient

    with _services(spark, redis_url) as (spark, redis_url):
        work = Path(tempfile.mkdtemp(prefix="horizon-bench-tpch-"))
        server = ServerClient(redis_url, f"bench-tpch-ingest-{os.getpid()}-{time.monotonic_ns()}")
        broker = None
        results: dict[str, Any] = {"scale": scale, "rounds": rounds}
        try:
            tables = generate(scale)
            results["rows"] = {name: table.num_rows for name, table in tables.items()}
            expected = reference_answers(tables, {number: QUERIES[number] for number in numbers})
            plain = plain_session(spark, tables, work)
            ingested = ingest(spark, server, tables, work)
            results["ingest_seconds"] = ingested["seconds"]
            print(f"ingested in {sum(ingested['seconds'].values()):.0f} s: {ingested['seconds']}")
            broker = start_broker(redis_url, spark)
            token = ingested["tokens"]
            with connect(broker.target) as client:
                phases = [("before", None)] + ([("after", ingested)] if compaction else [])
                for phase, compact_first in phases:
                    if compact_first is not None:
                        results["compaction"] = compact(
                            spark, redis_url, compact_first["definitions"], broker.follower
                        )
                    results[phase] = measure(
                        client, plain, numbers, expected, rounds, token, phase, plans_dir
                    )
                    results[phase]["time_travel_rows"] = check_time_travel(
                        client,
                        numbers,
                        ingested["first_batches"],
                        ingested["first_round_snapshot"],
                    )
        finally:
            if broker is not None:
                broker.stop(0)
                broker.follower.stop()
            server.close()
            shutil.rmtree(work, ignore_errors=True)
    return results


@contextmanager
def _services(spark: Any, redis_url: str | None) -> Iterator[tuple[Any, str]]:
    """The Spark session and Redis to use: the given ones, or ones of its own (then stopped)."""
    from horizon_broker._core.spark_session import create_spark_session
    from tests.processes import RedisProcess

    redis = RedisProcess().start() if redis_url is None else None
    own_spark = spark is None
    if own_spark:
        # Plans print their file lists and filters whole (Spark cuts them at 100 characters).
        spark = create_spark_session(
            master="local[2]",
            app_name="bench-tpch",
            conf={"spark.sql.maxMetadataStringLength": "4000"},
        )
    try:
        yield spark, redis.url if redis is not None else str(redis_url)
    finally:
        if own_spark:
            spark.stop()
        if redis is not None:
            redis.close()


def report(results: dict[str, Any]) -> None:
    for phase in ("before", "after"):
        if phase not in results:
            continue
        figures = results[phase]
        print_table(
            f"TPC-H at scale {results['scale']}, {phase} compaction: Horizon / plain Spark",
            ["query", "Horizon ms", "plain ms", "ratio", "outside Spark ms", "plans differ in"],
            [
                (
                    name,
                    q["horizon_ms"],
                    q["plain_ms"],
                    f"{q['ratio']:.2f}x",
                    q["outside_spark_ms"],
                    ", ".join(q["plans_differ_in"]) or "-",
                )
                for name, q in figures["queries"].items()
            ],
        )
        print(
            f"{phase} compaction: total {figures['total_horizon_ms'] / 1000:.2f} s vs "
            f"{figures['total_plain_ms'] / 1000:.2f} s ({figures['total_ratio']:.2f}x), "
            f"geometric mean {figures['geomean_ratio']:.2f}x; worst: "
            + "; ".join(
                f"{w['query']} {w['ratio']:.2f}x (plans differ in {', '.join(w['why']) or 'nothing'})"
                for w in figures["worst"]
            )
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.01, help="TPC-H scale factor")
    parser.add_argument("--queries", help="comma-separated query numbers (default: all 22)")
    parser.add_argument("--rounds", type=int, help="timed runs of each side per query (5)")
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    parser.add_argument("--no-compaction", action="store_true", help="skip the second phase")
    args = parser.parse_args(argv)
    try:
        numbers = parse_numbers(args.queries)
    except ValueError as error:
        parser.error(str(error))
    rounds = args.rounds or (3 if args.quick else 5)
    results = run(args.scale, numbers, rounds, compaction=not args.no_compaction)
    report(results)
    print(f"results: {write_results('tpch', results)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
