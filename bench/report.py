"""Shared output for benchmarks: a rich table on the terminal and a JSON file in bench/results/."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def percentile(samples: Sequence[float], fraction: float) -> float:
    """The ``fraction`` quantile (0..1) of ``samples`` by nearest rank."""
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def summarize(samples: Sequence[float]) -> dict[str, float]:
    return {
        "p50": percentile(samples, 0.50),
        "p99": percentile(samples, 0.99),
        "mean": statistics.fmean(samples) if samples else float("nan"),
        "n": float(len(samples)),
    }


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    Console().print(table)


def write_results(name: str, results: dict[str, Any]) -> Path:
    """Write ``results`` with what they measured (the commit) and where (the machine and its load
    when the run ended) to ``bench/results/<name>.json``."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": name,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": code_commit(),
        "machine": machine(),
        "results": results,
    }
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")
    return path


def code_commit() -> str:
    """The commit the benchmark ran, with ``+changes`` when the working tree differed from it
    (figures of uncommitted code name no commit exactly); "unknown" outside a git checkout."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=10", "HEAD"],
            cwd=root, capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()  # fmt: skip
        changed = subprocess.run(
            ["git", "status", "--porcelain"],
            cwd=root, capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}+changes" if changed else head


def machine() -> dict[str, Any]:
    """Cores, memory and load average: the figures only compare on a like machine and load."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        one = five = fifteen = float("nan")
    try:
        memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (OSError, ValueError):
        memory_gib = float("nan")
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count() or 0,
        "memory_gib": round(memory_gib, 1),
        "load_average": [round(one, 2), round(five, 2), round(fifteen, 2)],
    }
