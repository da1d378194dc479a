"""Where a subscription's delta spends its time: each query a subscription runs, split as the
engine splits it (admission, rewrite, views, Spark) and its Spark jobs and stages, from Spark's
own status store (no listener: the store keeps every job with its group and times).

``bench.subscribe`` wraps the broker engine's ``execute`` while a subscription is open
(:class:`QueryProfile`): the subscription's queries run exactly as before, each
:class:`~horizon_broker.broker.engine.execution.Execution` is kept to read its timings once the
subscription ended. Per commit it reports the queries started between the batch and its delta
(how many, how many gave no rows) and the breakdown of the one that gave the delta.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from bench.report import percentile


@dataclasses.dataclass(slots=True)
class ProfiledQuery:
    """One query of a subscription: when it began (perf_counter), its SQL's kind, its group."""

    began: float
    feed: bool
    group: str
    execution: Any
    rows: int
    """The answer's rows when its first batches were the whole of it (-1: more came later)."""


@dataclasses.dataclass(frozen=True, slots=True)
class SparkJobs:
    """A job group's jobs as Spark's status store keeps them."""

    jobs: int
    stages: int
    skipped_stages: int
    tasks: int
    span_ms: float
    """From the first job's submission to the last one's completion."""


class QueryProfile:
    """The queries the broker's engine started while it was installed (``profiling``)."""

    def __init__(self) -> None:
        self.queries: list[ProfiledQuery] = []
        self._lock = threading.Lock()

    @contextmanager
    def profiling(self, engine: Any) -> Iterator[QueryProfile]:
        """Record every subscription query ``engine`` runs until the block ends."""
        original = engine.execute

        def execute(sql: str, principal: Any, scope: Any, **options: Any) -> Any:
            began = time.perf_counter()
            execution = original(sql, principal, scope, **options)
            if scope.query_id == "subscribe":
                rows = _head_rows(execution)
                query = ProfiledQuery(began, "table_changes" in sql, scope.group, execution, rows)
                with self._lock:
                    self.queries.append(query)
            return execution

        engine.execute = execute
        try:
            yield self
        finally:
            del engine.execute  # the class's method again

    def between(self, start: float, end: float) -> list[ProfiledQuery]:
        with self._lock:
            return [q for q in self.queries if start <= q.began < end]


def spark_jobs(spark: Any, groups: Sequence[str]) -> dict[str, SparkJobs]:
    """Each of ``groups``' jobs from the status store (read once, after the runs)."""
    wanted = set(groups)
    found: dict[str, list[Any]] = {}
    try:
        listed = spark.sparkContext._jsc.sc().statusStore().jobsList(None)  # a Scala Seq
        for job in (listed.apply(i) for i in range(listed.length())):
            group = job.jobGroup()
            if group.isDefined() and group.get() in wanted:
                found.setdefault(group.get(), []).append(job)
    except Exception as error:  # a figure missing, not a failed run
        print(f"  (Spark's status store unreadable: {error!s:.120})", flush=True)
        return {}
    summary = {}
    for group, jobs in found.items():
        starts = [
            j.submissionTime().get().getTime() for j in jobs if j.submissionTime().isDefined()
        ]
        ends = [j.completionTime().get().getTime() for j in jobs if j.completionTime().isDefined()]
        summary[group] = SparkJobs(
            jobs=len(jobs),
            stages=sum(j.stageIds().length() for j in jobs),
            skipped_stages=sum(j.numSkippedStages() for j in jobs),
            tasks=sum(j.numTasks() for j in jobs),
            span_ms=float(max(ends) - min(starts)) if starts and ends else 0.0,
        )
    return summary


def _p50(values: Sequence[float]) -> float:
    return round(percentile(values, 0.5), 1)


def breakdown(
    spark: Any, profile: QueryProfile, commits: Sequence[tuple[float, float, float]]
) -> dict[str, Any]:
    """Medians over ``commits`` (each: the batch began, the next batch began, the delta
    arrived) of the queries per commit and of the delta's own query, split."""
    per_commit, empty, feed = [], [], []
    split: dict[str, list[float]] = {
        k: [] for k in ("queued", "rewrite", "views", "spark", "outside_jobs", "jobs_span")
    }
    counts: dict[str, list[float]] = {k: [] for k in ("jobs", "stages", "skipped", "tasks")}
    deltas = []
    for began, next_began, arrived in commits:
        queries = profile.between(began, next_began)
        per_commit.append(len(queries))
        empty.append(sum(1 for q in queries if q.rows == 0))
        feed.append(sum(1 for q in queries if q.feed))
        before = [q for q in queries if q.began < arrived]
        if before:
            deltas.append(before[-1])
    jobs = spark_jobs(spark, [q.group for q in deltas])
    for query in deltas:
        execution = query.execution
        spent = jobs.get(query.group, SparkJobs(0, 0, 0, 0, 0.0))
        spark_ms = execution.spark_s * 1000
        split["queued"].append(execution.queued_s * 1000)
        split["rewrite"].append(execution.rewrite_s * 1000)
        split["views"].append(execution.views_s * 1000)
        split["spark"].append(spark_ms)
        split["jobs_span"].append(spent.span_ms)
        split["outside_jobs"].append(max(0.0, spark_ms - spent.span_ms))
        counts["jobs"].append(spent.jobs)
        counts["stages"].append(spent.stages)
        counts["skipped"].append(spent.skipped_stages)
        counts["tasks"].append(spent.tasks)
    return {
        "queries_per_commit": _p50(per_commit),
        "empty_queries_per_commit": _p50(empty),
        "feed_queries_per_commit": _p50(feed),
        "delta_query_ms_p50": {name: _p50(values) for name, values in split.items()},
        "delta_query_spark_p50": {name: _p50(values) for name, values in counts.items()},
    }


def _head_rows(execution: Any) -> int:
    """Rows of a started query's answer when its first batches hold all of it, else -1."""
    if execution.rest is not None:
        return -1
    return sum(batch.num_rows for batch in execution.head)
