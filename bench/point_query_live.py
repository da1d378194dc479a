"""Point queries on the layout ingestion really writes, while ingestion keeps running.

``bench.point_query`` varies the number of segments on files written by hand at a fixed LWM. This
benchmark asks the question a user asks: how fast is a lookup by key on a table that real
ingestion batches built, while more batches arrive (the LWM moves, the timeline changes, the
updater rewrites segments), before and after compaction?

1. **history**: the ``accounts`` table of ``bench.compaction`` (4 days, 4 key partitions, 3
   versions per key in an order unrelated to the key) written by :class:`horizon_broker.ingest.job.IngestJob`
   in ``--batches`` batches (50): about 800 small segments, every key's versions in different
   batches.
2. **lookups with ingestion running**: one broker (embedded Spark, direct lookups on, result
   cache off, its start-up heap frozen as ``horizon serve`` does: :mod:`horizon_broker._core.heap`) answers
   ``SELECT ... WHERE id = k`` for random even keys through gRPC, one client (a process of its own),
   first with ingestion idle, then while the ingestion process keeps committing small batches that update odd keys (so the LWM and
   the timeline move and the updater rewrites segments the looked-up keys live in, without
   changing their answers). Every answer is checked against the key's newest version.
3. the same after one minor compaction of the whole table (the live batches pause while it
   runs, then go on).

The ingestion server is a process of its own (its own Spark) sharing the two cores with the
broker, as a server beside the broker on a small machine would. Run: ``python -m bench.point_query_live [--quick]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import multiprocessing
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.history_table import (
    TABLE,
    VERSIONS_PER_KEY,
    compact_whole_table,
    definition,
    rows_of,
    version_columns,
)
from bench.report import print_table, summarize, write_results

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

LOOKUP_SQL = f"SELECT id, region, amount, seq FROM {TABLE} WHERE id = {{key}}"
LIVE_BATCH_KEYS = 2_000
"""Odd keys each live batch updates."""
SETTLE_S = 10.0
"""Wait between the history and the first lookups."""
WARM_UP_LOOKUPS = 50
"""Lookups of each phase not timed (the broker's first lookups of a new layout warm it up)."""
LIVE_BATCHES_PER_PHASE = 3
"""A phase with ingestion running lasts at least this many committed batches."""


class Signals:
    """What the benchmark and its ingestion process tell each other."""

    def __init__(self, context: Any) -> None:
        self.history_written = context.Event()
        self.live = context.Event()
        """Set: commit live batches one after another; clear: stop after the current one."""
        self.idle = context.Event()
        self.stop = context.Event()
        self.live_batches = context.Value("i", 0)


def live_definition(root: Path) -> Any:
    """``bench.compaction``'s table with the updater after every batch (``update_cadence`` 1),
    so every committed batch moves the LWM (a table's LWM waits for its updates to be applied)."""
    return dataclasses.replace(definition(root, retention_s=3600), update_cadence=1)


def ingestion_process(
    redis_url: str, root: str, rows: int, batches: int, signals: Signals, report: Any
) -> None:
    """The ingestion server: writes the history, then live batches while ``signals.live`` is set
    (each updates odd keys only, so the even keys the benchmark looks up keep their answers)."""
    from pyspark.sql import functions as F

    from horizon_broker._core.spark_session import create_spark_session
    from horizon_broker.ingest.job import IngestJob
    from horizon_broker.watermark.server import ServerClient

    keys = rows // VERSIONS_PER_KEY
    per_batch = math.ceil(keys * VERSIONS_PER_KEY / batches)
    spark = create_spark_session(
        master="local[2]", app_name="bench-point-live-ingest",
        conf={"spark.sql.shuffle.partitions": "4"},
    )  # fmt: skip
    server = ServerClient(redis_url, "bench-ingest")
    server.start_heartbeats(1.0)
    rng = random.Random(5)
    live_seconds: list[float] = []
    try:
        job = IngestJob(spark, live_definition(Path(root)), server).start()
        started = time.perf_counter()
        for batch in range(batches):
            end = min(keys * VERSIONS_PER_KEY, (batch + 1) * per_batch)
            job.run_batch(rows_of(spark, keys, batch * per_batch, end))
            if (batch + 1) % 10 == 0 or batch + 1 == batches:
                print(f"  ingested batch {batch + 1}/{batches}", flush=True)
        job.flush_updates()
        history_s = time.perf_counter() - started
        signals.history_written.set()
        version = VERSIONS_PER_KEY
        while not signals.stop.is_set():
            signals.idle.set()
            if not signals.live.wait(0.1):
                continue
            signals.idle.clear()
            if not signals.live.is_set():  # paused between the wait and the clear: no batch
                continue
            odd = sorted({2 * rng.randrange(keys // 2) + 1 for _ in range(LIVE_BATCH_KEYS)})
            frame = spark.createDataFrame([(key, version) for key in odd], "k long, v long").select(
                *version_columns(F.col("k"), F.col("v"))
            )
            started = time.perf_counter()
            job.run_batch(frame)
            live_seconds.append(time.perf_counter() - started)
            version += 1
            with signals.live_batches.get_lock():
                signals.live_batches.value += 1
        report.put({"history_seconds": round(history_s, 1), "live_batch_seconds": live_seconds})
    except BaseException as error:
        report.put({"error": repr(error)})
        raise
    finally:
        signals.idle.set()
        server.close()
        spark.stop()


def expected_answers(spark: Any, keys: int, sample: list[int]) -> dict[int, dict[str, Any]]:
    """Each sampled (even) key's newest version, computed by Spark from the generator itself."""
    from pyspark.sql import functions as F

    newest = F.lit(VERSIONS_PER_KEY - 1).cast("long")
    frame = (
        spark.createDataFrame([(key,) for key in sample], "id long")
        .select(*version_columns(F.col("id"), newest))
        .select("id", "region", "amount", "seq")
    )
    return {row["id"]: row.asDict() for row in frame.collect()}


def lookups(
    client: Any,
    expected: dict[int, dict[str, Any]],
    iterations: int,
    seed: int,
    signals: Signals | None = None,
) -> dict[str, Any]:
    """``iterations`` lookups of random sampled keys, each answer checked; with ``signals``,
    they go on until the ingestion process committed at least :data:`LIVE_BATCHES_PER_PHASE`
    batches meanwhile (the LWM moved under them)."""
    rng = random.Random(seed)
    sample = sorted(expected)
    end_to_end: list[float] = []
    in_broker: list[float] = []
    # In-broker time of each lookup that was the first to read its snapshot, and of each that
    # was the first to read its timeline generation (the updater's rewritten files are announced,
    # a new generation, before the LWM moves: those files are new to the broker).
    first_at_snapshot: list[float] = []
    first_at_generation: list[float] = []
    last_generation: int | None = None
    timings: list[tuple[float, Any]] = []
    last_snapshot: int | None = None
    routes: dict[str, int] = {}
    lwms: set[int] = set()
    first_batch = signals.live_batches.value if signals is not None else 0
    give_up = time.monotonic() + 600

    def committed() -> int:
        return signals.live_batches.value - first_batch if signals is not None else 0

    index = 0
    while index < iterations + WARM_UP_LOOKUPS or (
        signals is not None and committed() < LIVE_BATCHES_PER_PHASE and time.monotonic() < give_up
    ):
        key = rng.choice(sample)
        started = time.perf_counter()
        result = client.execute(LOOKUP_SQL.format(key=key), cache=False)
        elapsed = (time.perf_counter() - started) * 1000
        rows = result.table.to_pylist()
        if rows != [expected[key]]:
            raise SystemExit(f"key {key}: answered {rows}, expected {[expected[key]]}")
        index += 1
        if index <= WARM_UP_LOOKUPS:
            continue
        end_to_end.append(elapsed)
        in_broker.append(result.trailer.timings.total_ms)
        timings.append((elapsed, result.trailer.timings))
        if last_snapshot is not None and result.snapshot != last_snapshot:
            first_at_snapshot.append(result.trailer.timings.total_ms)
        last_snapshot = result.snapshot
        generation = result.metadata.tables[0].timeline_generation
        if last_generation is not None and generation != last_generation:
            first_at_generation.append(result.trailer.timings.total_ms)
        last_generation = generation
        lwms.add(result.snapshot)
        route = "files" if "direct key lookup" in result.metadata.execution else "spark"
        routes[route] = routes.get(route, 0) + 1
    return {
        "end_to_end_ms": summarize(end_to_end),
        "in_broker_ms": summarize(in_broker),
        "first_at_new_snapshot_ms": sorted(round(ms, 2) for ms in first_at_snapshot),
        "first_at_new_generation_ms": sorted(round(ms, 2) for ms in first_at_generation),
        "slowest": [
            {
                "end_to_end_ms": round(ms, 2),
                **{
                    f"{name}_ms": round(getattr(parts, f"{name}_ms"), 2)
                    for name in ("total", "queued", "rewrite", "spark", "serialize")
                },
            }
            for ms, parts in sorted(timings, key=lambda item: item[0])[-10:]
        ],
        "routes": routes,
        "snapshots_read": len(lwms),
        "live_batches_committed": committed(),
    }


def client_process(
    target: str, expected: dict[int, dict[str, Any]], signals: Signals, commands: Any, answers: Any
) -> None:
    """The benchmark's client, a process of its own as every real client is: in the broker's
    process it would wait for the broker's interpreter lock, which no client does. It runs
    :func:`lookups` for each ``(iterations, seed, live)`` command until it gets None."""
    from horizon_broker.client import connect

    with connect(target) as client:
        while (command := commands.get()) is not None:
            iterations, seed, live = command
            try:
                answers.put(lookups(client, expected, iterations, seed, signals if live else None))
            except BaseException as error:
                answers.put({"error": repr(error)})
                raise


def run(rows: int, batches: int, iterations: int) -> dict[str, Any]:
    from horizon_broker._core.spark_session import create_spark_session
    from horizon_broker.watermark.server import ServerClient
    from tests.processes import RedisProcess

    keys = rows // VERSIONS_PER_KEY
    rows = keys * VERSIONS_PER_KEY
    redis = RedisProcess().start()
    work = Path(tempfile.mkdtemp(prefix="horizon-bench-point-live-"))
    root = work / "table"
    context = multiprocessing.get_context("spawn")
    signals = Signals(context)
    report_queue = context.Queue()
    ingestion = context.Process(
        target=ingestion_process,
        args=(redis.url, str(root), rows, batches, signals, report_queue),
        name="bench-point-live-ingestion",
    )
    ingestion.start()
    spark = create_spark_session(
        master="local[2]", app_name="bench-point-live", conf={"spark.sql.shuffle.partitions": "4"}
    )
    compactor_client = ServerClient(redis.url, "bench-compactor")
    broker = None
    client = None
    commands, answers = context.Queue(), context.Queue()
    results: dict[str, Any] = {"rows": rows, "keys": keys, "batches": batches}
    try:
        _wait_for_history(signals, ingestion, report_queue)
        expected = expected_answers(spark, keys, _sampled_keys(keys))
        broker = _start_broker(redis.url, spark)
        follower = broker.follower
        client = context.Process(
            target=client_process,
            args=(broker.target, expected, signals, commands, answers),
            name="bench-point-live-client",
        )
        client.start()
        phase = _Phases(signals, commands, answers, follower, iterations)
        time.sleep(SETTLE_S)  # the ingestion process's upkeep after its last batch, the JIT
        results["before_quiet"] = phase(seed=1, running=False)
        results["before_live"] = phase(seed=2, running=True)
        _, _, report = compact_whole_table(
            spark, live_definition(root), compactor_client, rows, follower
        )
        results["compaction"] = {"inputs": len(report.inputs), "outputs": len(report.outputs)}
        results["after_quiet"] = phase(seed=3, running=False)
        results["after_live"] = phase(seed=4, running=True)
        signals.stop.set()
        results.update(_ingestion_facts(report_queue, signals))
    finally:
        signals.stop.set()
        signals.live.set()
        _stop_client(client, commands)
        if broker is not None:
            broker.stop(0)
            broker.follower.stop()
        _stop_ingestion(ingestion)
        compactor_client.close()
        spark.stop()
        redis.close()
        shutil.rmtree(work, ignore_errors=True)
    return results


def _sampled_keys(keys: int) -> list[int]:
    """2,000 even keys (at most), the same on every run."""
    sample_rng = random.Random(3)
    return sorted({2 * sample_rng.randrange(keys // 2) for _ in range(2_000)})


def _wait_for_history(signals: Signals, ingestion: Any, report_queue: Any) -> None:
    """Until the ingestion process has written the table's history (or ended early)."""
    while not signals.history_written.wait(1.0):
        if not ingestion.is_alive():
            raise SystemExit(f"the ingestion process ended early: {report_queue.get(timeout=5)}")


class _Phases:
    """One measured phase: the client's lookups with ingestion running or idle, and the
    follower's view of the table when they ended."""

    def __init__(
        self, signals: Signals, commands: Any, answers: Any, follower: Any, iterations: int
    ) -> None:
        self.signals = signals
        self.commands = commands
        self.answers = answers
        self.follower = follower
        self.iterations = iterations

    def __call__(self, seed: int, running: bool) -> dict[str, Any]:
        self._live(running)
        self.commands.put((self.iterations, seed, running))
        answer = self.answers.get(timeout=1200)
        self._live(False)
        if "error" in answer:
            raise SystemExit(f"the client failed: {answer['error']}")
        view = self.follower.view(TABLE)
        return {
            **answer,
            "visible_segments": len(view.visible_segments),
            "lwm_at_end": view.lwm,
            "laggard_at_end": repr(view.laggard),
        }

    def _live(self, running: bool) -> None:
        if running:
            self.signals.live.set()
            return
        self.signals.live.clear()
        self.signals.idle.wait(600)


def _ingestion_facts(report_queue: Any, signals: Signals) -> dict[str, Any]:
    """What the ingestion process reports once stopped: its history's time, its live batches."""
    facts = report_queue.get(timeout=600)
    if "error" in facts:
        raise SystemExit(f"the ingestion process failed: {facts['error']}")
    seconds = facts["live_batch_seconds"]
    return {
        "history_seconds": facts["history_seconds"],
        "live_batches": signals.live_batches.value,
        "live_batch_seconds": summarize(seconds) if seconds else {},
    }


def _stop_client(client: Any, commands: Any) -> None:
    if client is not None:
        commands.put(None)
        client.join(timeout=60)
        if client.is_alive():
            client.kill()


def _stop_ingestion(ingestion: Any) -> None:
    ingestion.join(timeout=120)
    if ingestion.is_alive():
        ingestion.kill()


def _start_broker(redis_url: str, spark: Any) -> Any:
    """A broker without result cache or Flight, with metrics and the console, settled."""
    from horizon_broker._core.heap import settle_startup_heap
    from horizon_broker.broker.api.server import BrokerServer
    from horizon_broker.broker.config import config_from_mapping

    config = config_from_mapping(
        {
            "server": {"listen": "127.0.0.1:0"},
            "state": {"redis_url": redis_url},
            "reads": {"cache": False},
            "metrics": {"listen": "127.0.0.1:0"},
            "console": {"listen": "127.0.0.1:0"},
            "flight": {"enabled": False},
        }
    )
    broker = BrokerServer(config, spark=spark).start()
    settle_startup_heap()  # as ``horizon serve`` does once its broker is up
    return broker


PHASES = (
    ("before_quiet", "before compaction, ingestion idle"),
    ("before_live", "before compaction, ingestion running"),
    ("after_quiet", "after compaction, ingestion idle"),
    ("after_live", "after compaction, ingestion running"),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small table, fewer lookups")
    parser.add_argument("--rows", type=int, help="rows of history (default 1,500,000)")
    parser.add_argument("--batches", type=int, help="ingestion batches (default 50)")
    args = parser.parse_args(argv)
    rows = args.rows or (150_000 if args.quick else 1_500_000)
    batches = args.batches or (12 if args.quick else 50)
    iterations = 60 if args.quick else 300
    results = run(rows, batches, iterations)
    results["quick"] = args.quick
    results["targets"] = {"p50_ms": 10, "p99_ms": 25}
    print_table(
        f"point query by key through gRPC on {batches} real ingestion batches "
        f"({results['keys']:,} keys x {VERSIONS_PER_KEY} versions; target p50 <= 10 ms, "
        "p99 <= 25 ms)",
        [
            "phase",
            "visible segments",
            "p50 ms",
            "p99 ms",
            "lookups",
            "snapshots read",
            "batches committed meanwhile",
            "answered from",
        ],
        [
            (
                label,
                results[phase]["visible_segments"],
                f"{results[phase]['end_to_end_ms']['p50']:.2f}",
                f"{results[phase]['end_to_end_ms']['p99']:.2f}",
                f"{results[phase]['in_broker_ms']['p50']:.2f}",
                int(results[phase]["end_to_end_ms"]["n"]),
                results[phase]["snapshots_read"],
                results[phase]["live_batches_committed"],
                results[phase]["routes"],
            )
            for phase, label in PHASES
        ],
    )
    seconds = results.get("live_batch_seconds") or {}
    print(
        f"live batches committed while measuring: {results['live_batches']} "
        f"(p50 {seconds.get('p50', float('nan')):.1f} s each); compaction "
        f"{results['compaction']['inputs']} -> {results['compaction']['outputs']} segments"
    )
    path = write_results("point_query_live", results)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
