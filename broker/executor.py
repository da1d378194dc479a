"""Runs rewritten SQL on Spark: one job group per query, cancel and deadline, result limits.

Every query runs under its own Spark job group (classic Spark: ``setJobGroup`` with interrupt on
cancel, which PySpark's pinned threads make per-thread) or tag (Spark Connect: ``addTag``). A
client cancel or a passed deadline cancels the group; a watchdog keeps cancelling until the query
returns, which also catches a job submitted just after the first cancel.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from broker.views import VIEW_PREFIX, ViewMissing, classify_read_error
from timeline.errors import (
    Cancelled,
    DeadlineExceeded,
    HorizonError,
    Internal,
    InvalidArgument,
    ResourceExhausted,
    Unavailable,
)

log = logging.getLogger("horizon.broker.executor")

CANCELLED = "cancelled"
DEADLINE = "deadline"
_RECANCEL_S = 0.1

# Spark error classes that say the query itself is wrong (the client can fix it).
_CLIENT_ERRORS = (
    "AnalysisException",
    "ParseException",
    "ArithmeticException",
    "NumberFormatException",
    "DateTimeException",
    "IllegalArgumentException",
    "ArrayIndexOutOfBoundsException",
)


def job_group(query_id: str) -> str:
    """The Spark job group (or tag) a query's jobs run under."""
    return f"horizon-{query_id}"


def is_spark_connect(spark: Any) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


@dataclass(slots=True)
class QueryScope:
    """One query's cancellation state, shared by the running thread and the gRPC callbacks."""

    query_id: str
    deadline: float | None = None
    """A ``time.monotonic()`` instant after which the query is cancelled."""
    reason: str | None = None
    finished: bool = False
    _cancel: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def group(self) -> str:
        return job_group(self.query_id)

    def cancel(self, reason: str = CANCELLED) -> None:
        """Ask Spark to stop this query's jobs, now and until the query returns."""
        with self._lock:
            if self.finished or self.reason is not None:
                return
            self.reason = reason
            cancel = self._cancel
        if cancel is not None:
            threading.Thread(
                target=self._keep_cancelling, args=(cancel,), name=f"cancel-{self.group}"
            ).start()

    def _keep_cancelling(self, cancel: Any) -> None:
        while not self.finished:
            try:
                cancel(self.group)
            except Exception:  # Spark may be shutting down; the query then fails on its own
                log.debug("cancelling %s failed", self.group, exc_info=True)
            time.sleep(_RECANCEL_S)

    def check(self) -> None:
        """Raise the cancellation as a typed error if the query was cancelled."""
        if self.reason == DEADLINE:
            raise DeadlineExceeded(f"query {self.query_id} ran past its deadline and was stopped")
        if self.reason == CANCELLED:
            raise Cancelled(f"query {self.query_id} was cancelled by the client")


@dataclass(frozen=True, slots=True)
class ResultLimits:
    max_rows: int
    max_bytes: int


class SparkExecutor:
    """Executes SQL on one Spark session and returns the result as an Arrow table."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.connect = is_spark_connect(spark)

    @contextmanager
    def _job_group(self, scope: QueryScope) -> Iterator[None]:
        if self.connect:
            self.spark.addTag(scope.group)
            cancel = self.spark.interruptTag
        else:
            context = self.spark.sparkContext
            context.setJobGroup(scope.group, f"horizon query {scope.query_id}", True)
            cancel = context.cancelJobGroup
        with scope._lock:
            scope._cancel = cancel
            already = scope.reason
        if already is not None:  # cancelled before Spark knew the group: start cancelling now
            scope.reason = None
            scope.cancel(already)
        timer = None
        if scope.deadline is not None:
            timer = threading.Timer(
                max(0.0, scope.deadline - time.monotonic()), scope.cancel, args=(DEADLINE,)
            )
            timer.daemon = True
            timer.start()
        try:
            yield
        finally:
            scope.finished = True
            if timer is not None:
                timer.cancel()
            if self.connect:
                self.spark.removeTag(scope.group)
            else:
                context = self.spark.sparkContext
                for key in ("spark.jobGroup.id", "spark.job.description"):
                    context.setLocalProperty(key, None)

    def run(
        self,
        sql: str,
        scope: QueryScope,
        limits: ResultLimits,
        *,
        files: Sequence[str] = (),
    ) -> pa.Table:
        """Run ``sql`` and collect at most ``limits`` of Arrow data.

        ``files`` are the segment files the query reads: a failure that names one of them becomes
        :class:`broker.views.UnreadableFiles` so the caller can fall back and retry.
        """
        scope.check()
        try:
            with self._job_group(scope):
                # No .limit() here: on Spark 4 it turns the scan into a single-partition shuffle
                # and doubles a point query's latency. The driver is protected by
                # spark.driver.maxResultSize; the row and byte limits are checked below.
                table = self.spark.sql(sql).toArrow()
        except HorizonError:
            raise
        except Exception as error:
            scope.check()
            raise classify_spark_error(error, files) from None
        scope.check()
        if table.num_rows > limits.max_rows:
            raise ResourceExhausted(
                f"the result has more than {limits.max_rows} rows (the limit); "
                "add a LIMIT or a narrower filter"
            )
        if table.nbytes > limits.max_bytes:
            raise ResourceExhausted(
                f"the result is {table.nbytes} bytes, more than the limit of "
                f"{limits.max_bytes}; select fewer rows or columns"
            )
        return table

    def explain(self, sql: str) -> str:
        """Spark's physical plan for ``sql`` (analysis only; nothing is executed)."""
        try:
            frame = self.spark.sql(sql)
            if self.connect:
                return str(frame._explain_string(mode="formatted"))  # type: ignore[attr-defined]
            return str(frame._jdf.queryExecution().executedPlan().toString())
        except Exception as error:
            raise classify_spark_error(error, ()) from None


def classify_spark_error(error: BaseException, files: Sequence[str]) -> BaseException:
    """Map a Spark failure to Horizon's hierarchy (no Java stack trace reaches the client)."""
    if isinstance(error, HorizonError):
        return error
    read_error = classify_read_error(error, files)
    if read_error is not error:
        return read_error
    name = type(error).__name__
    message = _spark_message(error)
    if "maxResultSize" in str(error):
        return ResourceExhausted(f"the result is too large for the broker: {message}")
    if "TABLE_OR_VIEW_NOT_FOUND" in message:
        missing = re.search(r"`(" + re.escape(VIEW_PREFIX) + r"\w+)`", message)
        if missing:
            return ViewMissing(missing.group(1))
    if name in _CLIENT_ERRORS:
        return InvalidArgument(f"Spark rejected the query: {message}")
    if "SPARK_JOB_CANCELLED" in str(error) or "cancelled" in message.lower():
        return Unavailable(f"Spark cancelled the query: {message}")
    if name in {"Py4JNetworkError", "ConnectionRefusedError"} or "SparkContext was shut down" in (
        str(error)
    ):
        return Unavailable(f"Spark is not available: {message}")
    log.warning("Spark failed", exc_info=error)
    return Internal(f"Spark failed to run the query: {message}")


def _spark_message(error: BaseException) -> str:
    """The first meaningful line of a Spark error, without JVM stack frames."""
    text = str(error).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("at ", "An error occurred while calling", "JVM stacktrace")):
            continue
        if line.startswith(": "):
            line = line[2:]
        return line[:1000]
    return type(error).__name__
