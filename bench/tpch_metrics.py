"""What one query's run read, per table scan, from Spark's own SQL metrics: both sides alike.

Horizon runs its queries in the broker, on the same Spark application as the plain session, so
neither side's DataFrame is needed: every SQL execution the application ran lands in its SQL
status store (kept with the UI off), with its final plan graph (adaptive re-plans included) and
the values of its metrics. :func:`executions_since` takes the executions a run started,
:func:`read_by_scan` sums each ``Scan parquet`` node's files and bytes read per TPC-H table, and
the tasks of every stage the run's jobs ran. Parquet opens one footer per file split a task
reads, so the files read and the tasks together bound the footers opened.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from bench.tpch_plans import table_of

_UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}
_SIZE = re.compile(r"([\d.,]+)\s*(B|KiB|MiB|GiB|TiB)\b")
_NUMBER = re.compile(r"[\d,]+")


@dataclass
class ScanReads:
    """Per TPC-H table: scans run, files and bytes read, rows out; the run's tasks."""

    scans: dict[str, int] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    scan_ms: dict[str, int] = field(default_factory=dict)
    tasks: int = 0

    def add(self, table: str, files: int, size: int, rows: int, scan_ms: int = 0) -> None:
        self.scan_ms[table] = self.scan_ms.get(table, 0) + scan_ms
        self.scans[table] = self.scans.get(table, 0) + 1
        self.files[table] = self.files.get(table, 0) + files
        self.bytes[table] = self.bytes.get(table, 0) + size
        self.rows[table] = self.rows.get(table, 0) + rows

    def as_dict(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks,
            "files": dict(sorted(self.files.items())),
            "bytes": dict(sorted(self.bytes.items())),
            "rows": dict(sorted(self.rows.items())),
            "scans": dict(sorted(self.scans.items())),
            "scan_ms": dict(sorted(self.scan_ms.items())),
        }


def parse_size(text: str) -> int:
    """A size metric's total: ``12.3 MiB`` or ``total (min, med, max ...)\\n12.3 MiB (...)``."""
    sizes = _SIZE.findall(text)
    if not sizes:
        return 0
    number, unit = sizes[0]
    return round(float(number.replace(",", "")) * _UNITS[unit])


def parse_count(text: str) -> int:
    """A sum metric's total (its first number; a task-level metric prints the total first)."""
    body = text.split("\n", 1)[-1] if text.startswith("total") else text
    found = _NUMBER.search(body)
    return int(found.group(0).replace(",", "")) if found else 0


def parse_ms(text: str) -> int:
    """A timing metric's total in milliseconds (``58 ms``, ``1.2 s``, ``2.5 m``, ``1.1 h``)."""
    body = text.split("\n", 1)[-1] if text.startswith("total") else text
    found = re.search(r"([\d.,]+)\s*(ms|s|m|h)\b", body)
    if found is None:
        return 0
    scale = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}[found.group(2)]
    return round(float(found.group(1).replace(",", "")) * scale)


def last_execution_id(spark: Any) -> int:
    """The greatest SQL execution id so far (-1 before the first)."""
    store = spark._jsparkSession.sharedState().statusStore()
    executions = store.executionsList()
    count = executions.size()
    return max((executions.apply(i).executionId() for i in range(count)), default=-1)


def read_by_scan(spark: Any, after: int) -> ScanReads:
    """The scans of every execution with an id above ``after``, summed per table."""
    jvm_session = spark._jsparkSession
    store = jvm_session.sharedState().statusStore()
    tracker = spark.sparkContext.statusTracker()
    reads = ScanReads()
    executions = store.executionsList()
    for index in range(executions.size()):
        execution = executions.apply(index)
        if execution.executionId() <= after:
            continue
        values = store.executionMetrics(execution.executionId())
        graph = store.planGraph(execution.executionId())
        nodes = graph.allNodes()
        for position in range(nodes.size()):
            node = nodes.apply(position)
            if not node.name().startswith("Scan parquet"):
                continue
            metrics = _metric_values(node, values)
            reads.add(
                table_of(_columns(node.desc())),
                parse_count(metrics.get("number of files read", "0")),
                parse_size(metrics.get("size of files read", "0 B")),
                parse_count(metrics.get("number of output rows", "0")),
                parse_ms(metrics.get("scan time", "0 ms")),
            )
        jobs = execution.jobs().keys().toList()
        for job_index in range(jobs.size()):
            job = tracker.getJobInfo(int(jobs.apply(job_index)))
            for stage_id in job.stageIds if job is not None else ():
                stage = tracker.getStageInfo(stage_id)
                reads.tasks += stage.numTasks if stage is not None else 0
    return reads


def _metric_values(node: Any, values: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    metrics = node.metrics()
    for index in range(metrics.size()):
        metric = metrics.apply(index)
        value = values.get(metric.accumulatorId())
        if value.isDefined():
            found[metric.name()] = str(value.get())
    return found


def _columns(description: str) -> str:
    start = description.find("[")
    end = description.find("]", start)
    return description[start + 1 : end] if start >= 0 and end > start else description
