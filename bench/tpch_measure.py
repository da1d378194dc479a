"""Timing one TPC-H query on both sides, with the noise of the run beside the ratio.

Each round runs three sides in an order that rotates from round to round: Horizon, plain Spark,
and plain Spark again. The second plain side is an A/A control: the ratio of its median to the
first plain median is what the same query on the same tables gets from noise alone in this run,
printed beside Horizon's ratio so a reader can tell a gap from noise. After the timed rounds one
more run of each side is metered (:mod:`bench.tpch_metrics`): files, bytes and rows read per table
scan, scan time, tasks. It is not timed, so reading the metrics costs the timings nothing.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any

from bench.tpch_answers import check, rows_of
from bench.tpch_metrics import last_execution_id, read_by_scan
from bench.tpch_queries import QUERIES
from bench.tpch_stats import (
    MISSED,
    TARGETS,
    TOTAL_TARGET,
    WITHIN_NOISE,
    query_noise,
    spread,
    total_range,
    verdict,
)


@dataclass(frozen=True)
class Rounds:
    """How many rounds a query gets: at least ``least``, then more while its timed runs have
    taken under ``budget_s`` seconds, at most ``most`` (0: ``least``)."""

    least: int
    budget_s: float = 0.0
    most: int = 0


def another_round(rounds: Rounds, done: int, seconds: float) -> bool:
    """Whether a query that has run ``done`` rounds in ``seconds`` gets one more."""
    if done < rounds.least:
        return True
    return done < rounds.most and seconds < rounds.budget_s


SIDES = ("horizon", "plain", "again")
"""Horizon, plain Spark, and plain Spark again (the A/A control)."""


def side_order(round_index: int) -> tuple[str, ...]:
    """The sides of one round: rotated each round, reversed every other cycle of three, so each
    side runs first, second and third, after each other side, equally often."""
    shift = round_index % len(SIDES)
    order = SIDES[shift:] + SIDES[:shift]
    return order if (round_index // len(SIDES)) % 2 == 0 else tuple(reversed(order))


def check_both(number: int, client: Any, plain: Any, expected: list[Any], token: Any) -> Any:
    """Query ``number`` on both sides, each answer checked against DuckDB's; Horizon's result."""
    sql = QUERIES[number]
    answer = client.execute(sql, cache=False, min_snapshot=token)
    check(number, "Horizon", rows_of(answer.table), expected)
    check(number, "plain Spark", rows_of(plain.sql(sql).toArrow()), expected)
    return answer


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples), 1)


def time_rounds(
    number: int, client: Any, plain: Any, rounds: Rounds | int, token: Any
) -> dict[str, Any]:
    """Interleaved runs of the three sides, as many as ``rounds`` says (a cheap query gets more
    rounds for the same time). Each side's median, the ratios, the samples and the query's
    noise (:mod:`bench.tpch_stats`)."""
    sql = QUERIES[number]
    rounds = rounds if isinstance(rounds, Rounds) else Rounds(rounds)
    samples: dict[str, list[float]] = {side: [] for side in SIDES}
    outside: list[float] = []
    spent = time.perf_counter()
    index = 0
    while another_round(rounds, index, time.perf_counter() - spent):
        for side in side_order(index):
            started = time.perf_counter()
            if side == "horizon":
                result = client.execute(sql, cache=False, min_snapshot=token)
                elapsed = (time.perf_counter() - started) * 1000
                outside.append(elapsed - result.trailer.timings.spark_ms)
            else:
                plain.sql(sql).toArrow()
                elapsed = (time.perf_counter() - started) * 1000
            samples[side].append(elapsed)
        index += 1
    return figures_of(samples, outside, seed=number)


def figures_of(samples: dict[str, list[float]], outside: list[float], *, seed: int) -> dict[str, Any]:  # fmt: skip
    """The medians, ratios and noise of one query's rounds."""
    figures: dict[str, Any] = {
        "rounds": len(samples["horizon"]),
        "horizon_ms": _median_ms(samples["horizon"]),
        "plain_ms": _median_ms(samples["plain"]),
        "plain_again_ms": _median_ms(samples["again"]),
        "outside_spark_ms": _median_ms(outside),
    }
    figures["ratio"] = round(figures["horizon_ms"] / figures["plain_ms"], 3)
    figures["aa_ratio"] = round(figures["plain_again_ms"] / figures["plain_ms"], 3)
    figures.update(query_noise(samples, seed))
    figures["samples_ms"] = {side: [round(v, 1) for v in values] for side, values in samples.items()}  # fmt: skip
    return figures


