"""``make bench``: run every benchmark, then write ``bench/results/SUMMARY.md``.

Each benchmark runs in its own process (its own Spark session and memory), one after another so
they do not compete for the two cores. ``--quick`` passes through for a short smoke run;
``--only timeline,rewrite`` runs a subset; ``--summary`` only rewrites the summary from the JSON
files already in ``bench/results``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.report import RESULTS_DIR, code_commit, machine

BENCHMARKS = (
    "timeline", "watermark", "rewrite", "ingest", "ingest_server", "broker", "point_query",
    "point_query_live", "concurrency", "flight", "query", "compaction", "abuse", "metrics",
    "tpch", "subscribe",
)  # fmt: skip


def _get(data: Any, *path: str | int) -> Any:
    for key in path:
        if isinstance(data, dict):
            data = data.get(str(key)) if str(key) in data else data.get(key)  # type: ignore[call-overload]
        elif isinstance(data, list) and isinstance(key, int) and key < len(data):
            data = data[key]
        else:
            return None
    return data


def _num(value: Any, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        if abs(value) >= 1000:
            return f"{value:,.0f}{unit}"
        return f"{value:.{digits}f}{unit}"
    return str(value)


Row = tuple[str, str, str]
Extractor = Callable[[dict[str, Any]], list[Row]]


def _timeline(r: dict[str, Any]) -> list[Row]:
    t = r.get("targets", {})
    return [
        ("lookup cost, 525,600 vs 365 chunks", _num(t.get("lookup_cost_ratio_largest_vs_365"), "x", 2), "<= 3x"),
        ("lookups/s at 525,600 chunks (first pass / warm)", f"{_num(t.get('first_pass_lookups_per_s_largest'))} / {_num(t.get('lookups_per_s_largest'))}", ">= 50,000"),
        ("add/remove cost, 1M vs 1K segments (worst)", _num(t.get("change_cost_ratio_largest_vs_1000"), "x", 2), "<= 2x"),
        ("memory per segment", _num(t.get("worst_total_bytes_per_segment"), " B", 0), "<= 1 KiB"),
    ]  # fmt: skip


def _watermark(r: dict[str, Any]) -> list[Row]:
    return [
        ("report -> follower latency p50 / p99", f"{_num(_get(r, 'report_latency_ms', 'p50'), ' ms', 2)} / {_num(_get(r, 'report_latency_ms', 'p99'), ' ms', 2)}", "p99 <= 20 ms"),
        ("table LWM read, 1,000 servers x 64 partitions (p50)", _num(_get(r, "read_table_lwm", "read_ms", "p50"), " ms", 3), "<= 5 ms, 1 round trip"),
        ("follower events/s", _num(_get(r, "apply", "apply_per_s")), "thousands/s"),
    ]  # fmt: skip


def _rewrite(r: dict[str, Any]) -> list[Row]:
    rows = []
    for name in ("simple", "tpch_like_60_lines"):
        rows.append(
            (
                f"{name}: rewrite p50 (bare parse+generate p50)",
                f"{_num(_get(r, name, 'rewrite', 'p50'), ' ms', 3)} ({_num(_get(r, name, 'bare', 'p50'), ' ms', 3)}), {_num(_get(r, name, 'ratio_p50'), 'x', 2)}",
                "<= 1.5x; simple <= 0.5 ms",
            )
        )  # fmt: skip
        rows.append(
            (
                f"{name}: bare parse+generate of the rewritten output p50 (rewrite / it)",
                f"{_num(_get(r, name, 'bare_of_output', 'p50'), ' ms', 3)} ({_num(_get(r, name, 'ratio_p50_to_bare_of_output'), 'x', 2)})",
                "-",
            )
        )  # fmt: skip
    return rows


def _ingest(r: dict[str, Any]) -> list[Row]:
    rows = []
    for item in r.get("throughput", []):
        floor = "floor" in str(item.get("workload"))
        rows.append((f"throughput, {item.get('workload')}", _num(item.get("rows_per_s"), " rows/s"), "reference" if floor else ">= 200,000 and >= 25% of the floor"))  # fmt: skip
    for key, label, target in (
        ("latency_s", "inserts", "-"),
        ("latency_with_updates_s", "1 in 3 updates", "p99 <= 2 s"),
        ("latency_with_updates_on_spark_s", "1 in 3 updates, every batch on Spark", "-"),
    ):
        rows.append((f"event -> visible at LWM p50 / p99, {label}", f"{_num(_get(r, key, 'p50'), ' s')} / {_num(_get(r, key, 'p99'), ' s')}", target))  # fmt: skip
    rows.append(("event -> visible, first event after the stream starts", _num(_get(r, "latency_s", "first_event_s"), " s"), "-"))  # fmt: skip
    for item in r.get("amplification", []):
        rows.append((f"bytes rewritten per updated row, cadence {item.get('cadence')}", _num(item.get("bytes_per_updated_row"), " B", 0), "-"))  # fmt: skip
    return rows


def _ingest_server(r: dict[str, Any]) -> list[Row]:
    one, eight = r.get("one_server") or {}, r.get("eight_processes") or {}
    rows = []
    for label, key, unit in (
        ("start-up", "startup_s", " s"),
        ("total, 3 batches of every table", "total_s", " s"),
        ("peak memory (RSS, JVMs included)", "peak_rss_mb", " MB"),
    ):
        rows.append(
            (
                f"8 tables, one server / eight processes: {label}",
                f"{_num(one.get(key), unit)} / {_num(eight.get(key), unit)}",
                "one server below",
            )
        )
    return rows


def _broker(r: dict[str, Any]) -> list[Row]:
    return [
        ("point query by key, end to end p50 / p99", f"{_num(_get(r, 'point_query', 'end_to_end_ms', 'p50'), ' ms')} / {_num(_get(r, 'point_query', 'end_to_end_ms', 'p99'), ' ms')}", "p50 <= 150 ms"),
        ("same query on Spark (direct lookups off), p50 / p99", f"{_num(_get(r, 'point_query_on_spark', 'end_to_end_ms', 'p50'), ' ms')} / {_num(_get(r, 'point_query_on_spark', 'end_to_end_ms', 'p99'), ' ms')}", "p50 <= 150 ms"),
        ("broker overhead per query p50 (end to end - Spark)", _num(_get(r, "point_query", "overhead_ms", "p50"), " ms"), "-"),
        ("rewrite + planning p50", _num(_get(r, "point_query", "rewrite_planning_ms", "p50"), " ms", 2), "-"),
        ("dashboard query (1,000 rows): cache hit / miss p50", f"{_num(_get(r, 'dashboard_cache', 'hit_ms', 'p50'), ' ms', 2)} / {_num(_get(r, 'dashboard_cache', 'miss_ms', 'p50'), ' ms')}", "hit < 5 ms"),
        ("  miss / hit at p50", _num(_get(r, "dashboard_cache", "miss_over_hit_p50"), "x"), ">= 20x"),
        ("point query p50: standalone cluster / Connect vs local", f"{_num(_get(r, 'modes', 'standalone', 'point_p50_over_local'), 'x')} / {_num(_get(r, 'modes', 'connect', 'point_p50_over_local'), 'x')}", "-"),
        ("full aggregate p50: standalone cluster / Connect vs local", f"{_num(_get(r, 'modes', 'standalone', 'aggregate_p50_over_local'), 'x')} / {_num(_get(r, 'modes', 'connect', 'aggregate_p50_over_local'), 'x')}", "-"),
        ("read-your-writes: commit to answer p50 / p99", f"{_num(_get(r, 'read_your_writes', 'commit_to_answer_ms', 'p50'), ' ms')} / {_num(_get(r, 'read_your_writes', 'commit_to_answer_ms', 'p99'), ' ms')}", "-"),
    ]  # fmt: skip


def _point_query(r: dict[str, Any]) -> list[Row]:
    rows = []
    for layout in ("ranges", "spread"):
        figures = " / ".join(
            f"{_num(_get(r, layout, count, 'end_to_end_ms', 'p50'), ' ms', 2)}"
            for count in ("10", "100", "1000")
        )
        rows.append((f"point query p50 at 10 / 100 / 1,000 segments ({layout})", figures, "<= 10 ms, flat"))  # fmt: skip
        rows.append((f"  p99 at 1,000 segments ({layout}); p50 1,000 / 10", f"{_num(_get(r, layout, '1000', 'end_to_end_ms', 'p99'), ' ms', 2)}; {_num(_get(r, layout, 'p50_1000_over_10'), 'x', 2)}", "<= 25 ms"))  # fmt: skip
    return rows


def _point_query_live(r: dict[str, Any]) -> list[Row]:
    rows = []
    for phase, label in (("before", "before compaction"), ("after", "after compaction")):
        for mode, running in (("quiet", "ingestion idle"), ("live", "ingestion running")):
            figures = _get(r, f"{phase}_{mode}") or {}
            slowest = (
                _get(figures, "slowest", -1, "end_to_end_ms") if figures.get("slowest") else None
            )
            firsts = figures.get("first_at_new_generation_ms") or []
            first = (
                f"; first at each new generation, in the broker: up to {_num(max(firsts), ' ms', 2)}"
                if firsts
                else ""
            )
            rows.append((f"point query on {r.get('batches')} real batches, {label}, {running}: p50 / p99 ({figures.get('visible_segments')} segments)", f"{_num(_get(figures, 'end_to_end_ms', 'p50'), ' ms', 2)} / {_num(_get(figures, 'end_to_end_ms', 'p99'), ' ms', 2)} (broker {_num(_get(figures, 'in_broker_ms', 'p50'), ' ms', 2)}; slowest of {_num(_get(figures, 'end_to_end_ms', 'n'), '', 0)}: {_num(slowest, ' ms', 2)}{first})", "<= 10 ms / <= 25 ms"))  # fmt: skip
    return rows


def _concurrency(r: dict[str, Any]) -> list[Row]:
    rows = []
    for kind in ("point", "dashboard, cache off", "dashboard, cache on"):
        levels = r.get(kind) or []
        qps = " / ".join(_num(level.get("queries_per_s")) for level in levels)
        p99 = " / ".join(_num(_get(level, "latency_ms", "p99"), " ms") for level in levels)
        rows.append((f"{kind}: queries/s at 1 / 4 / 16 clients", qps, "-"))
        rows.append((f"{kind}: p99 at 1 / 4 / 16 clients", p99, "-"))
    return rows


def _flight(r: dict[str, Any]) -> list[Row]:
    return [
        (f"{_num(r.get('rows'))}-row result: ExecuteQuery / Flight SQL (ADBC) rows/s", f"{_num(_get(r, 'large_result', 'native_rows_per_s'))} / {_num(_get(r, 'large_result', 'adbc_rows_per_s'))} ({_num(_get(r, 'large_result', 'adbc_over_native'), 'x', 2)})", ">= 0.9x"),
        ("  same, pyarrow.flight generic client rows/s", f"{_num(_get(r, 'large_result', 'generic_flight_rows_per_s'))} ({_num(_get(r, 'large_result', 'generic_over_native'), 'x', 2)})", "-"),
        ("point query p50: ExecuteQuery / Flight SQL (ADBC)", f"{_num(_get(r, 'point_query', 'native_ms', 'p50'), ' ms', 2)} / {_num(_get(r, 'point_query', 'adbc_ms', 'p50'), ' ms', 2)} (+{_num(_get(r, 'point_query', 'flight_adds_p50_ms'), ' ms', 2)})", "<= +2 ms"),
        ("point query p50, ? bound on one prepared statement (ADBC)", f"{_num(_get(r, 'point_query', 'adbc_bound_ms', 'p50'), ' ms', 2)} (+{_num(_get(r, 'point_query', 'bound_flight_adds_p50_ms'), ' ms', 2)})", "-"),
        ("  ADBC driver alone (a canned one-row server) p50: new statement / bound", f"{_num(_get(r, 'adbc_driver_floor', 'adbc_ms', 'p50'), ' ms', 2)} / {_num(_get(r, 'adbc_driver_floor', 'adbc_bound_ms', 'p50'), ' ms', 2)}", "-"),
        ("point query p99: ExecuteQuery / Flight SQL (ADBC)", f"{_num(_get(r, 'point_query', 'native_ms', 'p99'), ' ms', 2)} / {_num(_get(r, 'point_query', 'adbc_ms', 'p99'), ' ms', 2)}", "-"),
        ("cache hit (1,000 rows) p50: ExecuteQuery / Flight SQL (ADBC)", f"{_num(_get(r, 'cache_hit', 'native_ms', 'p50'), ' ms', 2)} / {_num(_get(r, 'cache_hit', 'adbc_ms', 'p50'), ' ms', 2)}", "-"),
    ]  # fmt: skip


def _query(r: dict[str, Any]) -> list[Row]:
    rows = []
    for case, per_size in r.items():
        size, _, versions = case.partition("x")  # "<rows>" (3 versions per key) or "<rows>x<v>"
        if not size.isdigit() or not isinstance(per_size, dict):
            continue
        for name, figures in per_size.items():
            rows.append(
                (
                    f"{int(size):,} rows ({versions or 3} versions per key), {name}: vs ROW_NUMBER / vs latest-only floor",
                    f"{_num(figures.get('speedup_vs_row_number'), 'x')} faster / {_num(figures.get('cost_vs_floor'), 'x', 2)} the floor",
                    ">= 10x (full aggregate, 5M)" if name == "full_aggregate" else "-",
                )
            )  # fmt: skip
    return rows


def _compaction(r: dict[str, Any]) -> list[Row]:
    rows = []
    for name in ("full_aggregate", "filtered_aggregate"):
        before = _get(r, "before", "reads", name, "cost_vs_floor")
        after = _get(r, "after", "reads", name, "cost_vs_floor")
        rows.append((f"{_num(r.get('rows'))} rows, {name}: vs latest-only before / after compaction", f"{_num(before, 'x', 2)} / {_num(after, 'x', 2)}", "after <= 1.2x"))  # fmt: skip
        faster_before = _get(r, "before", "reads", name, "speedup_vs_row_number")
        faster_after = _get(r, "after", "reads", name, "speedup_vs_row_number")
        rows.append((f"{_num(r.get('rows'))} rows, {name}: faster than ROW_NUMBER (same files) before / after compaction", f"{_num(faster_before, 'x')} / {_num(faster_after, 'x')}", ">= 3x / >= 10x"))  # fmt: skip
    rows.append(("files per day before / after", f"{_num(_get(r, 'before', 'layout', 'files_per_day'))} / {_num(_get(r, 'after', 'layout', 'files_per_day'))}", "-"))  # fmt: skip
    rows.append(("compaction rows/s (bare read+write rows/s)", f"{_num(_get(r, 'compaction', 'rows_per_s'))} ({_num(_get(r, 'compaction', 'bare_rows_per_s'))}), {_num(_get(r, 'compaction', 'vs_bare'), 'x', 2)}", "-"))  # fmt: skip
    rows.append(("merge+write vs bare read+write, median of alternating rounds", f"{_num(_get(r, 'compaction', 'rounds', 'merge_median_s'), ' s', 2)} vs {_num(_get(r, 'compaction', 'rounds', 'bare_median_s'), ' s', 2)}: {_num(_get(r, 'compaction', 'rounds', 'merge_vs_bare'), 'x', 2)}", ">= 0.6x"))  # fmt: skip
    rows.append(("reclaiming history: table bytes before / after", f"{_num(_get(r, 'reclaim', 'table_bytes_before'))} / {_num(_get(r, 'reclaim', 'table_bytes_after'))} ({_get(r, 'reclaim', 'steps')} steps)", "-"))  # fmt: skip
    return rows


def _abuse(r: dict[str, Any]) -> list[Row]:
    recovery = r.get("recovery") or {}
    rows = [
        ("hostile queries refused or bounded", str(r.get("refused_or_bounded")), "100%"),
        ("INTERNAL answers / broker deaths", f"{r.get('internal_errors')} / {r.get('broker_deaths')}", "0 / 0"),
        ("another client's query answered after every kind", _num(r.get("next_query_always_answered")), "yes"),
        ("peak RSS broker / JVM", f"{_num(r.get('peak_rss_broker_mib'), ' MiB', 0)} / {_num(r.get('peak_rss_jvm_mib'), ' MiB', 0)}", "-"),
    ]  # fmt: skip
    for mode, times in recovery.items():
        rows.append((f"{mode}: next query after a cancel / a deadline / a killed JVM", " / ".join(_num(times.get(k), " s", 2) for k in ("after_cancel_s", "after_deadline_s", "after_killed_jvm_s")), "-"))  # fmt: skip
    return rows


def _chaos(r: dict[str, Any]) -> list[Row]:
    faults, queries = r.get("faults") or {}, r.get("queries") or {}
    anomalies = sum((r.get("anomalies") or {}).values())
    run = f"fault-injection run, {_num(r.get('duration_s'))} s, seed {r.get('seed')}"
    return [
        (f"{run}: anomalies", str(anomalies), "0"),
        ("faults injected (kinds)", f"{sum(faults.values())} ({len(faults)})", "every kind"),
        (
            "queries / acknowledged writes",
            f"{sum(queries.values()):,} / {r.get('writes_acknowledged', 0):,}",
            "-",
        ),
        (
            "queries answered outside fault windows",
            _num(_get(r, "availability", "no fault", "share"), "", 3),
            "-",
        ),
    ]


def _metrics(r: dict[str, Any]) -> list[Row]:
    ms = r.get("scrape_ms") or {}
    return [
        ("metrics scrape, 100 tables (p50 / p99)", f"{_num(ms.get('p50'), ' ms')} / {_num(ms.get('p99'), ' ms')}", "< 50 ms"),
        ("metrics scrape size", _num(r.get("scrape_bytes"), " bytes"), ""),
    ]  # fmt: skip


def _tpch(r: dict[str, Any]) -> list[Row]:
    rows = []
    for phase in ("before", "after"):
        figures = r.get(phase) or {}
        if not figures:
            continue
        worst = "; ".join(
            f"{w['query']} {_num(w['ratio'], 'x', 2)}"
            + (f" ({w['verdict']}, A/A {_num(w['aa_ratio'], 'x', 2)})" if "verdict" in w else "")
            for w in figures.get("worst", [])
        )
        target = "each <= 1.3x, total <= 1.05x" if phase == "before" else "each <= 1.15x"
        rows.append((f"22 queries at scale {r.get('scale')}, {phase} compaction: total / geometric mean, Horizon / plain Spark", f"{_num(figures.get('total_horizon_ms'), ' ms', 0)} vs {_num(figures.get('total_plain_ms'), ' ms', 0)} ({_num(figures.get('total_ratio'), 'x', 2)}) / {_num(figures.get('geomean_ratio'), 'x', 2)}", target))  # fmt: skip
        rows.append((f"  worst three, {phase} compaction", worst, "-"))
    ingest = r.get("ingest_seconds") or {}
    rows.append(("ingestion of the eight tables, 3 batches each", _num(sum(ingest.values()), " s"), "-"))  # fmt: skip
    return rows


EXTRACTORS: dict[str, Extractor] = {
    "timeline": _timeline,
    "watermark": _watermark,
    "rewrite": _rewrite,
    "ingest": _ingest,
    "ingest_server": _ingest_server,
    "broker": _broker,
    "point_query": _point_query,
    "point_query_live": _point_query_live,
    "concurrency": _concurrency,
    "flight": _flight,
    "query": _query,
    "compaction": _compaction,
    "abuse": _abuse,
    "metrics": _metrics,
    "tpch": _tpch,
    "chaos": _chaos,
}


def write_summary() -> Path:
    """SUMMARY.md: every benchmark's figures, each with the commit, date and load it ran at,
    under a header that says which commits the table mixes (one run of one commit is the goal)."""
    rows = ["| benchmark | measure | result | target |", "| --- | --- | --- | --- |"]
    commits: dict[str, list[str]] = {}
    for name in (*BENCHMARKS, "chaos"):  # chaos runs apart (make chaos), its last result shows
        path = RESULTS_DIR / f"{name}.json"
        if not path.exists():
            rows.append(f"| {name} | (not run) | | |")
            continue
        payload = json.loads(path.read_text())
        results = payload.get("results", payload)  # older files hold the figures at the top
        for measure, result, target in EXTRACTORS[name](results):
            rows.append(f"| {name} | {measure} | {result} | {target} |")
        commit = payload.get("commit", "unknown")
        commits.setdefault(commit, []).append(name)
        load = _get(payload, "machine", "load_average")
        ran = f"{payload.get('recorded_at', '?')}, commit {commit}"
        rows.append(f"| {name} | recorded | {ran}" + (f", load {load[0]}" if load else "") + " | |")
    here = machine()
    lines = [
        "# Benchmark summary",
        "",
        f"- written {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} at commit {code_commit()}",
        f"- machine: {here['cpus']} cores, {here['memory_gib']} GiB, Python {here['python']}, "
        f"load average now {' / '.join(str(v) for v in here['load_average'])}",
    ]
    if len(commits) > 1:
        mixed = "; ".join(f"{c}: {', '.join(names)}" for c, names in commits.items())
        lines.append(f"- **figures from more than one commit** ({mixed})")
    summary = RESULTS_DIR / "SUMMARY.md"
    lines += ["", *rows]
    summary.write_text("\n".join(lines) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short smoke runs")
    parser.add_argument("--only", help="comma-separated subset of " + ",".join(BENCHMARKS))
    parser.add_argument("--summary", action="store_true", help="only rewrite SUMMARY.md")
    args = parser.parse_args(argv)
    chosen = args.only.split(",") if args.only else list(BENCHMARKS)
    unknown = set(chosen) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    failures = []
    if not args.summary:
        for name in chosen:
            command = [sys.executable, "-m", f"bench.{name}", *(["--quick"] if args.quick else [])]
            print(f"\n=== bench.{name} ===", flush=True)
            started = time.perf_counter()
            if subprocess.run(command, check=False).returncode != 0:
                failures.append(name)
            print(f"(bench.{name} took {time.perf_counter() - started:.0f} s)", flush=True)
    summary = write_summary()
    print(f"\nwrote {summary}")
    print(summary.read_text())
    if failures:
        print(f"failed: {', '.join(failures)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
