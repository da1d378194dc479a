"""Subscriptions: how soon a commit reaches a subscriber, and what a snapshot's delta costs.

For each table size (``--sizes``, default a small run; the issue's figures are at 1M and 5M
rows) one table of that many keys is ingested by real :class:`horizon_broker.ingest.job.IngestJob`
batches (one version per key, the updater after every batch so each commit moves the LWM), and
one broker (the same Spark session, result cache off) serves it. Three standing queries are
followed, each once with an incremental strategy and once with ``exact_diff`` (the query run
again at every snapshot), one after the other so they do not share the two cores:

* ``filter``: ``SELECT id, region, amount, seq FROM accounts WHERE seq > 0`` (``change_feed``:
  the keys updated so far, so every batch changes the answer, which stays small; the re-run
  skips the loaded row groups by their ``seq`` statistics),
* ``wide_filter``: the same columns ``WHERE amount < 1000`` (``change_feed``: a tenth of the
  table, so the re-run reads every row group and the answer is large),
* ``aggregate``: ``SELECT region, count(*), sum(amount) FROM accounts GROUP BY region``
  (``changed_groups``).

While a subscription is open, ``--commits`` batches each update ``--keys`` random keys; after
each the benchmark waits for the delta that brings the subscriber to the batch's snapshot, so
every delta covers one snapshot. Per batch it records the time from the commit (``run_batch``
returned: the batch is announced and reported) to the delta at the subscriber, and from the
moment the broker's follower saw the LWM reach the batch's snapshot to that delta: the
strategy's cost per snapshot plus the hand-over. Every delta applied to the first result is
checked against the query at the delta's snapshot at the end.

Before the measured subscriptions, each of them is followed for ``--warmup`` commits on the same
broker (excluded from the figures, and the output says so): the first subscriptions of a fresh
broker paid the JVM's and the view cache's warm-up. Per commit, a second table says where the
delta's time went (:mod:`bench.subscribe_profile`): the queries the subscription ran between
the batch and its delta (and how many gave no rows), and the delta query's admission, rewrite,
views and Spark time, the span of its Spark jobs and the Spark time outside them (analysis,
planning, fetching the result), its jobs, stages and tasks.

Run: ``python -m bench.subscribe [--quick] [--sizes 1000000,5000000] [--commits 20] [--warmup 2]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import queue
import random
import shutil
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.history_table import TABLE, definition, version_columns
from bench.report import print_table, summarize, write_results
from bench.subscribe_profile import QueryProfile, breakdown

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

QUERIES = {
    "filter": (f"SELECT id, region, amount, seq FROM {TABLE} WHERE seq > 0", "change_feed"),
    "wide_filter": (
        f"SELECT id, region, amount, seq FROM {TABLE} WHERE amount < 1000",
        "change_feed",
    ),
    "aggregate": (
        f"SELECT region, count(*) AS n, sum(amount) AS total FROM {TABLE} GROUP BY region",
        "changed_groups",
    ),
}
WAIT_S = 600.0
"""How long a delta may take before the run fails (a hang, not a figure)."""


def base_rows(spark: Any, keys: int) -> Any:
    from pyspark.sql import functions as F

    return spark.range(keys).select(*version_columns(F.col("id"), F.lit(0).cast("long")))


def changed_rows(spark: Any, keys: list[int], version: int) -> Any:
    from pyspark.sql import functions as F

    frame = spark.createDataFrame([(key, version) for key in keys], "k long, v long")
    return frame.select(*version_columns(F.col("k"), F.col("v")))


class Subscriber:
    """A subscription read on a thread, on a connection of its own (closing it ends the
    call): each whole step's (receive time, snapshot)."""

    def __init__(self, target: str, sql: str, strategy: str) -> None:
        from horizon_broker.broker.subscribe.live import LiveResult
        from horizon_broker.client import connect

        self.live = LiveResult()
        self.steps: queue.Queue[tuple[float, int] | BaseException] = queue.Queue()
        self._client = connect(target)
        self._stream = self._client.subscribe(sql, strategy=strategy, timeout=WAIT_S * 10)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for message in self._stream:
                received = time.perf_counter()  # before the subscriber's own work of applying
                if self.live.apply(message):
                    self.steps.put((received, message.to_snapshot))
        except BaseException as error:  # handed to the benchmark
            self.steps.put(error)

    def until(self, snapshot: int) -> float:
        """When the subscriber was brought to ``snapshot`` (or past it)."""
        while True:
            item = self.steps.get(timeout=WAIT_S)
            if isinstance(item, BaseException):
                raise item
            if item[1] >= snapshot:
                return item[0]

    def close(self) -> None:
        self._client.close()


