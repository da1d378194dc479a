"""Timeline benchmark, shaped like Druid's VersionedIntervalTimelineBenchmark.

A year of time chunks at DAY (365), HOUR (8,760) and MINUTE (525,600) granularity, first-generation
segments per chunk, and one overwrite generation over a tenth of the chunks, either as a higher
major version or as overwrite segments with a minor version. Measures lookups of 3 consecutive
chunks at random positions, is_overshadowed, memory per segment, and add/remove (with fallback)
in timelines of 1,000 and 1,000,000 segments.

Times are process CPU time (``time.process_time``): on a shared, loaded machine wall time
mostly measures the scheduler. Wall-clock figures are recorded too. Add/remove is measured in
rounds that alternate between the timeline sizes, so a burst of load hits both alike; the best
round counts. It is measured twice: with the garbage collector as it is, and after
``gc.freeze()`` (what a long-running process can do after its initial load, so the collector
stops re-scanning millions of long-lived objects).

Run: ``.venv/bin/python -m bench.timeline [--quick]``. Writes ``bench/results/timeline.json``.
"""

from __future__ import annotations

import argparse
import gc
import random
import resource
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.report import write_results
from bench.timeline_replace import REPLACES, replace_scenario
from bench.timeline_rigs import (
    GRANULARITIES,
    TABLE,
    chunk_at,
    first_generation,
    timed,
)
from horizon_broker.timeline import Interval, Segment, Timeline


def minor_overwrite(chunk: Interval, version: str, roots: int, size: int = 2) -> list[Segment]:
    return [
        Segment(
            table=TABLE,
            interval=chunk,
            version=version,
            partition=32_768 + index,
            core_partitions=roots,
            root_start=0,
            root_end=roots,
            minor_version=1,
            atomic_update_group_size=size,
        )
        for index in range(size)
    ]


def build_segments(
    step_ms: int, chunks: int, per_chunk: int, overwrite: str, rng: random.Random
) -> list[list[Segment]]:
    """Per chunk, the batch of segments to add: first generation, plus an overwrite generation
    on a tenth of the chunks (``"major"``: a complete higher version; ``"minor"``: a group of
    overwrite segments over all roots; ``"none"``)."""
    batches = []
    for index in range(chunks):
        chunk = chunk_at(step_ms, index)
        batch = first_generation(chunk, "2011-01-01T00:00:00.000Z", per_chunk)
        if overwrite != "none" and rng.random() < 0.1:
            if overwrite == "major":
                batch += first_generation(chunk, "2012-01-01T00:00:00.000Z", per_chunk)
            else:
                batch += minor_overwrite(chunk, "2011-01-01T00:00:00.000Z", per_chunk)
        batches.append(batch)
    return batches


