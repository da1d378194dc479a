"""Where Horizon's time goes at scale factor 0.01, side by side in one run (diagnosis only).

One ingestion (bench.tpch's, three upsert batches per table), one broker, then per query and
round, in a shuffled order: H (through the broker), F (a plain session reading the very files
Horizon's views read, by file list), P (plain tables) and P2 (plain again: the A/A control);
for each ``--variant KEY=VALUE[,KEY=VALUE]``: H', F', P' with those settings (H' sets them on the
broker's session for its run and puts the old values back). H/F is the broker's own cost
(gRPC, rewrite, Arrow), F/P the cost of Horizon's files (count, layout, extra columns).
Optionally compacts and repeats (``--after``).

Run: flock /tmp/horizon-spark.lock .venv/bin/python bench/runs/2026-11-29-tpch-gaps/probe.py
     --queries 6,7,8 --rounds 15 --variant spark.sql.files.minPartitionNum=1
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.tpch import _services, compact, ingest, plain_session, start_broker
from bench.tpch_data import generate
from bench.tpch_queries import QUERIES, parse_numbers, tables_read


def files_session(spark: Any, broker: Any, names: set[str], conf: dict[str, str]) -> Any:
    from horizon_broker.broker.spark.scan_layout import scan_layout
    from horizon_broker.broker.spark.views import schema_ddl

    session = spark.newSession()
    for key, value in conf.items():
        session.conf.set(key, value)
    for name in names:
        view = broker.follower.view(name)
        layout = scan_layout(view)
        kinds = [part.kind for part in layout.parts if part.kind != "closed"]
        if kinds not in (["open"], ["rest"]):
            raise SystemExit(f"{name}: layout {kinds}, not one open part")
        part = next(part for part in layout.parts if part.kind != "closed")
        ddl = schema_ddl(view.descriptor)
        session.read.schema(ddl).parquet(*part.files).createOrReplaceTempView(name)
    return session


class Rewritten:
    """The broker's rewritten text of each query run straight on the broker's session (R): R/F
    is the cost of the rewritten SQL's shape, H/R the broker's path around Spark."""

    def __init__(self, spark: Any, client: Any, numbers: list[int], token: Any) -> None:
        self.spark = spark
        self.texts = {
            QUERIES[n]: client.explain(QUERIES[n], min_snapshot=token).rewritten_sql
            for n in numbers
        }

    def sql(self, text: str) -> Any:
        return self.spark.sql(self.texts[text])


def plain_copy(plain: Any, names: set[str], conf: dict[str, str]) -> Any:
    session = plain.newSession()
    for key, value in conf.items():
        session.conf.set(key, value)
    for name in names:
        files = plain.table(name).inputFiles()
        session.read.parquet(*sorted(files)).createOrReplaceTempView(name)
    return session


TIMINGS: list[Any] = []
"""The broker's own timings of each H run of the current query."""


def run_side(side: str, sql: str, client: Any, sessions: dict[str, Any], spark: Any,
             variants: list[dict[str, str]], token: Any) -> float:  # fmt: skip
    started = time.perf_counter()
    if side.startswith("H"):
        conf = variants[int(side[1:]) - 1] if len(side) > 1 else {}
        old = {key: spark.conf.get(key, None) for key in conf}
        for key, value in conf.items():
            spark.conf.set(key, value)
        started = time.perf_counter()
        try:
            result = client.execute(sql, cache=False, min_snapshot=token)
            if side == "H":
                TIMINGS.append(result.trailer.timings)
        finally:
            elapsed = (time.perf_counter() - started) * 1000
            for key, value in old.items():
                if value is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, value)
        return elapsed
    sessions[side].sql(sql).toArrow()
    return (time.perf_counter() - started) * 1000


def plan_ms(session: Any, sql: str) -> float:
    """Parse, analysis, optimization and physical planning of ``sql`` (no job), in ms."""
    started = time.perf_counter()
    session.sql(sql)._jdf.queryExecution().executedPlan()
    return (time.perf_counter() - started) * 1000


