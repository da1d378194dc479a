"""What a chaos run's results say about its recorded history (pure): availability inside each
fault kind's windows and outside any (with a few of the unanswered queries), error samples, and
when anomalies were first seen. Every time is in seconds from the readers' start, the origin of
the fault windows too."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

UNANSWERED_SAMPLES = 8
"""Unanswered queries described per fault kind in the results."""


def first_anomaly_s(anomalies: list[Any], since: float) -> float | None:
    """Seconds from the readers' start to the first read an anomaly names."""
    times = [a.read.started for a in anomalies if a.read is not None]
    return round(min(times) - since, 1) if times else None


def detail(anomaly: Any, since: float) -> str:
    """An anomaly as a line, prefixed with when its read started (the fault windows' origin)."""
    if anomaly.read is None:
        return f"end of run: {anomaly.describe()}"
    return f"{anomaly.read.started - since:.1f} s: {anomaly.describe()}"


def first_by_kind(anomalies: list[Any], since: float) -> dict[str, float]:
    first: dict[str, float] = {}
    for anomaly in anomalies:
        if anomaly.read is not None:
            at = round(anomaly.read.started - since, 1)
            first[anomaly.kind] = min(first.get(anomaly.kind, at), at)
    return dict(sorted(first.items()))


def error_samples(reads: list[Any]) -> dict[str, list[str]]:
    """A few messages of each error status (the documented ones too: they should make sense)."""
    samples: dict[str, list[str]] = defaultdict(list)
    for read in reads:
        if not read.ok and len(samples[read.error]) < 3 and read.message not in samples[read.error]:
            samples[read.error].append(f"{read.kind}: {read.message[:300]}")
    return dict(samples)


def availability(recorded: Any, since: float = 0.0) -> dict[str, dict[str, Any]]:
    """Share of queries answered, for the reads overlapping each kind of fault, and for the
    rest; with a few of the unanswered (when, which read, which broker, why: ``since`` is the
    readers' start)."""
    totals: dict[str, Counter[str]] = defaultdict(Counter)
    unanswered: dict[str, list[str]] = defaultdict(list)
    for read in recorded.reads:
        kinds = {f.kind for f in recorded.faults_during(read.started, read.ended)} or {"no fault"}
        for kind in kinds:
            totals[kind]["queries"] += 1
            totals[kind]["answered"] += read.ok
            if not read.ok and len(unanswered[kind]) < UNANSWERED_SAMPLES:
                unanswered[kind].append(
                    f"{read.started - since:.1f}-{read.ended - since:.1f} s {read.client} "
                    f"{read.kind} on {read.broker}: {read.error} {read.message[:160]}"
                )
    return {
        kind: {
            "queries": counts["queries"],
            "answered": counts["answered"],
            "share": round(counts["answered"] / counts["queries"], 3)
            if counts["queries"]
            else None,
            "unanswered": unanswered.get(kind, []),
        }
        for kind, counts in sorted(totals.items())
    }


def segments_logged(commit_logs: Any) -> dict[str, int]:
    """How many segments each server's commit logs name (what ``segment_id_reused`` checked)."""
    from chaos.checker import committed_segments

    counts: Counter[str] = Counter()
    for (server, _table), records in commit_logs.items():
        counts[server] += len(committed_segments(server, records))
    return dict(sorted(counts.items()))