def lwm_seen(follower: Any, snapshot: int) -> float:
    """When the broker's follower saw the table's LWM reach ``snapshot``."""

    def reached(state: Any) -> bool:
        try:
            return bool(state.lwm(TABLE) >= snapshot)
        except Exception:
            return False

    if not follower.wait_for(reached, WAIT_S):
        raise SystemExit(f"the broker never saw the LWM reach {snapshot}")
    return time.perf_counter()


def follow_commits(env: dict[str, Any], sql: str, strategy: str, version: int) -> dict[str, Any]:
    """One subscription while ``commits`` batches land; its latencies, where the delta's time
    went (:mod:`bench.subscribe_profile`) and its check."""
    from horizon_broker.broker.subscribe.snapshot_sql import at_snapshot

    client = env["client"]
    profile = QueryProfile()
    subscriber = Subscriber(env["target"], sql, strategy)
    views = env["views"]
    try:
        subscriber.until(0)  # the first result
        view_sets, file_sets = views.builds, views.file_sets_read
        with profile.profiling(env["engine"]):
            timed = commit_and_follow(env, subscriber, version)
        view_sets, file_sets = views.builds - view_sets, views.file_sets_read - file_sets
        live = subscriber.live
        answer = live.table
        assert answer is not None, "the first result came"
        at = at_snapshot(sql, [TABLE], live.snapshot or 0)
        expected = Counter(tuple(r.values()) for r in client.query(at).to_pylist())
        correct = Counter(tuple(r.values()) for r in answer.to_pylist()) == expected
    finally:
        subscriber.close()
    windows = timed.pop("windows")
    ends = [start for start, _ in windows[1:]] + [time.perf_counter()]
    commits = [(start, end, arrived) for (start, arrived), end in zip(windows, ends, strict=True)]
    return {
        "strategy": live.strategy,
        **{name: summarize(samples) for name, samples in timed.items()},
        "view_sets_per_commit": round(view_sets / env["commits"], 1),
        "file_sets_read_per_commit": round(file_sets / env["commits"], 1),
        "breakdown": breakdown(env["spark"], profile, commits),
        "result_rows": answer.num_rows,
        "correct": correct,
    }


def commit_and_follow(env: dict[str, Any], subscriber: Subscriber, version: int) -> dict[str, Any]:
    """``commits`` batches, each followed to its delta at ``subscriber``: the times (ms) and
    each batch's start and delta's arrival (perf_counter, ``windows``)."""
    from horizon_broker.watermark import tokens

    spark, job, follower = env["spark"], env["job"], env["follower"]
    rng = random.Random(version)
    timed: dict[str, list[Any]] = {
        "commit_to_delta_ms": [], "lwm_to_delta_ms": [], "commit_to_lwm_ms": [], "batch_ms": [],
        "windows": [],
    }  # fmt: skip
    for number in range(env["commits"]):
        keys = rng.sample(range(env["rows"]), env["keys"])
        frame = changed_rows(spark, keys, version + number + 1)
        began = time.perf_counter()
        result = job.run_batch(frame)
        committed = time.perf_counter()
        snapshot = tokens.decode(result.token)[TABLE]
        seen: list[float] = []
        watcher = threading.Thread(
            target=lambda at=snapshot, into=seen: into.append(lwm_seen(follower, at))
        )
        watcher.start()
        arrived = subscriber.until(snapshot)
        watcher.join()
        timed["batch_ms"].append((committed - began) * 1000)
        timed["commit_to_delta_ms"].append((arrived - committed) * 1000)
        timed["lwm_to_delta_ms"].append((arrived - seen[0]) * 1000)
        timed["commit_to_lwm_ms"].append((seen[0] - committed) * 1000)
        timed["windows"].append((began, arrived))
    return timed


