"""TPC-H through Horizon against the same Spark on plain Parquet tables of the final state.

The eight tables at ``--scale`` (0.01 by default) come from :mod:`bench.tpch_data`; each is
ingested by ingestion's own job (:class:`~horizon_broker.ingest.job.IngestJob`, what
``horizon ingest`` runs) in three upsert batches (wrong values then corrections, ghost rows then
deletes, deletes then re-inserts, late rows), so versions, closed intervals and overshadowed
files exist. A broker (result cache off) then answers the 22 queries of
:mod:`bench.tpch_queries`; a second session of the same Spark application reads plain Parquet
tables of the final state. Per query, warm and alternating round by round (at least
``--rounds``, more while the query has taken under ``--budget`` seconds): the two medians,
their ratio with its noise and a verdict against the target (:mod:`bench.tpch_stats`: within
noise when the query's own A/A spread covers the gap), Horizon's time outside Spark (end to
end minus the trailer's Spark time) and the two physical plans side by side
(``bench/results/tpch_plans_<phase>.md``, :mod:`bench.tpch_plans`).
Every answer of either side is checked against DuckDB's first (:mod:`bench.tpch_answers`): a
mismatch stops the run. All of it before and after one compaction of every table, each phase
ending with every query at the snapshot of the first round of batches by ``VERSION AS OF`` and
``TIMESTAMP AS OF``, checked against DuckDB on those batches (:mod:`bench.tpch_history`).

Run: ``python -m bench.tpch [--scale 0.01] [--queries 3,17,21] [--rounds 9] [--budget 10]
[--quick]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.report import RESULTS_DIR, code_commit, write_results
from bench.tpch_answers import reference_answers
from bench.tpch_data import DELETED, KEYS, SEQUENCE, batches, generate
from bench.tpch_history import check_time_travel
from bench.tpch_measure import Rounds, check_both, metered, reads_differ, time_rounds, totals
from bench.tpch_plans import differences, side_by_side, summarize
from bench.tpch_queries import QUERIES, parse_numbers, tables_read
from bench.tpch_report import report

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


def plans(number: int, client: Any, plain: Any, token: Any) -> tuple[str, str, int]:
    """Spark's physical plans of query ``number``: through the broker, and on plain tables; and
    how many derived tables the rewritten text kept (the others name their view directly)."""
    sql = QUERIES[number]
    explained = client.explain(sql, include_spark_plan=True, min_snapshot=token)
    theirs = str(plain.sql(sql)._jdf.queryExecution().executedPlan().toString())
    return explained.spark_plan, theirs, explained.rewritten_sql.count("validUntil FROM")


def measure(
    client: Any, plain: Any, numbers: list[int], expected: dict[int, Any], rounds: Rounds,
    token: Any, phase: str, plans_dir: Path, between: Callable[[], None] = lambda: None,
) -> dict[str, Any]:  # fmt: skip
    """Every chosen query measured, its plans written to ``tpch_plans_<phase>.md``; ``between``
    runs before each query (the lock's :meth:`PhaseLock.breathe`)."""
    per_query: dict[str, Any] = {}
    sections = [f"# TPC-H plans, {phase}: Horizon and plain Spark side by side\n"]
    for number in numbers:
        between()
        # Both answers checked first: also each side's warm-up run of the query.
        answer = check_both(number, client, plain, expected[number], token)
        figures = {"rows": answer.table.num_rows, **time_rounds(number, client, plain, rounds, token)}  # fmt: skip
        figures["reads"] = metered(plain, number, client, plain, token)
        figures["reads_differ"] = reads_differ(figures["reads"])
        horizon_plan, plain_plan, figures["derived_tables"] = plans(number, client, plain, token)
        figures["plans_differ_in"] = differences(summarize(horizon_plan), summarize(plain_plan))
        figures["horizon_plan"] = summarize(horizon_plan).rows()
        figures["plain_plan"] = summarize(plain_plan).rows()
        per_query[f"Q{number:02d}"] = figures
        sections.append(side_by_side(number, figures, horizon_plan, plain_plan))
        print(f"  Q{number:02d}: {figures['horizon_ms']:.0f} ms vs {figures['plain_ms']:.0f} ms "
              f"({figures['ratio']:.2f}x, range {figures['ratio_range'][0]:.2f}-"
              f"{figures['ratio_range'][1]:.2f}x; A/A {figures['aa_ratio']:.2f}x, spread "
              f"{figures['aa_spread']:.2f}x; {figures['rounds']} rounds); plans differ in "
              f"{figures['plans_differ_in']}; reads differ: {figures['reads_differ'] or '-'}", flush=True)  # fmt: skip
    plans_dir.mkdir(parents=True, exist_ok=True)
    (plans_dir / f"tpch_plans_{phase}.md").write_text("\n".join(sections))
    return {"queries": per_query, **totals(per_query, phase)}


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


@contextmanager
def compaction_row_groups(size: int | None) -> Iterator[None]:
    """Compaction's output written with ``size``-byte row groups (a probe of another size than
    the product's ``COMPACTED_ROW_GROUP_BYTES``; nothing changes without one)."""
    from horizon_broker.compaction import run as compaction_run

    kept = compaction_run.COMPACTED_ROW_GROUP_BYTES
    compaction_run.COMPACTED_ROW_GROUP_BYTES = size or kept
    try:
        yield
    finally:
        compaction_run.COMPACTED_ROW_GROUP_BYTES = kept


def run(
    scale: float,
    numbers: list[int],
    rounds: Rounds | int,
    compaction: bool,
    *,
    spark: Any = None,
    redis_url: str | None = None,
    plans_dir: Path = RESULTS_DIR,
    keep_work: bool = False,
    lock: Path | None = None,
    hold_lock: bool = False,
    hold_most_s: float | None = None,
    conf: dict[str, str] | None = None,
    compaction_row_group_bytes: int | None = None,
    save: Callable[[dict[str, Any]], Any] | None = None,
) -> dict[str, Any]:
    """The whole benchmark; a test passes its own Spark session and Redis (kept running) and
    a directory of its own for the plans. With ``lock``, each phase holds that file's lock
    (``flock``) and the lock is let go between them, so a long run never holds it throughout;
    the first phase takes it before the run's own Spark starts; ``hold_lock`` keeps it from
    the first phase to the end (a short run: its second phase never queues); ``hold_most_s``
    bounds each hold (let go and taken again between queries). ``conf`` goes
    into the Spark session the run starts, so both sides read with it. ``save`` is given the results after
    each phase (a run stopped while it waits for the lock keeps its first phase's figures)."""
    read = tables_read(numbers)  # the tables the chosen queries read, no others
    tables = {name: table for name, table in generate(scale).items() if name in read}
    rounds = rounds if isinstance(rounds, Rounds) else Rounds(rounds)
    results: dict[str, Any] = {"scale": scale, "rounds": rounds.least, "conf": conf or {}}
    results["round_budget_s"], results["max_rounds"] = rounds.budget_s, rounds.most
    results["compaction_row_group_bytes"] = compaction_row_group_bytes
    results["started_at_commit"] = code_commit()  # others may commit while it runs
    results["rows"] = {name: table.num_rows for name, table in tables.items()}
    expected = reference_answers(tables, {number: QUERIES[number] for number in numbers})
    results["step_seconds"] = {}  # where a run's time goes
    gate = PhaseLock(lock, hold=hold_lock, most_s=hold_most_s)
    gate.take()  # the plain tables, ingestion and the first phase (and starting Spark)
    try:
        with _services(spark, redis_url, conf or {}) as (spark, redis_url):
            work = Path(tempfile.mkdtemp(prefix="horizon-bench-tpch-"))
            try:
                _phases(spark, redis_url, tables, numbers, expected, results, gate, work, plans_dir, compaction, save or (lambda _: None))  # fmt: skip
            finally:
                if keep_work:
                    print(f"work directory kept: {work}")
                else:
                    shutil.rmtree(work, ignore_errors=True)
    finally:
        gate.close()
    return results


def _phases(
    spark: Any, redis_url: str, tables: dict[str, Any], numbers: list[int], expected: dict[int, Any],
    results: dict[str, Any], gate: PhaseLock, work: Path, plans_dir: Path, compaction: bool,
    save: Callable[[dict[str, Any]], Any],
) -> None:  # fmt: skip
    """Ingestion and the phase before compaction (under the lock ``gate`` holds), then, with
    the lock let go and taken again, the compaction and the phase after it."""
    from horizon_broker.watermark.server import ServerClient

    steps = results["step_seconds"]
    rounds = Rounds(results["rounds"], results["round_budget_s"], results["max_rounds"])
    server = ServerClient(redis_url, f"bench-tpch-ingest-{os.getpid()}-{time.monotonic_ns()}")
    broker = None
    # Ingestion and compaction run on a session of their own, as in their own processes: the
    # settings they make (ingestion's requireAllClusterKeysForCoPartition) must not reach the
    # broker's session, whose plans are measured (Q02 planned one shuffle fewer with it).
    writer = spark.newSession()
    try:
        with step(steps, "plain tables"):
            plain = plain_session(spark, tables, work)
        with step(steps, "ingestion"):
            ingested = ingest(writer, server, tables, work)
        results["ingest_seconds"] = ingested["seconds"]
        print(f"ingested in {sum(ingested['seconds'].values()):.0f} s: {ingested['seconds']}")
        broker = start_broker(redis_url, spark)
        with step(steps, "before"):
            results["before"] = phase(broker, plain, numbers, expected, rounds, ingested, plans_dir, "before", gate.breathe)  # fmt: skip
        gate.let_go()
        save(results)
        if compaction:
            gate.take()  # taken again: others' Spark runs may go in between
            row_groups = compaction_row_groups(results["compaction_row_group_bytes"])
            with step(steps, "compaction"), row_groups:
                results["compaction"] = compact(writer, redis_url, ingested["definitions"], broker.follower)  # fmt: skip
            with step(steps, "after"):
                results["after"] = phase(broker, plain, numbers, expected, rounds, ingested, plans_dir, "after", gate.breathe)  # fmt: skip
            save(results)
    finally:
        if broker is not None:
            broker.stop(0)
            broker.follower.stop()
        server.close()


def phase(
    broker: Any, plain: Any, numbers: list[int], expected: dict[int, Any], rounds: Rounds,
    ingested: dict[str, Any], plans_dir: Path, name: str, between: Callable[[], None],
) -> dict[str, Any]:  # fmt: skip
    """One phase: every query measured at the latest snapshot, then at the first round's
    snapshot by ``VERSION AS OF`` and ``TIMESTAMP AS OF`` (``between`` before each query)."""
    from horizon_broker.client import connect

    with connect(broker.target) as client:
        token = ingested["tokens"]
        figures = measure(client, plain, numbers, expected, rounds, token, name, plans_dir, between)  # fmt: skip
        seconds: dict[str, float] = {}
        with step(seconds, "time travel"):
            first = ingested["first_batches"], ingested["first_round_snapshot"]
            figures["time_travel_rows"] = check_time_travel(client, numbers, *first, between)
        figures["time_travel_seconds"] = seconds["time travel"]
    return figures


@contextmanager
def step(seconds: dict[str, float], name: str) -> Iterator[None]:
    """The block's wall time as ``seconds[name]``."""
    started = time.perf_counter()
    try:
        yield
    finally:
        seconds[name] = round(time.perf_counter() - started, 2)


class PhaseLock:
    """An exclusive ``flock`` on a file, taken and let go phase by phase (nothing without a
    path); letting go twice, or without having taken it, does nothing. With ``hold`` it is
    let go only by :meth:`close`: a short run keeps it between its phases, so its second phase
    never waits behind others' runs (at scale 0.01 both phases take about four minutes; runs
    that let go between phases lost their second phase to the queue three times)."""

    def __init__(
        self, path: Path | None, *, hold: bool = False, most_s: float | None = None,
        gap: Callable[[], None] = lambda: time.sleep(2.0),
    ) -> None:  # fmt: skip
        self.path = path
        self.hold = hold
        self.most_s = most_s
        self.gap = gap  # between letting go and taking again: a waiter's flock gets in first
        self._handle: Any = None
        self._since = 0.0

    def take(self) -> None:
        import fcntl

        if self.path is None or self._handle is not None:
            return
        started = time.perf_counter()
        self._handle = open(self.path, "a")  # noqa: SIM115 (held across phases, closed in close)
        fcntl.flock(self._handle, fcntl.LOCK_EX)
        self._since = time.perf_counter()
        print(f"holding {self.path} (waited {self._since - started:.0f} s)", flush=True)

    def breathe(self) -> None:
        """Between two queries: a hold older than ``most_s`` lets go and queues again, so a
        phase too long for one hold (scale factor 1: 22 queries take over 20 minutes) runs in
        bounded slices, its Spark and broker idle while others hold the lock."""
        if self._handle is None or self.hold or self.most_s is None:
            return
        if time.perf_counter() - self._since >= self.most_s:
            self.close()
            self.gap()
            self.take()

    def let_go(self) -> None:
        """The end of a phase: the lock goes unless it is held for the whole run."""
        if not self.hold:
            self.close()

    def close(self) -> None:
        """The end of the run: the lock goes."""
        import fcntl

        if self._handle is None:
            return
        fcntl.flock(self._handle, fcntl.LOCK_UN)
        self._handle.close()
        self._handle = None


@contextmanager
def _services(spark: Any, redis_url: str | None, conf: dict[str, str]) -> Iterator[tuple[Any, str]]:
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
            conf={"spark.sql.maxMetadataStringLength": "4000", **conf},
        )
    try:
        yield spark, redis.url if redis is not None else str(redis_url)
    finally:
        if own_spark:
            spark.stop()
        if redis is not None:
            redis.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.01, help="TPC-H scale factor")
    parser.add_argument("--queries", help="comma-separated query numbers (default: all 22)")
    parser.add_argument("--rounds", type=int, help="least timed runs of each side per query (9)")
    parser.add_argument(
        "--budget", type=float,
        help="more rounds while a query's timed runs took under this many seconds (10; quick 3)",
    )  # fmt: skip
    parser.add_argument("--max-rounds", type=int, help="at most this many rounds (5x --rounds)")
    parser.add_argument("--quick", action="store_true", help="3 rounds, 3 s budget")
    parser.add_argument("--no-compaction", action="store_true", help="skip the second phase")
    parser.add_argument(
        "--compaction-row-group-mib", type=int,
        help="a probe: compaction writes row groups of this size (the product's: 32)",
    )  # fmt: skip
    parser.add_argument("--keep-work", action="store_true", help="keep the tables' directory")
    parser.add_argument("--lock", type=Path, help="flock this file during each phase")
    parser.add_argument(
        "--hold-lock", action="store_true",
        help="with --lock: hold it from the first phase to the end (short runs: scale 0.01)",
    )  # fmt: skip
    parser.add_argument(
        "--hold-minutes", type=float,
        help="with --lock: let it go and queue again between queries after this long (SF1)",
    )  # fmt: skip
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE",
        help="a Spark setting of the run's session (both sides), repeatable",
    )  # fmt: skip
    args = parser.parse_args(argv)
    try:
        numbers = parse_numbers(args.queries)
    except ValueError as error:
        parser.error(str(error))
    least = args.rounds or (3 if args.quick else 9)
    budget = args.budget if args.budget is not None else (3.0 if args.quick else 10.0)
    rounds = Rounds(least, budget, args.max_rounds or 5 * least)
    if any("=" not in item for item in args.conf):
        parser.error("--conf takes KEY=VALUE")
    conf = dict(item.split("=", 1) for item in args.conf)
    # The default scale keeps the names ``make bench`` and the README read; others get their own.
    name = "tpch" if args.scale == 0.01 else f"tpch-sf{args.scale:g}"
    results = run(
        args.scale,
        numbers,
        rounds,
        compaction=not args.no_compaction,
        keep_work=args.keep_work,
        lock=args.lock,
        hold_lock=args.hold_lock,
        hold_most_s=args.hold_minutes * 60 if args.hold_minutes else None,
        conf=conf,
        compaction_row_group_bytes=(args.compaction_row_group_mib or 0) * 1024**2 or None,
        save=lambda partial: write_results(name, partial),
        plans_dir=RESULTS_DIR if name == "tpch" else RESULTS_DIR / name,
    )
    report(results)
    print(f"results: {write_results(name, results)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