def measure(numbers: list[int], rounds: int, client: Any, sessions: dict[str, Any], spark: Any,
            variants: list[dict[str, str]], token: Any, label: str) -> None:  # fmt: skip
    sides = ["H", *sessions] + [f"H{i + 1}" for i in range(len(variants))]
    rng = random.Random(49)
    totals = dict.fromkeys(sides, 0.0)
    logs: dict[str, list[float]] = {side: [] for side in sides}
    print(f"## {label}: medians of {rounds} shuffled rounds, ms; ratios to P", flush=True)
    print("query " + " ".join(f"{s:>7}" for s in sides), flush=True)
    for number in numbers:
        sql = QUERIES[number]
        samples: dict[str, list[float]] = {side: [] for side in sides}
        for side in sides:  # warm-up
            run_side(side, sql, client, sessions, spark, variants, token)
        for _ in range(rounds):
            order = sides[:]
            rng.shuffle(order)
            for side in order:
                samples[side].append(run_side(side, sql, client, sessions, spark, variants, token))
        medians = {side: statistics.median(values) for side, values in samples.items()}
        planning = {
            side: statistics.median(plan_ms(sessions[side], sql) for _ in range(5))
            for side in ("R", "F", "P")
            if side in sessions
        }
        parts = ("queued_ms", "rewrite_ms", "views_ms", "spark_ms", "serialize_ms", "total_ms")
        broker = {part: statistics.median(getattr(t, part) for t in TIMINGS) for part in parts}
        TIMINGS.clear()
        for side in sides:
            totals[side] += medians[side]
            logs[side].append(math.log(medians[side] / medians["P"]))
        print(f"Q{number:02d}  " + " ".join(f"{medians[s]:7.1f}" for s in sides) + "   "
              + " ".join(f"{s}/P {medians[s] / medians['P']:.2f}" for s in sides if s != "P")
              + "   planning ms: " + " ".join(f"{k} {v:.1f}" for k, v in planning.items())
              + "   H broker ms: " + " ".join(f"{k[:-3]} {v:.1f}" for k, v in broker.items()), flush=True)  # fmt: skip
    print("total " + " ".join(f"{totals[s]:7.0f}" for s in sides), flush=True)
    print("ratio to P, total / geomean: " + "; ".join(
        f"{s} {totals[s] / totals['P']:.3f} / {math.exp(statistics.fmean(logs[s])):.3f}" for s in sides), flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=float, default=0.01)
    parser.add_argument("--queries")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--after", action="store_true")
    args = parser.parse_args()
    numbers = parse_numbers(args.queries)
    variants = [dict(item.split("=", 1) for item in text.split(",")) for text in args.variant]
    print(f"variants: {variants}")
    read = tables_read(numbers)
    tables = {name: table for name, table in generate(args.scale).items() if name in read}
    with _services(None, None, {}) as (spark, redis_url):
        from horizon_broker.client import connect
        from horizon_broker.watermark.server import ServerClient

        work = Path(tempfile.mkdtemp(prefix="horizon-tpch-probe-"))
        server = ServerClient(redis_url, "tpch-probe")
        writer = spark.newSession()
        plain = plain_session(spark, tables, work)
        ingested = ingest(writer, server, tables, work)
        broker = start_broker(redis_url, spark)
        try:
            with connect(broker.target) as client:
                token = ingested["tokens"]
                for number in numbers:
                    client.execute(QUERIES[number], cache=False, min_snapshot=token)
                phases = ["before", "after"] if args.after else ["before"]
                for label in phases:
                    if label == "after":
                        compact(writer, redis_url, ingested["definitions"], broker.follower)
                        for number in numbers:
                            client.execute(QUERIES[number], cache=False, min_snapshot=token)
                    sessions: dict[str, Any] = {
                        "F": files_session(spark, broker, set(tables), {}),
                        "R": Rewritten(spark, client, numbers, token),
                        "P": plain,
                        "P2": plain_copy(plain, set(tables), {}),
                    }
                    for index, conf in enumerate(variants):
                        sessions[f"F{index + 1}"] = files_session(spark, broker, set(tables), conf)
                        sessions[f"P{index + 3}"] = plain_copy(plain, set(tables), conf)
                    measure(numbers, args.rounds, client, sessions, spark, variants, token, label)
        finally:
            broker.stop(0)
            broker.follower.stop()
            server.close()


if __name__ == "__main__":
    main()