def subscriptions() -> list[tuple[str, str]]:
    """Every (query, strategy) the run follows, in order."""
    return [
        (sql, strategy)
        for sql, incremental in QUERIES.values()
        for strategy in (incremental, "exact_diff")
    ]


def run_size(
    spark: Any, redis_url: str, rows: int, commits: int, keys: int, warmup: int = 0
) -> dict[str, Any]:
    from horizon_broker.broker.api.server import BrokerServer
    from horizon_broker.broker.config import config_from_mapping
    from horizon_broker.client import connect
    from horizon_broker.ingest.job import IngestJob
    from horizon_broker.watermark.server import ServerClient

    work = Path(tempfile.mkdtemp(prefix="horizon-bench-subscribe-"))
    server = ServerClient(redis_url, f"bench-subscribe-{rows}")
    server.start_heartbeats(0.5)
    table = dataclasses.replace(definition(work, retention_s=3600), update_cadence=1)
    started = time.perf_counter()
    job = IngestJob(spark, table, server).start()
    job.run_batch(base_rows(spark, rows))
    ingest_s = time.perf_counter() - started
    print(f"  {rows:,} rows ingested in {ingest_s:.1f} s", flush=True)
    config = config_from_mapping(
        {
            "server": {"listen": "127.0.0.1:0"},
            "state": {"redis_url": redis_url},
            "reads": {"cache": False},
            "flight": {"enabled": False},
            "limits": {"query_timeout_s": WAIT_S},
        }
    )
    broker = BrokerServer(config, spark=spark).start()
    assert broker.engine is not None, "a started broker has its engine"
    figures: dict[str, Any] = {"rows": rows, "ingest_s": round(ingest_s, 1), "warmup": warmup}
    try:
        with connect(broker.target) as client:
            env = {
                "spark": spark, "job": job, "client": client, "follower": broker.follower,
                "target": broker.target, "views": broker.engine.views,
                "engine": broker.engine, "rows": rows, "commits": commits, "keys": keys,
            }  # fmt: skip
            version = 0
            if warmup:
                print(
                    f"  {rows:,} rows, warm-up: each subscription below for {warmup} commits, "
                    "excluded from the figures",
                    flush=True,
                )
                for sql, strategy in subscriptions():
                    follow_commits({**env, "commits": warmup}, sql, strategy, version)
                    version += warmup
            for name, (sql, incremental) in QUERIES.items():
                for strategy in (incremental, "exact_diff"):
                    print(
                        f"  {rows:,} rows, {name}, {strategy} "
                        f"(at {time.perf_counter() - started:.0f} s)",
                        flush=True,
                    )
                    try:
                        figures[f"{name}/{strategy}"] = follow_commits(env, sql, strategy, version)
                    except Exception as error:  # a strategy refused: say so, go on
                        figures[f"{name}/{strategy}"] = {"error": str(error)[:300]}
                    version += commits
    finally:
        broker.stop(0)
        server.close()
        shutil.rmtree(work, ignore_errors=True)
    return figures


def cost_ratio(figures: dict[str, Any], name: str, strategy: str) -> str:
    """A strategy's cost per snapshot (LWM -> delta p50) over the exact diff's for the same
    query and table size, measured in the same run ("" for the exact diff itself)."""
    exact = figures.get(f"{name}/exact_diff", {})
    mine = figures.get(f"{name}/{strategy}", {})
    if strategy == "exact_diff" or "lwm_to_delta_ms" not in exact or "lwm_to_delta_ms" not in mine:
        return ""
    return f"{mine['lwm_to_delta_ms']['p50'] / exact['lwm_to_delta_ms']['p50']:.2f}x"


