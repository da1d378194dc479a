"""The first steps of running a query: the result limits it runs under and its deadline.

Pure: the engine applies them before it parses anything, so a query that asks for more than the
broker allows is held to the broker's limits, and one without a deadline still gets one.
"""

from __future__ import annotations

from horizon_broker.broker.config import LimitsConfig
from horizon_broker.broker.spark.executor import ResultLimits

REPREPARE_AFTER_QUEUE_S = 1.0
"""A query that queued longer than this is prepared again on the newest state once admitted
(what it was prepared on may have been replaced, and its files collected, meanwhile)."""


def result_limits(limits: LimitsConfig, max_rows: int) -> ResultLimits:
    """The row and byte limits of one query: the caller's ``max_rows`` when it is tighter than
    ``[limits].max_result_rows`` (and then named as the caller's in the error), else the
    broker's (0 asks for no limit of the caller's own)."""
    if 0 < max_rows < limits.max_result_rows:
        return ResultLimits(max_rows, limits.max_result_bytes, rows_limit_name="max_rows")
    return ResultLimits(limits.max_result_rows, limits.max_result_bytes)


def query_deadline(requested: float | None, timeout_s: float, now: float) -> float:
    """When a query must be done (monotonic): the caller's deadline, but never later than
    ``[limits].query_timeout_s`` from ``now``."""
    timeout_deadline = now + timeout_s
    return min(requested or timeout_deadline, timeout_deadline)


def reprepare_after_queue(queued_s: float) -> bool:
    """Whether a query admitted after ``queued_s`` in the queue is prepared again first."""
    return queued_s > REPREPARE_AFTER_QUEUE_S
