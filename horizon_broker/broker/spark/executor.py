"""Runs rewritten SQL on Spark: one job group per query, cancel and deadline, result limits.

Every query runs under its own Spark job group (classic Spark: ``setJobGroup`` with interrupt on
cancel, which PySpark's pinned threads make per-thread) or tag (Spark Connect: ``addTag``); how,
and how results are collected, is the session's :class:`horizon_broker.broker.spark.modes.SparkMode`. A client
cancel or a passed deadline cancels the group; a watchdog keeps cancelling until the query
returns, which also catches a job submitted just after the first cancel.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from horizon_broker._core.errors import Cancelled, DeadlineExceeded, HorizonError, ResourceExhausted
from horizon_broker.broker.spark.failures import classify
from horizon_broker.broker.spark.literals import keep_literals
from horizon_broker.broker.spark.modes import spark_mode

log = logging.getLogger("horizon.broker.spark.executor")

CANCELLED = "cancelled"
DEADLINE = "deadline"
_RECANCEL_S = 0.1


def job_group(handle: str) -> str:
    """The Spark job group (or tag) a query's jobs run under."""
    return f"horizon-{handle}"


def new_handle() -> str:
    """An engine handle no caller chose or can guess."""
    return uuid.uuid4().hex


@dataclass(slots=True)
class QueryScope:
    """One query's cancellation state, shared by the running thread and the gRPC callbacks.

    ``query_id`` is the caller's label (or one the broker chose); the engine knows the query only
    by ``handle``, which the broker generates, so a caller who sends another caller's id names
    nothing of theirs: not their Spark jobs, not their record.
    """

    query_id: str
    deadline: float | None = None
    """A ``time.monotonic()`` instant after which the query is cancelled."""
    handle: str = field(default_factory=new_handle)
    reason: str | None = None
    finished: bool = False
    _cancel: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def group(self) -> str:
        return job_group(self.handle)

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

    def why_stopped(self, is_active: Callable[[], bool] = lambda: True) -> HorizonError | None:
        """Why nobody waits for this query's answer any more (cancelled, past its deadline,
        its caller gone: ``is_active`` false), or None while somebody does."""
        try:
            self.check()
        except HorizonError as error:
            return error
        if is_active():
            return None
        return Cancelled(f"query {self.query_id}: its caller went away")

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
    rows_limit_name: str = "max_result_rows"
    bytes_limit_name: str = "max_result_bytes"

    def check(self, rows: int, byte_count: int) -> None:
        """Raise RESOURCE_EXHAUSTED naming the limit once a result grows past it."""
        if rows > self.max_rows:
            raise ResourceExhausted(
                f"the result has more than {self.max_rows} rows (the limit "
                f"{self.rows_limit_name} = {self.max_rows}); add a LIMIT or a narrower filter"
            )
        if byte_count > self.max_bytes:
            raise ResourceExhausted(
                f"the result grew past {self.max_bytes} bytes (the limit "
                f"{self.bytes_limit_name} = {self.max_bytes}); select fewer rows or columns"
            )


