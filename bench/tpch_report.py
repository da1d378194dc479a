"""``bench.tpch``'s printed report: per query the ratio beside its noise and verdict, then the
acceptance summary of each phase (total, geometric mean, the worst three with why)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

COLUMNS = [
    "query", "rounds", "Horizon ms", "plain ms", "ratio", "ratio range", "A/A", "A/A spread",
    "verdict", "outside Spark ms", "plans differ in", "reads differ (Horizon/plain)",
]  # fmt: skip


def print_wide(title: str, rows: list[tuple[Any, ...]]) -> None:
    """The table at full width also into a log file (rich cuts a non-terminal's at 80)."""
    table = Table(title=title)
    for column in COLUMNS:
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    Console(width=260).print(table)


def _range(values: list[float]) -> str:
    return f"{values[0]:.2f}-{values[1]:.2f}x"


def query_row(name: str, q: dict[str, Any]) -> tuple[Any, ...]:
    return (
        name,
        q["rounds"],
        q["horizon_ms"],
        q["plain_ms"],
        f"{q['ratio']:.2f}x",
        _range(q["ratio_range"]),
        f"{q['aa_ratio']:.2f}x",
        f"{q['aa_spread']:.2f}x",
        q["verdict"],
        q["outside_spark_ms"],
        ", ".join(q["plans_differ_in"]) or "-",
        q["reads_differ"] or "-",
    )


def summary(phase: str, figures: dict[str, Any]) -> str:
    """One phase's acceptance lines: the total against its A/A and range, the geometric mean,
    the queries above the target (beyond noise, and within it), the worst three with why."""
    total = (
        f"{phase} compaction: total {figures['total_horizon_ms'] / 1000:.2f} s vs "
        f"{figures['total_plain_ms'] / 1000:.2f} s ({figures['total_ratio']:.2f}x, range "
        f"{_range(figures['total_range'])}; A/A total {figures['aa_total_ratio']:.2f}x, "
        f"single-query A/A spread median {figures['aa_median_spread']:.2f}x, max "
        f"{figures['aa_max_spread']:.2f}x)"
    )
    if "total_verdict" in figures:
        total += f", target {figures['total_target']:.2f}x: {figures['total_verdict']}"
    lines = [
        total + f"; geometric mean {figures['geomean_ratio']:.2f}x",
        f"  each <= {figures['target']:.2f}x: missed by "
        f"{', '.join(figures['missed']) or 'none'}; above it within noise: "
        f"{', '.join(figures['within_noise']) or 'none'}",
        "  worst: "
        + "; ".join(
            f"{w['query']} {w['ratio']:.2f}x ({w['verdict']}; range {_range(w['ratio_range'])}, "
            f"A/A {w['aa_ratio']:.2f}x, spread {w['aa_spread']:.2f}x; plans differ in "
            f"{', '.join(w['why']) or 'nothing'}; reads differ: {w['reads'] or 'nothing'})"
            for w in figures["worst"]
        ),
    ]
    return "\n".join(lines)


def report(results: dict[str, Any]) -> None:
    print(f"seconds by step: {results.get('step_seconds')}; Spark settings: {results.get('conf')}")
    for phase in ("before", "after"):
        if phase not in results:
            continue
        figures = results[phase]
        print_wide(
            f"TPC-H at scale {results['scale']}, {phase} compaction: Horizon / plain Spark "
            f"(interleaved rounds, at least {results['rounds']}, more within "
            f"{results.get('round_budget_s', 0):g} s a query; medians; ratio range: 90% "
            "bootstrap over rounds; A/A = plain again / plain, spread: the farthest of it and "
            "its range from 1; verdict against the target, within noise when the A/A spread "
            "or the range covers the gap)",
            [query_row(name, q) for name, q in figures["queries"].items()],
        )
        print(summary(phase, figures))