def show(results: dict[str, Any]) -> None:
    lines = []
    for size, figures in results["sizes"].items():
        for label, run in figures.items():
            if not isinstance(run, dict):
                continue
            if "error" in run:
                lines.append((f"{int(size):,}", label, "error", run["error"][:60], *[""] * 5))
                continue
            commit, lwm = run["commit_to_delta_ms"], run["lwm_to_delta_ms"]
            follow = run.get("commit_to_lwm_ms", {"p50": float("nan"), "p99": float("nan")})
            name, strategy = label.split("/")
            lines.append(
                (
                    f"{int(size):,}",
                    label,
                    f"{commit['p50']:.0f} / {commit['p99']:.0f}",
                    f"{follow['p50']:.0f} / {follow['p99']:.0f}",
                    f"{lwm['p50']:.0f} / {lwm['p99']:.0f}",
                    cost_ratio(figures, name, strategy),
                    f"{run.get('view_sets_per_commit', '?')} / "
                    f"{run.get('file_sets_read_per_commit', '?')}",
                    f"{run['result_rows']:,}",
                    "yes" if run["correct"] else "NO",
                )
            )
    columns = [
        "rows", "query/strategy", "commit->delta p50/p99 ms", "commit->LWM p50/p99 ms",
        "LWM->delta p50/p99 ms", "cost vs exact_diff (p50)",
        "view sets / file sets read per commit", "result rows", "exact",
    ]  # fmt: skip
    print_table("bench.subscribe", columns, lines)
    show_breakdown(results)


def show_breakdown(results: dict[str, Any]) -> None:
    """Where each subscription's delta went (medians over its commits)."""
    lines = []
    for size, figures in results["sizes"].items():
        for label, run in figures.items():
            if not isinstance(run, dict) or "breakdown" not in run:
                continue
            split = run["breakdown"]
            ms, spark = split["delta_query_ms_p50"], split["delta_query_spark_p50"]
            lines.append(
                (
                    f"{int(size):,}",
                    label,
                    f"{split['queries_per_commit']:g} / {split['empty_queries_per_commit']:g}",
                    " / ".join(f"{ms[k]:.0f}" for k in ("queued", "rewrite", "views", "spark")),
                    f"{ms['jobs_span']:.0f} / {ms['outside_jobs']:.0f}",
                    " / ".join(f"{spark[k]:g}" for k in ("jobs", "stages", "skipped", "tasks")),
                )
            )
    columns = [
        "rows", "query/strategy", "queries / empty ones per commit",
        "delta query: queued / rewrite / views / spark ms",
        "spark: jobs' span / outside jobs ms", "jobs / stages / skipped / tasks",
    ]  # fmt: skip
    print_table(
        f"where the delta went (p50 of {results['commits']} commits, after "
        f"{results.get('warmup_commits', 0)} warm-up commits each)",
        columns,
        lines,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--sizes", default="200000", help="table sizes in rows, comma-separated")
    parser.add_argument("--commits", type=int, default=20, help="batches per subscription")
    parser.add_argument("--keys", type=int, default=10, help="keys each batch updates")
    parser.add_argument(
        "--warmup",
        type=int,
        default=2,
        help="commits each subscription follows once before the measured ones (excluded)",
    )
    args = parser.parse_args(argv)
    sizes = [20_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    commits = 4 if args.quick else args.commits
    from horizon_broker._core.spark_session import create_spark_session
    from tests.processes import RedisProcess

    spark = create_spark_session(
        master="local[2]", app_name="bench-subscribe", conf={"spark.sql.shuffle.partitions": "4"}
    )
    warmup = 1 if args.quick else args.warmup
    results: dict[str, Any] = {
        "commits": commits, "keys_per_commit": args.keys, "warmup_commits": warmup, "sizes": {},
    }  # fmt: skip
    try:
        for rows in sizes:
            redis = RedisProcess().start()  # a state store per size: one table named accounts
            try:
                results["sizes"][str(rows)] = run_size(
                    spark, redis.url, rows, commits, args.keys, warmup
                )
            finally:
                redis.close()
    finally:
        spark.stop()
    show(results)
    print(f"wrote {write_results('subscribe', results)}")
    failed = [
        f"{size}/{name}"
        for size, figures in results["sizes"].items()
        for name, run in figures.items()
        if isinstance(run, dict) and run.get("correct") is False
    ]
    if failed:
        print(f"deltas that did not give the query's answer: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