def metered(spark: Any, number: int, client: Any, plain: Any, token: Any) -> dict[str, Any]:
    """One untimed run of each side with what it read per table scan."""
    sql = QUERIES[number]
    reads = {}
    for side in ("horizon", "plain"):
        before = last_execution_id(spark)
        if side == "horizon":
            client.execute(sql, cache=False, min_snapshot=token)
        else:
            plain.sql(sql).toArrow()
        reads[side] = read_by_scan(spark, before).as_dict()
    return reads


def reads_differ(reads: dict[str, Any]) -> str:
    """Per table whose scans read different files or bytes: ``lineitem files 12/4, 1.2/1.0 MiB``
    (Horizon / plain); then the tasks if they differ."""
    ours, theirs = reads["horizon"], reads["plain"]
    parts = []
    for table in sorted(set(ours["files"]) | set(theirs["files"])):
        files = (ours["files"].get(table, 0), theirs["files"].get(table, 0))
        size = (ours["bytes"].get(table, 0), theirs["bytes"].get(table, 0))
        if files[0] != files[1] or abs(size[0] - size[1]) > 0.02 * max(size):
            parts.append(
                f"{table} files {files[0]}/{files[1]}, "
                f"{size[0] / 2**20:.2f}/{size[1] / 2**20:.2f} MiB"
            )
    if ours["tasks"] != theirs["tasks"]:
        parts.append(f"tasks {ours['tasks']}/{theirs['tasks']}")
    return "; ".join(parts)


def noise(per_query: dict[str, Any]) -> dict[str, Any]:
    """The run's A/A figures: the plain-again total over the plain total, and the spread of the
    single-query A/A ratios (median and greatest distance from 1, as a factor)."""
    again = sum(q["plain_again_ms"] for q in per_query.values())
    plain = sum(q["plain_ms"] for q in per_query.values())
    spread = sorted(abs(math.log(q["aa_ratio"])) for q in per_query.values())
    return {
        "aa_total_ratio": round(again / plain, 3),
        "aa_median_spread": round(math.exp(statistics.median(spread)), 3),
        "aa_max_spread": round(math.exp(spread[-1]), 3),
    }


def totals(per_query: dict[str, Any], phase: str = "before") -> dict[str, Any]:
    """The total of the medians on each side, the geometric mean of the ratios, the worst three
    (each with its A/A ratio, verdict and why), the run's noise, and each query's verdict
    against the phase's target (:mod:`bench.tpch_stats`)."""
    target = TARGETS[phase]
    for figures in per_query.values():
        figures["verdict"] = verdict(
            figures["ratio"], tuple(figures["ratio_range"]), figures["aa_spread"], target
        )
    ratios = [figures["ratio"] for figures in per_query.values()]
    worst = sorted(per_query, key=lambda name: per_query[name]["ratio"], reverse=True)[:3]
    horizon = sum(figures["horizon_ms"] for figures in per_query.values())
    plain = sum(figures["plain_ms"] for figures in per_query.values())
    result: dict[str, Any] = {
        "target": target,
        "total_horizon_ms": round(horizon, 1),
        "total_plain_ms": round(plain, 1),
        "total_ratio": round(horizon / plain, 3),
        "total_range": total_range({n: q["samples_ms"] for n, q in per_query.items()}, seed=0),
        "geomean_ratio": round(math.exp(statistics.fmean(math.log(r) for r in ratios)), 3),
        **noise(per_query),
        "missed": [name for name, q in per_query.items() if q["verdict"] == MISSED],
        "within_noise": [name for name, q in per_query.items() if q["verdict"] == WITHIN_NOISE],
        "worst": [
            {
                "query": name,
                "ratio": per_query[name]["ratio"],
                "aa_ratio": per_query[name]["aa_ratio"],
                "ratio_range": per_query[name]["ratio_range"],
                "aa_spread": per_query[name]["aa_spread"],
                "verdict": per_query[name]["verdict"],
                "why": per_query[name]["plans_differ_in"],
                "reads": per_query[name].get("reads_differ", ""),
            }
            for name in worst
        ],
    }
    if phase in TOTAL_TARGET:
        result["total_target"] = TOTAL_TARGET[phase]
        result["total_verdict"] = verdict(
            result["total_ratio"], tuple(result["total_range"]),
            spread(result["aa_total_ratio"]), TOTAL_TARGET[phase],
        )  # fmt: skip
    return result
