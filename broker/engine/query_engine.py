"""The query engine: follower state -> catalog -> rewrite -> access check -> views -> Spark.

Transport-neutral: the gRPC servicer turns these results into messages. One query takes one atomic
view of each table (segments, generation, LWM), rewrites against it, and runs on the temp views of
exactly those generations. When Spark finds a segment file unreadable, the segment is removed from
the timeline (which falls back to what it overwrote) and the query is prepared and run once more.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import pyarrow as pa

from broker.admission import Admission
from broker.auth import Principal, check_read
from broker.catalog_builder import build_catalog
from broker.config import BrokerConfig
from broker.direct_read import DirectReader
from broker.engine.execution import FIRST_FLUSH_BYTES, Execution, first_batches
from broker.engine.prepared import Prepared, TableReadInfo, read_info
from broker.executor import QueryScope, ResultLimits, SparkExecutor
from broker.key_lookup import plan_key_lookup
from broker.query_shape import is_key_lookup, is_ordered
from broker.sql.errors import NoLowWatermark
from broker.sql.model import RewriteLimits
from broker.views import SegmentViews, UnreadableFiles, ViewMissing
from timeline.errors import HorizonError, InvalidArgument, Unavailable
from timeline.fallback import fallback_problem
from timeline.interval import format_instant

log = logging.getLogger("horizon.broker.engine")

_EVERY_SNAPSHOT = 2**63 - 1
"""What a read of an upsert table that names no snapshot must be assumed to see."""


class QueryEngine:
    """Prepares, explains and runs queries against a follower and one Spark session."""

    def __init__(
        self,
        follower: Any,
        spark: Any,
        config: BrokerConfig,
        *,
        functions: Any = None,
        view_namespace: str = "",
    ) -> None:
        from broker.sql.functions_from_spark import function_policy_from_spark

        self.follower = follower
        self.spark = spark
        self.config = config
        self.executor = SparkExecutor(spark)
        self.views = SegmentViews(spark, namespace=view_namespace, mirrors=self.executor.mirrors)
        self.direct = DirectReader(max_rows=config.spark.direct_lookup_max_rows)
        self._direct_enabled = config.spark.direct_lookups and _embedded(spark)
        """Only with embedded Spark: its files are this machine's files (on a cluster or behind
        Spark Connect a local path may name a file the broker cannot see)."""
        self.direct_answers = 0
        """Queries answered by :attr:`direct` (a test and benchmark probe)."""
        self.admission = Admission(config.limits.max_concurrent, config.limits.queue_size)
        self.functions = functions if functions is not None else function_policy_from_spark(spark)
        self.rewrite_limits = RewriteLimits(
            max_sql_length=config.limits.max_sql_length,
            max_nesting=config.limits.max_sql_nesting,
            max_tree_depth=config.limits.max_sql_tree_depth,
        )

    # -- preparing -----------------------------------------------------------------------------

    def prepare(self, sql: str, principal: Principal, *, query_id: str | None = None) -> Prepared:
        """Rewrite ``sql`` against the current state and check the caller may read its tables."""
        from broker.sql import rewrite

        started = time.perf_counter()
        if not isinstance(sql, str) or not sql.strip():
            raise InvalidArgument("the query is empty: send one SELECT statement")
        staleness = self._check_fresh()
        views, failures = self._table_views()
        catalog = build_catalog(
            views.values(),
            [d for d, _ in failures.values()],
            namespace=self.views.namespace,
            layout_of=self.views.layout,
        )
        try:
            result = rewrite(sql, catalog, limits=self.rewrite_limits, functions=self.functions)
        except NoLowWatermark:
            # A table whose state could not be read explains itself better than "no LWM".
            self._raise_failed_table(sql, failures)
            raise
        check_read(principal, result.plan.table_names)
        reads = []
        table_views = []
        for read in result.plan.tables_read:
            key = read.name.lower()
            if key in failures:
                raise failures[key][1]
            view = views[key]
            if read.snapshot is not None:
                self.follower.lwm(view.table)  # regression policy, staleness, no LWM
            table_views.append(view)
            info = read_info(read, view, self.views.layout(view))
            self._check_fallbacks(info, view)
            reads.append(info)
        return Prepared(
            query_id=query_id or uuid.uuid4().hex[:16],
            original_sql=sql,
            rewrite=result,
            tables=tuple(reads),
            table_views=tuple(table_views),
            staleness_s=staleness,
            rewrite_s=time.perf_counter() - started,
        )

    def _check_fresh(self) -> float:
        staleness = float(self.follower.staleness_s())
        limit = self.config.state.max_staleness_s
        if staleness > limit:
            raise Unavailable(
                f"the broker's server state is {staleness:.1f}s stale (limit {limit:.1f}s): "
                "the state store is unreachable"
            )
        return staleness

    def _table_views(self) -> tuple[dict[str, Any], dict[str, tuple[Any, HorizonError]]]:
        views: dict[str, Any] = {}
        failures: dict[str, tuple[Any, HorizonError]] = {}
        for table in self.follower.tables():
            try:
                views[table.lower()] = self.follower.view(table)
            except HorizonError as error:
                failures[table.lower()] = (self.follower.descriptor(table), error)
        return views, failures

    @staticmethod
    def _raise_failed_table(sql: str, failures: dict[str, tuple[Any, HorizonError]]) -> None:
        lowered = sql.lower()
        for name, (_, error) in failures.items():
            if name in lowered:
                raise error

    # -- running -------------------------------------------------------------------------------

    def execute(
        self,
        sql: str,
        principal: Principal,
        scope: QueryScope,
        *,
        max_rows: int = 0,
        is_active: Callable[[], bool] = lambda: True,
    ) -> Execution:
        """Start a query under admission control, falling back once on unreadable segment files.

        Returns once the result's first :data:`FIRST_FLUSH_BYTES` (or all of it) came from Spark;
        the rest streams from :meth:`Execution.batches`. Until then a read failure can still be
        retried on the fallen-back timeline; after that it ends the stream. The caller must
        :meth:`Execution.close` the execution (it holds an admission slot until then).
        """
        limits = self.config.limits
        if max_rows > 0 and max_rows < limits.max_result_rows:
            rows_limit = ResultLimits(max_rows, limits.max_result_bytes, rows_limit_name="max_rows")
        else:
            rows_limit = ResultLimits(limits.max_result_rows, limits.max_result_bytes)
        timeout_deadline = time.monotonic() + limits.query_timeout_s
        scope.deadline = min(scope.deadline or timeout_deadline, timeout_deadline)
        with ExitStack() as held:
            queued_s = held.enter_context(
                self.admission.slot(deadline=scope.deadline, is_active=is_active)
            )
            unreadable: list[str] = []
            for attempt in range(2):
                prepared = self.prepare(sql, principal, query_id=scope.query_id)
                keys = {v.table.lower(): v.descriptor.primary_key for v in prepared.table_views}
                stream = self.executor.stream(
                    prepared.sql,
                    scope,
                    rows_limit,
                    files=prepared.files,
                    lookup=is_key_lookup(prepared.original_sql, keys),
                    ordered=is_ordered(prepared.sql),
                    direct=self._direct_lookup(prepared),
                )
                try:
                    with self.views.lease(prepared.table_views) as (_, views_s):
                        spark_started = time.perf_counter()
                        schema = next(stream)
                        head, done = first_batches(stream, FIRST_FLUSH_BYTES)
                        spark_s = time.perf_counter() - spark_started
                except ViewMissing as error:
                    stream.close()
                    self.views.forget(error.name)
                    if attempt == 0:
                        continue
                    raise
                except UnreadableFiles as error:
                    stream.close()
                    removed = self._drop_unreadable(prepared, error)
                    unreadable.extend(removed)
                    if attempt == 0 and removed:
                        log.warning(
                            "query %s: %s; retrying on the new visible set", scope.query_id, error
                        )
                        continue
                    raise Unavailable(
                        f"segment files stayed unreadable after a retry: {error}"
                    ) from None
                except BaseException:
                    stream.close()
                    raise
                held.callback(stream.close)
                return Execution(
                    prepared=prepared,
                    schema=schema,
                    head=head,
                    rest=None if done else stream,
                    files=prepared.files,
                    queued_s=queued_s,
                    rewrite_s=prepared.rewrite_s,
                    views_s=views_s,
                    spark_s=spark_s,
                    unreadable_segments=unreadable,
                    retried=attempt > 0,
                    _held=held.pop_all(),
                )
        raise AssertionError("unreachable")  # pragma: no cover

    def _direct_lookup(self, prepared: Prepared) -> Callable[[pa.Schema], pa.Table | None] | None:
        """A reader of ``prepared`` straight from its files, when it is a plain key lookup."""
        if not self._direct_enabled or len(prepared.tables) != 1:
            return None
        table, view = prepared.tables[0], prepared.table_views[0]
        if table.snapshot is None or len(prepared.plan.tables_read) != 1:
            return None
        lookup = plan_key_lookup(prepared.original_sql, table.table, view.descriptor.primary_key)
        if lookup is None:
            return None

        def read(schema: pa.Schema) -> pa.Table | None:
            answer = self.direct.read(lookup, table.files, table.snapshot, schema)
            if answer is not None:
                self.direct_answers += 1
            return answer

        return read

    def _check_fallbacks(self, read: TableReadInfo, view: Any) -> None:
        """Fail when the table's timeline fell back, for an unreadable segment, to data that
        cannot answer at this read's snapshots (see :mod:`timeline.fallback`)."""
        if not view.fallbacks:
            return
        snapshot = None
        if view.descriptor.upsert:  # an append table's rows are never closed by a rewrite
            reads = [end for _, end in read.change_windows]
            reads += [read.snapshot] if read.snapshot is not None else []
            snapshot = max(reads, default=_EVERY_SNAPSHOT)
        for fallback in view.fallbacks:
            problem = fallback_problem([fallback.lost], fallback.before, fallback.after, snapshot)
            if problem is not None:
                mark = fallback.mark
                raise Unavailable(
                    f"{problem}: the query fails rather than answer without its rows or with a "
                    f"key twice (unreadable since {format_instant(mark.since_ms)}: {mark.reason})"
                )

    def _drop_unreadable(self, prepared: Prepared, error: UnreadableFiles) -> list[str]:
        """Remove every visible segment with an unreadable file from the timeline."""
        paths = set(error.paths)
        removed = []
        for table in prepared.tables:
            for segment in table.segments:
                if paths & set(segment.location):
                    self.follower.mark_unreadable(segment.id, str(error))
                    removed.append(str(segment.id))
        return removed

    def spark_plan(self, prepared: Prepared) -> str:
        with self.views.lease(prepared.table_views):
            return self.executor.explain(prepared.sql)


def _embedded(spark: Any) -> bool:
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        return False
    try:
        return str(spark.sparkContext.master).startswith("local")
    except Exception:  # a session without a context is not an embedded one
        return False
