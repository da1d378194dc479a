"""What the probes here share: the file lists a ``bench.tpch --keep-work`` run's plans name, and
interleaved timing of TPC-H queries over several sessions of one Spark (diagnosis only)."""

from __future__ import annotations

import random
import re
import statistics
import time
from typing import Any

from bench.tpch_queries import QUERIES

_FILE_INDEX = re.compile(r"InMemoryFileIndex\(\d+ paths\)\[([^\]]*)\]")


def plan_files(plans: str) -> dict[tuple[str, str], list[str]]:
    """``(side, table) -> files``, side ``horizon`` or ``plain``, from a run's plans."""
    files: dict[tuple[str, str], list[str]] = {}
    for group in _FILE_INDEX.findall(plans):
        paths = [path.strip() for path in group.split(", ")]
        horizon = re.search(r"/horizon/([a-z]+)/segments/", paths[0])
        plain = re.search(r"/plain/([a-z]+)/", paths[0])
        side, found = ("horizon", horizon) if horizon else ("plain", plain)
        assert found is not None, paths[0]
        files.setdefault((side, found.group(1)), paths)
    return files


def compare(sessions: dict[str, Any], numbers: list[int], rounds: int) -> None:
    """Each query once per session (warm-up), then ``rounds`` shuffled rounds; prints medians
    and their ratio to the ``plain`` session's."""
    for number in numbers:
        sql = QUERIES[number]
        for session in sessions.values():
            session.sql(sql).collect()
        times: dict[str, list[float]] = {name: [] for name in sessions}
        for _ in range(rounds):
            order = list(sessions)
            random.shuffle(order)
            for name in order:
                started = time.perf_counter()
                sessions[name].sql(sql).collect()
                times[name].append((time.perf_counter() - started) * 1000)
        base = statistics.median(times["plain"])
        cells = [
            f"{name} {statistics.median(v):.0f} ({statistics.median(v) / base:.2f}x)"
            for name, v in times.items()
        ]
        print(f"Q{number:02d}", "  ".join(cells), flush=True)