def per_second(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def wall_timed(action: Callable[[], Any]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def lookup_scenario(
    name: str, step_ms: int, chunks: int, per_chunk: int, overwrite: str, lookups: int
) -> dict[str, Any]:
    rng = random.Random(7)
    batches = build_segments(step_ms, chunks, per_chunk, overwrite, rng)
    segment_count = sum(len(batch) for batch in batches)
    timeline = Timeline(TABLE)
    gc.collect()
    add_seconds = timed(lambda: [timeline.add_all(batch) for batch in batches])
    queries = []
    for _ in range(lookups):
        first = rng.randrange(chunks - 2)
        queries.append(
            Interval(chunk_at(step_ms, first).start_ms, chunk_at(step_ms, first + 3).start_ms)
        )
    # the first pass over freshly built views (nothing is cached per piece any more: entries
    # are built per lookup, visible segments per chunk at change time)
    # pay the build's garbage-collector debt now: otherwise the first full collection it owes
    # (seconds at millions of objects) lands in whatever runs next, here the first lookup pass
    gc.collect()
    full_collections = gc.get_stats()[2]["collections"]
    cold_seconds = timed(lambda: [timeline.lookup(query) for query in queries])
    first_pass_full_collections = gc.get_stats()[2]["collections"] - full_collections
    lookup_seconds = min(
        timed(lambda: [timeline.lookup(query) for query in queries]) for _ in range(2)
    )
    wall_seconds = wall_timed(lambda: [timeline.lookup(query) for query in queries])
    probes = [rng.choice(rng.choice(batches)) for _ in range(lookups)]
    overshadow_seconds = timed(lambda: [timeline.is_overshadowed(probe) for probe in probes])
    assert all(len(timeline.lookup(query)) == 3 for query in queries[:100])
    return {
        "scenario": name,
        "granularity_ms": step_ms,
        "chunks": chunks,
        "segments_per_chunk": per_chunk,
        "overwrite": overwrite,
        "segments": segment_count,
        "build_adds_per_s": per_second(segment_count, add_seconds),
        "cold_lookups_per_s": per_second(lookups, cold_seconds),
        "lookups_per_s": per_second(lookups, lookup_seconds),
        "lookup_us": lookup_seconds / lookups * 1e6,
        "wall_lookups_per_s": per_second(lookups, wall_seconds),
        "first_pass_full_gc_collections": first_pass_full_collections,
        "is_overshadowed_per_s": per_second(lookups, overshadow_seconds),
    }


def memory_scenario(step_ms: int, chunks: int, per_chunk: int, overwrite: str) -> dict[str, Any]:
    rng = random.Random(11)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.take_snapshot()
    batches = build_segments(step_ms, chunks, per_chunk, overwrite, rng)
    after_segments = tracemalloc.get_traced_memory()[0]
    timeline = Timeline(TABLE)
    for batch in batches:
        timeline.add_all(batch)
    gc.collect()
    total = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del base
    count = len(timeline)
    return {
        "chunks": chunks,
        "segments_per_chunk": per_chunk,
        "overwrite": overwrite,
        "segments": count,
        "segment_objects_bytes_per_segment": after_segments / count,
        "timeline_bytes_per_segment": (total - after_segments) / count,
        "total_bytes_per_segment": total / count,
    }


class ChangeRig:
    """A timeline of ``total_segments`` first-generation segments and the changes to time in it.

    Every cycle adds and then removes again, so the timeline returns to its starting size; the
    same number of operations runs at every size (cycling over the picked chunks).
    """

    def __init__(self, total_segments: int, per_chunk: int, operations: int) -> None:
        rng = random.Random(3)
        step_ms = GRANULARITIES["HOUR"]
        self.chunks = total_segments // per_chunk
        self.per_chunk = per_chunk
        self.timeline = Timeline(TABLE)
        for index in range(self.chunks):
            self.timeline.add_all(first_generation(chunk_at(step_ms, index), "v1", per_chunk))
        picks = rng.sample(range(self.chunks), min(operations, self.chunks))
        self.cycles = max(1, operations // len(picks))
        self.appended = [
            Segment(
                table=TABLE,
                interval=chunk_at(step_ms, index),
                version="v1",
                partition=per_chunk + 5,
                core_partitions=per_chunk,
            )
            for index in picks
        ]
        self.major = [
            first_generation(chunk_at(step_ms, index), "v2", per_chunk) for index in picks
        ]
        self.minor = [minor_overwrite(chunk_at(step_ms, index), "v1", per_chunk) for index in picks]

    def run_round(self) -> dict[str, tuple[float, float]]:
        """Mean (CPU µs, wall µs) per operation of each kind over one round of cycles."""
        timeline = self.timeline
        sums: dict[str, list[float]] = {}

        def clock(name: str, action: Callable[[Segment], Any], segments: list[Segment]) -> None:
            cpu, wall = time.process_time(), time.perf_counter()
            for segment in segments:
                action(segment)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            total = sums.setdefault(name, [0.0, 0.0])
            total[0] += cpu / len(segments) * 1e6 / self.cycles
            total[1] += wall / len(segments) * 1e6 / self.cycles

        for _ in range(self.cycles):
            clock("add_appended", timeline.add, self.appended)
            clock("remove_appended", timeline.remove, self.appended)
            clock("add_major_overwrite", timeline.add, [s for b in self.major for s in b])
            # removing a partition of a complete higher version falls back to the lower one
            clock("remove_with_major_fallback", timeline.remove, [b[0] for b in self.major])
            for batch in self.major:
                for segment in batch[1:]:
                    timeline.remove(segment)
            clock("add_minor_overwrite", timeline.add, [s for b in self.minor for s in b])
            # an unreadable overwrite segment falls back to the first generation it overwrote
            clock(
                "remove_with_minor_fallback",
                timeline.remove_unreadable,
                [b[0] for b in self.minor],
            )
            for batch in self.minor:
                timeline.remove(batch[1])
        assert len(timeline) == self.chunks * self.per_chunk
        return {name: (cpu, wall) for name, (cpu, wall) in sums.items()}


def change_scenario(sizes: tuple[int, ...], operations: int, rounds: int) -> list[dict[str, Any]]:
    """Best-of-rounds cost of single changes per timeline size, rounds alternating between the
    sizes; first with the collector as it is, then after ``gc.freeze()``."""
    rigs = [ChangeRig(size, 10, operations) for size in sizes]
    rows = [{"segments": len(rig.timeline), "chunks": rig.chunks} for rig in rigs]
    for label in ("", "frozen_gc_"):
        if label:
            gc.collect()
            gc.freeze()
        for _ in range(rounds):
            for rig, row in zip(rigs, rows, strict=True):
                for name, (cpu, wall) in rig.run_round().items():
                    for key, value in (
                        (f"{label}{name}_us", cpu),
                        (f"{label}wall_{name}_us", wall),
                    ):
                        row[key] = min(row.get(key, float("inf")), value)
    gc.unfreeze()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, well under 30 s")
    parser.add_argument(
        "--minute-segments-per-chunk",
        type=int,
        default=10,
        help="segments per MINUTE chunk in the full run (10 = 5.3M segments, ~3-4 GiB)",
    )
    args = parser.parse_args()
    console = Console(width=150)
    quick = args.quick
    lookups = 5_000 if quick else 50_000

    plan = [
        ("DAY", 365, 10),
        ("HOUR", 8_760, 10 if not quick else 2),
        (
            "MINUTE",
            525_600 if not quick else 52_560,
            args.minute_segments_per_chunk if not quick else 1,
        ),
    ]
    lookup_rows = []
    for name, chunks, per_chunk in plan:
        for overwrite in ("none", "major", "minor"):
            if quick and overwrite != "none" and name != "DAY":
                continue
            console.log(f"lookup {name} x{chunks} chunks, {per_chunk}/chunk, overwrite={overwrite}")
            lookup_rows.append(
                lookup_scenario(name, GRANULARITIES[name], chunks, per_chunk, overwrite, lookups)
            )
            gc.collect()

    memory_rows = []
    for per_chunk, overwrite in ((10, "none"), (10, "major"), (10, "minor")):
        chunks = 365 if quick else 8_760
        console.log(f"memory {chunks} chunks x {per_chunk}, overwrite={overwrite}")
        memory_rows.append(memory_scenario(GRANULARITIES["HOUR"], chunks, per_chunk, overwrite))

    sizes = (1_000, 100_000) if quick else (1_000, 1_000_000)
    console.log(f"add/remove in timelines of {', '.join(f'{size:,}' for size in sizes)} segments")
    change_rows = change_scenario(sizes, 500 if quick else 2_000, 3 if quick else 5)
    gc.collect()
    console.log("an update's announcement: replaced segments one by one vs as one batch")
    replace_rows = [replace_scenario(roots, replaced, 3) for roots, replaced in REPLACES]
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    report(console, lookup_rows, memory_rows, change_rows, replace_rows, quick, peak_rss_mib)


def _lookup_table(lookup_rows: list[dict[str, Any]]) -> Table:
    table = Table(title="lookup of 3 consecutive chunks, is_overshadowed (CPU time)")
    for column in (
        "granularity",
        "chunks",
        "segs/chunk",
        "overwrite",
        "segments",
        "adds/s",
        "first-pass lookups/s",
        "lookups/s",
        "lookup µs",
        "wall lookups/s",
        "is_overshadowed/s",
    ):
        table.add_column(column, justify="right")
    names = {value: key for key, value in GRANULARITIES.items()}
    for row in lookup_rows:
        table.add_row(
            names[row["granularity_ms"]],
            f"{row['chunks']:,}",
            str(row["segments_per_chunk"]),
            row["overwrite"],
            f"{row['segments']:,}",
            f"{row['build_adds_per_s']:,.0f}",
            f"{row['cold_lookups_per_s']:,.0f}",
            f"{row['lookups_per_s']:,.0f}",
            f"{row['lookup_us']:.1f}",
            f"{row['wall_lookups_per_s']:,.0f}",
            f"{row['is_overshadowed_per_s']:,.0f}",
        )
    return table


def _memory_table(memory_rows: list[dict[str, Any]]) -> Table:
    memory = Table(title="memory per segment (tracemalloc)")
    for column in (
        "chunks",
        "segs/chunk",
        "overwrite",
        "segments",
        "Segment objects B",
        "timeline B",
        "total B",
    ):
        memory.add_column(column, justify="right")
    for row in memory_rows:
        memory.add_row(
            f"{row['chunks']:,}",
            str(row["segments_per_chunk"]),
            row["overwrite"],
            f"{row['segments']:,}",
            f"{row['segment_objects_bytes_per_segment']:.0f}",
            f"{row['timeline_bytes_per_segment']:.0f}",
            f"{row['total_bytes_per_segment']:.0f}",
        )
    return memory


def report(
    console: Console,
    lookup_rows: list[dict[str, Any]],
    memory_rows: list[dict[str, Any]],
    change_rows: list[dict[str, Any]],
    replace_rows: list[dict[str, Any]],
    quick: bool,
    peak_rss_mib: float,
) -> None:
    console.print(_lookup_table(lookup_rows))

    console.print(_memory_table(memory_rows))

    changes = Table(title="single changes (µs per operation; CPU unless marked wall)")
    keys = [key for key in change_rows[0] if key.endswith("_us")]
    cpu_keys = [key for key in keys if "wall_" not in key and not key.startswith("frozen_gc_")]
    changes.add_column("operation")
    for row in change_rows:
        changes.add_column(f"{row['segments']:,} segments", justify="right")
    changes.add_column("ratio", justify="right")
    for key in keys:
        values = [row[key] for row in change_rows]
        changes.add_row(key[:-3], *(f"{v:.1f}" for v in values), f"{values[-1] / values[0]:.2f}x")
    console.print(changes)

    replaces = Table(title="an update's announcement applied by the follower (CPU ms)")
    for column in ("chunk segments", "replaced", "one by one", "one batch", "ratio"):
        replaces.add_column(column, justify="right")
    for row in replace_rows:
        replaces.add_row(
            f"{row['segments']:,}", f"{row['replaced']:,}", f"{row['one_by_one_ms']:.1f}",
            f"{row['batched_ms']:.1f}", f"{row['ratio']:.0f}x",
        )  # fmt: skip
    console.print(replaces)

    day = next(r for r in lookup_rows if r["chunks"] == 365 and r["overwrite"] == "none")
    largest = max((r for r in lookup_rows if r["overwrite"] == "none"), key=lambda r: r["chunks"])
    lookup_ratio = largest["lookup_us"] / day["lookup_us"]

    def worst_ratio(selected: list[str]) -> float:
        return max(change_rows[-1][key] / change_rows[0][key] for key in selected)

    change_ratio = worst_ratio(cpu_keys)
    frozen_ratio = worst_ratio(["frozen_gc_" + key for key in cpu_keys])
    wall_ratio = worst_ratio(["wall_" + key for key in cpu_keys])
    worst_memory = max(row["total_bytes_per_segment"] for row in memory_rows)
    targets = {
        "lookup_cost_ratio_largest_vs_365": lookup_ratio,
        "lookup_ratio_ok (<=3x)": lookup_ratio <= 3,
        "lookups_per_s_largest": largest["lookups_per_s"],
        "lookups_per_s_ok (>=50k)": largest["lookups_per_s"] >= 50_000,
        "first_pass_lookups_per_s_largest": largest["cold_lookups_per_s"],
        "first_pass_lookups_per_s_ok (>=50k)": largest["cold_lookups_per_s"] >= 50_000,
        "change_cost_ratio_largest_vs_1000": change_ratio,
        "change_ratio_ok (<=2x)": change_ratio <= 2,
        "change_cost_ratio_after_gc_freeze": frozen_ratio,
        "change_cost_ratio_wall_clock": wall_ratio,
        "worst_total_bytes_per_segment": worst_memory,
        "memory_ok (<=1024)": worst_memory <= 1024,
        "peak_rss_mib": peak_rss_mib,
    }
    summary = Table(title="targets" + (" (--quick: reduced sizes)" if quick else ""))
    summary.add_column("target")
    summary.add_column("value", justify="right")
    for key, value in targets.items():
        summary.add_row(key, f"{value:,.2f}" if isinstance(value, float) else str(value))
    console.print(summary)
    minute = max(lookup_rows, key=lambda r: r["chunks"])
    console.print(
        f"MINUTE granularity runs with {minute['segments_per_chunk']} segment(s) per chunk "
        f"({minute['segments']:,} segments); DAY/HOUR with 10."
        if not quick
        else "quick run: sizes reduced."
    )
    path = write_results(
        "timeline",
        {
            "quick": quick,
            "lookup": lookup_rows,
            "memory": memory_rows,
            "changes": change_rows,
            "replace": replace_rows,
            "targets": targets,
        },
    )
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
