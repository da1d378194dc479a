"""``make chaos``: consistency under faults, checked over the recorded history.

A Redis Sentinel group (a primary, a replica, three sentinels), two gRPC brokers and one or two
ingestion servers run as processes; writers move money between bank accounts and bump registers,
readers query through the brokers (each reader holds one client of both brokers, the product's
multi-target client, which retries a read on the other broker with its session token: LWM,
pinned, time travel, self-join, change feeds, the bank with a quiet table in one query), and
faults hit at seeded random moments (:mod:`chaos.faults`: kill -9 and restart of a
server, a clean stop that parks its partitions and a restart that resumes them, a stalled server,
the primary paused until the sentinels promote the replica, the replica promoted *without* the
primary's last acknowledged writes, a server or a broker cut off from the store by a proxy that
stalls then drops its connections, a server's wall clock stepped ahead and behind past the
heartbeat timeout, segment storage full (ENOSPC on a size-limited tmpfs), one of the two brokers
killed, a segment file vanishing or cut short under queries, a compaction killed mid-flight).
Then everything is brought back, the writes are awaited at the LWM, and
:func:`chaos.checker.check` looks for anomalies (in the recorded history, and in the servers'
commit logs: no segment id committed twice). The report gives operations and queries by kind,
faults by kind with each window, availability inside each kind's windows and outside any, and
anomalies by kind; the exit code is 1 on any anomaly. Results go to ``bench/results/chaos.json``.

Run: ``python -m bench.chaos --duration 60 --seed 1``. ``--mutation NAME`` (or ``--mutations
all``) plants bugs and reports which anomaly kinds caught them (:mod:`bench.chaos_mutations`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import chaos_figures as figures
from bench.report import RESULTS_DIR, print_table, write_results

ACCOUNTS = 40
SETTLE_TIMEOUT_S = 240.0
STORE_SEGMENTS = "store-segments.json"
"""Where a run with anomalies saves the store's segments hashes (in its work directory, and
beside its results)."""


def key_owners(servers: dict[str, list[int]], keys: int) -> dict[int, str]:
    """Which server owns each key (0..keys-1) by key partition, computed by the same Spark code
    ingestion uses (a short local session; none when one server owns every partition)."""
    if len(servers) == 1:
        (only,) = servers
        return dict.fromkeys(range(keys), only)
    from chaos.cluster import KEY_PARTITIONS
    from horizon_broker._core.spark_session import create_spark_session
    from horizon_broker.ingest.partitioning import partitions_of

    spark = create_spark_session(master="local[1]", app_name="chaos-partitions")
    try:
        # Both tables' keys are bigint columns: the same hash, whatever the column's name.
        found = partitions_of(
            spark, [(k,) for k in range(keys)], ["account"], KEY_PARTITIONS, "account bigint"
        )
    finally:
        spark.stop()
    by_partition = {p: name for name, parts in servers.items() for p in parts}
    return {key: by_partition[partition] for key, partition in enumerate(found)}


def run(
    duration: float,
    seed: int,
    work: Path,
    *,
    servers: int = 2,
    mutation: str | None = None,
    compaction_pass: bool = False,
    inject_faults: bool = True,
    short: bool = False,
    brokers: int = 2,
    faults_first: tuple[str, ...] | None = None,
    settle_timeout: float = SETTLE_TIMEOUT_S,
) -> dict[str, Any]:
    """One run. ``mutation`` plants a bug (:mod:`chaos.mutations`) in the processes it names;
    ``compaction_pass`` runs one compaction to its end from a quarter in (mutated runs: it must
    complete inside the window, not only be killed); ``inject_faults`` False injects none but
    those the mutation asks for; ``short`` keeps fault windows just past the heartbeat timeout
    (the short run of the tests); ``faults_first`` are injected first (by default those the
    mutation asks for)."""
    from bench.chaos_settle import wait_for_writes
    from chaos.checker import count_by_kind
    from chaos.cluster import BANK, Cluster
    from chaos.faults import Faults
    from chaos.workload import Readers, Writer, commit_points
    from horizon_broker.client import connect

    owned = _partitions(servers)
    owners = key_owners(owned, ACCOUNTS)
    cluster = Cluster(work, owned, mutation=mutation, brokers=brokers)
    writer = Writer(work, owners, seed)
    started = time.monotonic()
    cluster.start()
    client = connect(cluster.targets, timeout=30.0)  # any broker that answers
    faults = Faults(cluster, client, seed, short=short)
    readers = Readers(cluster.targets, 3, seed)
    try:
        _wait_for_brokers(cluster)
        writer.opening()
        bank_since = wait_for_writes(client, writer, settle_timeout, cluster)
        readers.since = bank_since
        readers.commit_points = lambda: commit_points(work)
        startup_s = time.monotonic() - started
        print(f"cluster up and opening balances visible after {startup_s:.0f} s", flush=True)
        supervisor = threading.Thread(target=faults.supervise, daemon=True)
        supervisor.start()
        readers.start()
        reading_from = time.monotonic()
        quiet = threading.Event()  # no writes while the compaction pass runs
        deadline = reading_from + duration
        background = [
            _started(
                faults.run, deadline, _faults_first(mutation, faults_first), others=inject_faults
            ),
            _started(_compaction_pass, cluster, reading_from + duration / 4, deadline, quiet)
            if compaction_pass
            else None,
        ]
        while time.monotonic() < deadline:
            if not quiet.is_set():
                writer.step()
            time.sleep(0.2)
        for thread in background:
            if thread is not None:
                thread.join()
        recorded, anomalies, final_high, settle_s, foreign = _finish(
            cluster, client, writer, readers, faults, settle_timeout
        )
    finally:
        readers.stop.set()
        faults.stop.set()
        client.close()
        cluster.stop()
    availability = figures.availability(recorded, reading_from)
    return {
        "duration_s": duration,
        "seed": seed,
        "mutation": mutation,
        "compaction_pass": _pass_outcome(cluster) if compaction_pass else None,
        "time_origin": "seconds from the readers' start (startup_s after the cluster's)",
        "first_anomaly_s": figures.first_anomaly_s(anomalies, reading_from),
        "anomaly_kinds_first_s": figures.first_by_kind(anomalies, reading_from),
        "startup_s": round(startup_s, 1),
        "run_s": round(time.monotonic() - started, 1),
        "files_written": len(writer.files),
        "operations": dict(writer.counts),
        "writes_acknowledged": len(recorded.writes),
        "queries": dict(Counter(r.kind for r in recorded.reads)),
        "answers_by_table": dict(Counter(r.table for r in recorded.reads if r.ok)),
        "errors": dict(Counter(r.error for r in recorded.reads if not r.ok)),
        "error_samples": figures.error_samples(recorded.reads),
        "faults": dict(faults.counts),
        "faults_not_runnable": dict(faults.not_runnable),
        "fault_failures": dict(faults.failures),
        "process_restarts_after_crashes": dict(faults.restarts),
        "server_parks": dict(faults.parks),
        "availability": availability,
        "final_lwm_covers": final_high,
        "final_settle_s": round(settle_s, 1),
        "foreign_sentinels": foreign,
        "segments_in_commit_logs": figures.segments_logged(recorded.commit_logs),
        "anomalies": count_by_kind(anomalies),
        "anomaly_details": [figures.detail(a, reading_from) for a in anomalies[:50]],
        "fault_windows": [
            f"{f.kind}: {f.started - reading_from:.1f}-{f.ended - reading_from:.1f} s"
            for f in recorded.faults
        ],
        "store_segments": str(work / STORE_SEGMENTS) if anomalies else None,
        "log_tails": _log_tails(cluster.logs) if anomalies else {},
        "bank_table": BANK,
    }


def _finish(
    cluster: Any, client: Any, writer: Any, readers: Any, faults: Any, settle_timeout: float
) -> tuple[Any, list[Any], int, float, Any]:
    """Everything brought back, the writes awaited at the LWM, a few reads there; the history
    (with the servers' commit logs) and its anomalies, the final commit timestamp awaited and
    how long that wait took (of ``settle_timeout``), and the sentinels not the run's found on
    its data nodes (leftovers of other groups: they can reconfigure the run's nodes).
    With anomalies, the store's segments are saved in the work directory."""
    from bench.chaos_settle import foreign_sentinels_or_why, wait_for_writes
    from chaos.checker import check
    from chaos.workload import history

    faults.settle()
    settling = time.monotonic()
    final_high = wait_for_writes(client, writer, settle_timeout, cluster)
    settle_s = time.monotonic() - settling
    time.sleep(2.0)  # a few reads at the final LWM
    readers.join()
    faults.stop.set()
    recorded = history(writer, readers, faults.recorded)
    recorded.commit_logs = cluster.commit_logs()
    anomalies = check(recorded)
    if anomalies:  # what the store held at the end, for the diagnosis
        cluster.save_store_segments(cluster.work / STORE_SEGMENTS)
    return recorded, anomalies, final_high, settle_s, foreign_sentinels_or_why(cluster)


def _wait_for_brokers(cluster: Any) -> None:
    from horizon_broker.client import connect

    for name, target in zip(cluster.brokers, cluster.targets, strict=True):
        with connect(target, timeout=10.0) as client:
            cluster.wait_for_broker(client, name=name)


def _faults_first(mutation: str | None, given: tuple[str, ...] | None) -> tuple[str, ...]:
    """The fault kinds to inject first: ``given``, else those the planted bugs need early
    (none unmutated)."""
    from chaos.mutations import mutations

    if given is not None:
        return given
    return tuple(k for m in mutations(mutation) for k in m.faults) if mutation else ()


def _started(target: Callable[..., None], *args: Any, **kwargs: Any) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, kwargs=kwargs, daemon=True)
    thread.start()
    return thread


def _compaction_pass(cluster: Any, at: float, deadline: float, quiet: threading.Event) -> None:
    """At ``at``, one compaction pass of the bank, awaited to its end (a few minutes past the
    workload's ``deadline`` at most). The writers hold off meanwhile: ingestion preempts a
    compaction (its locks are revoked), and one that never publishes proves nothing."""
    time.sleep(max(0.0, at - time.monotonic()))
    quiet.set()
    try:
        cluster.compaction_pass.start()
        popen = cluster.compaction_pass.popen
        with contextlib.suppress(subprocess.TimeoutExpired):  # still running: stopped later
            popen.wait(timeout=max(1.0, deadline + SETTLE_TIMEOUT_S - time.monotonic()))
    finally:
        quiet.clear()


def _pass_outcome(cluster: Any) -> str:
    """The compaction pass's last line (what it compacted), or why there is none."""
    log = cluster.compaction_pass.log
    if not log.exists():
        return "not started"
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def _log_tails(logs: Path, lines: int = 60) -> dict[str, list[str]]:
    """The end of each process's log (with the anomalies, to see what a server was doing)."""
    return {
        path.name: path.read_text(errors="replace").splitlines()[-lines:]
        for path in sorted(logs.glob("*.log"))
    }


def print_report(results: dict[str, Any]) -> None:
    print_table(
        f"chaos run: {results['duration_s']:.0f} s, seed {results['seed']}",
        ["what", "counts"],
        [
            ("operations", results["operations"]),
            ("writes acknowledged", results["writes_acknowledged"]),
            ("queries", results["queries"]),
            ("answers by table", results.get("answers_by_table") or "-"),
            ("errors", results["errors"] or "-"),
            ("faults", results["faults"]),
            ("faults not runnable here", results.get("faults_not_runnable") or "-"),
            ("faults that failed", results.get("fault_failures") or "-"),
            ("restarts after crashes", results["process_restarts_after_crashes"] or "-"),
            ("servers parked and resumed", results.get("server_parks") or "-"),
            ("anomalies", results["anomalies"] or "none"),
        ],
    )
    print_table(
        "availability by fault window",
        ["window", "queries", "answered", "share"],
        [(k, v["queries"], v["answered"], v["share"]) for k, v in results["availability"].items()],
    )
    print("  (fault windows and anomalies: seconds from the readers' start, "
          f"{results.get('startup_s')} s after the cluster's)")  # fmt: skip
    for window in results["fault_windows"]:
        print(f"  window {window}")
    for status, messages in results["error_samples"].items():
        for message in messages:
            print(f"  {status} {message}")
    for line in results["anomaly_details"]:
        print(f"  {line}")
    if results.get("store_segments"):
        print(f"  the store's segments at the end: {results['store_segments']}")


def _partitions(servers: int) -> dict[str, list[int]]:
    """The two key partitions of the bank, spread over ``servers`` ingestion servers (one or two:
    one server keeps a short run to three JVMs on a small machine)."""
    if servers not in (1, 2):
        raise SystemExit("--servers must be 1 or 2")
    if servers == 1:
        return {"server-1": [0, 1]}
    return {"server-1": [0], "server-2": [1]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of workload")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--servers", type=int, default=2, help="ingestion servers (1 or 2)")
    parser.add_argument(
        "--brokers", type=int, default=2, choices=(1, 2),
        help="brokers (one keeps a mutated run without faults short)",
    )  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--settle-timeout", type=float, default=SETTLE_TIMEOUT_S, metavar="SECONDS",
        help="how long the writes may take to be visible at the LWM (at the start, and after "
        "the faults) before the run fails saying which were not",
    )  # fmt: skip
    parser.add_argument("--no-results", action="store_true", help="do not write chaos.json")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument(
        "--short", action="store_true",
        help="fault windows just past the heartbeat timeout (the short run of the tests)",
    )  # fmt: skip
    parser.add_argument(
        "--mutation", "--mutations", dest="mutations", metavar="NAME",
        help="plant a bug (chaos/mutations.py; 'all': each in turn, 'none': the same run "
        "unmutated) and report which anomaly kinds caught it",
    )  # fmt: skip
    parser.add_argument(
        "--no-faults", action="store_true", help="inject no faults (but those a mutation asks for)"
    )
    parser.add_argument(
        "--faults", metavar="KIND,...",
        help="fault kinds injected first, in this order (a kind may repeat; KIND:variant), "
        "before every kind once and then random ones (none with --no-faults)",
    )  # fmt: skip
    parser.add_argument(
        "--compaction-pass", action="store_true",
        help="with --mutations: one compaction pass in every run, as 'all' has (to run its "
        "list in parts)",
    )  # fmt: skip
    parser.add_argument(
        "--lock", type=Path,
        help="with --mutations: flock this file during each run (a shared machine's Spark lock, "
        "let go between runs)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    # A SIGTERM unwinds like an exception: the cluster stops its processes and unmounts storage.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.mutations:
        return _mutations(args)
    work = Path(tempfile.mkdtemp(prefix="horizon-chaos-"))
    try:
        results = run(
            args.duration, args.seed, work, servers=args.servers, short=args.short,
            brokers=args.brokers, inject_faults=not args.no_faults,
            faults_first=_fault_list(args.faults), settle_timeout=args.settle_timeout,
        )  # fmt: skip
        _keep_store_segments(results, args.json)
    finally:
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print_report(results)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    if not args.no_results:
        print(f"wrote {write_results('chaos', results)}")
    return 1 if results["anomalies"] else 0


def _fault_list(given: str | None) -> tuple[str, ...] | None:
    """``--faults``: the kinds named (each a known kind, a variant after ``:``), or None."""
    from chaos.faults import FAULT_KINDS

    if not given:
        return None
    kinds = tuple(kind.strip() for kind in given.split(",") if kind.strip())
    unknown = sorted({k for k in kinds if k.partition(":")[0] not in FAULT_KINDS})
    if unknown:
        raise SystemExit(f"--faults: unknown kinds {unknown}; known: {', '.join(FAULT_KINDS)}")
    return kinds


def _keep_store_segments(results: dict[str, Any], json_path: Path | None) -> None:
    """Copy the store's segments hashes a run with anomalies saved out of its work directory
    (which goes away unless kept): beside ``--json``, else beside the results."""
    saved = results.get("store_segments")
    if not saved or not Path(saved).exists():
        return
    folder = json_path.parent if json_path is not None else RESULTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    results["store_segments"] = str(shutil.copy(saved, folder / f"chaos-{STORE_SEGMENTS}"))


def _mutations(args: argparse.Namespace) -> int:
    """Each requested mutation in its own run; the table of verdicts; 1 unless all caught."""
    from bench.chaos_mutations import (
        all_caught,
        names,
        needs_compaction,
        print_verdicts,
        run_mutation,
    )

    try:
        chosen = names(args.mutations)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    from bench.tpch import PhaseLock

    outcomes = {}
    lock = PhaseLock(args.lock)
    for name in chosen:
        lock.take()
        print(f"-- {name}", flush=True)
        try:
            outcomes[name] = results = run_mutation(
                run, name, args.duration, args.seed, servers=args.servers, brokers=args.brokers,
                inject_faults=not args.no_faults,
                compaction_pass=args.compaction_pass or needs_compaction(chosen),
                keep=args.keep,
            )  # fmt: skip
        finally:
            lock.let_go()
        print_report(results)
        print_verdicts(outcomes)
    if args.json is not None:
        args.json.write_text(json.dumps(outcomes, indent=2, default=str))
    if not args.no_results:
        print(f"wrote {write_results('chaos_mutations', outcomes)}")
    return 0 if all_caught(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