class SparkExecutor:
    """Executes SQL on one Spark session and streams the result as Arrow record batches.

    Key lookups run on a second session of the same Spark context (``lookup_spark``) whose
    settings suit them; the segment views are registered in both.
    """

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.mode = spark_mode(spark)
        self.lookup_spark = self.mode.lookup_session()
        for session in (self.spark, *self.mirrors):
            keep_literals(session)

    @property
    def mirrors(self) -> tuple[Any, ...]:
        """Sessions besides ``spark`` that need the segment views."""
        return () if self.lookup_spark is self.spark else (self.lookup_spark,)

    @contextmanager
    def _job_group(self, scope: QueryScope) -> Iterator[None]:
        scope.finished = False  # a retry runs under the same scope
        cancel = self.mode.begin(scope.group, f"horizon query {scope.query_id}")
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
            with suppress(Exception):  # an engine that died cannot fail the query a second time
                self.mode.end(scope.group)

    def stream(
        self,
        sql: str,
        scope: QueryScope,
        limits: ResultLimits,
        *,
        files: Sequence[str] = (),
        views: Sequence[str] = (),
        lookup: bool = False,
        ordered: bool = True,
        direct: Callable[[pa.Schema], pa.Table | None] | None = None,
        on_schema: Callable[[pa.Schema], None] | None = None,
    ) -> Iterator[pa.Schema | pa.RecordBatch]:
        """Run ``sql``: yield its Arrow schema first, then record batches as Spark delivers them.

        The schema comes from analysis, before any job runs. Batches arrive as Spark's tasks
        finish; when ``ordered`` is false they are passed on in that order (the query has no
        ORDER BY, so any order is correct), otherwise they are held until Spark says which
        order they belong in. The row and byte limits are checked on every batch: past one,
        the query's jobs are cancelled and RESOURCE_EXHAUSTED names the limit.

        ``files`` are the segment files the query reads and ``views`` the segment views it reads
        them through: a reader's failure of one of the files becomes
        :class:`horizon_broker.broker.spark.failures.UnreadableFiles` (the caller checks it, falls back and
        retries), a vanished view :class:`~horizon_broker.broker.spark.failures.ViewMissing`.

        ``direct`` may answer the query without a Spark job: it gets the analysed schema and
        returns the whole result, or None to let Spark run it. ``on_schema`` is told the analysed
        schema (the engine remembers it for lookups of the same shape).
        """
        scope.check()
        session = self.lookup_spark if lookup else self.spark
        with self._job_group(scope):
            try:
                frame = session.sql(sql)
                schema = _arrow_schema(frame)
            except Exception as error:
                raise self._failure(error, scope, files, views) from None
            if on_schema is not None:
                on_schema(schema)
            yield schema
            answer = self.answer_directly(direct, schema, scope, files) if direct else None
            if answer is not None:
                batches = _table_batches(answer)
            else:
                batches = self.mode.collect(frame, schema, ordered, limits)
            rows = byte_count = 0
            completed = False
            try:
                while True:
                    try:
                        batch = next(batches)
                    except StopIteration:
                        break
                    except Exception as error:
                        raise self._failure(error, scope, files, views) from None
                    rows += batch.num_rows
                    byte_count += batch.nbytes
                    limits.check(rows, byte_count)
                    yield batch
                completed = True
            finally:
                if not completed:  # a limit, an error, or the consumer stopped reading
                    self._stop_jobs(scope)
                batches.close()  # closes the socket and joins the JVM's serving thread
        scope.check()

    def answer_directly(
        self,
        direct: Callable[[pa.Schema], pa.Table | None],
        schema: pa.Schema,
        scope: QueryScope,
        files: Sequence[str],
    ) -> pa.Table | None:
        """``direct``'s whole answer (None: Spark must run the query), its failures classified
        like a Spark reader's (a vanished file is :class:`~horizon_broker.broker.spark.failures.UnreadableFiles`)."""
        try:
            return direct(schema)
        except Exception as error:
            raise self._failure(error, scope, files, ()) from None

    def _stop_jobs(self, scope: QueryScope) -> None:
        with suppress(Exception):  # the jobs may have finished already
            if scope._cancel is not None:
                scope._cancel(scope.group)

    @staticmethod
    def _failure(
        error: BaseException, scope: QueryScope, files: Sequence[str], views: Sequence[str]
    ) -> BaseException:
        if isinstance(error, HorizonError):
            return error
        try:
            scope.check()
        except HorizonError as cancelled:
            return cancelled
        return classify(error, files, views)

    def schema(self, sql: str) -> pa.Schema:
        """The Arrow schema of ``sql``'s result (analysis only; nothing is executed)."""
        try:
            return _arrow_schema(self.spark.sql(sql))
        except Exception as error:
            raise classify(error) from None

    def explain(self, sql: str) -> str:
        """Spark's physical plan for ``sql`` (analysis only; nothing is executed)."""
        try:
            return self.mode.physical_plan(self.spark.sql(sql))
        except Exception as error:
            raise classify(error) from None


def _table_batches(table: pa.Table) -> Iterator[pa.RecordBatch]:
    yield from table.to_batches()


def _arrow_schema(frame: Any) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(
        frame.schema, error_on_duplicated_field_names_in_struct=True, timezone="UTC"
    )
