"""The query pipeline: follower state -> catalog -> rewrite -> access check -> views -> Spark.

Transport-neutral: the gRPC servicer turns these results into messages. One query takes one atomic
view of each table (segments, generation, LWM), rewrites against it, and runs on the temp views of
exactly those generations. When Spark finds a segment file unreadable, the segment is removed from
the timeline (which falls back to what it overwrote) and the query is prepared and run once more.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from broker.admission import Admission
from broker.auth import Principal, check_read
from broker.catalog_builder import build_catalog
from broker.config import BrokerConfig
from broker.direct_read import DirectReader
from broker.executor import QueryScope, ResultLimits, SparkExecutor
from broker.key_lookup import plan_key_lookup
from broker.query_shape import is_key_lookup, is_ordered
from broker.sql.errors import NoLowWatermark
from broker.sql.model import QueryPlan, RewriteLimits, RewriteResult
from broker.view_layout import ViewLayout, ViewPart, segment_files
from broker.views import SegmentViews, UnreadableFiles, ViewMissing, schema_ddl
from timeline.errors import HorizonError, Internal, InvalidArgument, Unavailable
from timeline.fallback import fallback_problem
from timeline.interval import format_instant

log = logging.getLogger("horizon.broker.engine")

SNAPSHOT_LWM = "lwm"
SNAPSHOT_VERSION = "version"
SNAPSHOT_TIMESTAMP = "timestamp"
SNAPSHOT_CHANGES = "changes"
SNAPSHOT_NONE = "none"


@dataclass(frozen=True, slots=True)
class TableReadInfo:
    """What one table of a query reads (the metadata a client sees).

    ``segments``/``files`` are all the table's visible segments; ``layout`` says which temp view
    reads which of their files (one part, or up to four, see ``broker.view_layout``), and
    ``view`` is the main one (the first part).
    """

    table: str
    snapshot: int | None
    generation: int
    lwm: int | None
    retention_horizon: int
    view: str
    segments: tuple[Any, ...]
    files: tuple[str, ...]
    schema_ddl: str
    staleness_s: float
    laggard: Any
    change_windows: tuple[tuple[int, int], ...] = ()
    layout: ViewLayout | None = None

    @property
    def parts(self) -> tuple[ViewPart, ...]:
        return self.layout.parts if self.layout is not None else ()


@dataclass(frozen=True, slots=True)
class Prepared:
    """A rewritten query bound to one view of each table it reads."""

    query_id: str
    original_sql: str
    rewrite: RewriteResult
    tables: tuple[TableReadInfo, ...]
    table_views: tuple[Any, ...]
    staleness_s: float
    rewrite_s: float

    @property
    def sql(self) -> str:
        return self.rewrite.sql

    @property
    def plan(self) -> QueryPlan:
        return self.rewrite.plan

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(path for table in self.tables for path in table.files)

    @property
    def snapshot_source(self) -> str:
        return snapshot_source(self.plan)

    @property
    def snapshot_reason(self) -> str:
        return snapshot_reason(self.plan, self.tables)


_EVERY_SNAPSHOT = 2**63 - 1
"""What a read of an upsert table that names no snapshot must be assumed to see."""

FIRST_FLUSH_BYTES = 4 * 1024 * 1024
"""Result bytes gathered before anything is sent: a smaller result is whole before the header
goes out, so a segment file found unreadable can still be fallen back from and retried."""


@dataclass(slots=True)
class Execution:
    """A started query: its schema, its result as a stream, what it read, where the time went."""

    prepared: Prepared
    schema: pa.Schema
    head: list[pa.RecordBatch]
    """The batches gathered before the first send."""
    rest: Iterator[Any] | None
    """The executor's stream of the remaining batches (None when ``head`` is everything)."""
    files: tuple[str, ...] = ()
    queued_s: float = 0.0
    rewrite_s: float = 0.0
    views_s: float = 0.0
    spark_s: float = 0.0
    """Seconds spent waiting on Spark (planning, jobs, and reading the streamed batches)."""
    unreadable_segments: list[str] = field(default_factory=list)
    retried: bool = False
    _held: ExitStack = field(default_factory=ExitStack)

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Every batch of the result, in order; Spark's time while waiting goes to ``spark_s``."""
        head, self.head = self.head, []
        yield from head
        if self.rest is None:
            return
        while True:
            started = time.perf_counter()
            try:
                batch = next(self.rest)
            except StopIteration:
                return
            except UnreadableFiles as error:
                raise Unavailable(
                    f"{error}; part of the result was already sent, so the query was not "
                    "retried: the segment is now dropped, run the query again"
                ) from None
            finally:
                self.spark_s += time.perf_counter() - started
            yield batch

    def close(self) -> None:
        """Stop the stream (cancelling Spark's jobs if unfinished) and free the admission slot."""
        self._held.close()


def _first_batches(stream: Iterator[Any], limit_bytes: int) -> tuple[list[pa.RecordBatch], bool]:
    """Take batches from ``stream`` until ``limit_bytes`` are held; True when it ran out."""
    head: list[pa.RecordBatch] = []
    held = 0
    while held < limit_bytes:
        try:
            batch = next(stream)
        except StopIteration:
            return head, True
        head.append(batch)
        held += batch.nbytes
    return head, False


def snapshot_source(plan: QueryPlan) -> str:
    source = (plan.snapshot_source or "").upper()
    if "VERSION" in source:
        return SNAPSHOT_VERSION
    if "TIMESTAMP" in source:
        return SNAPSHOT_TIMESTAMP
    if plan.snapshot is not None:
        return SNAPSHOT_LWM
    if plan.change_feed:
        return SNAPSHOT_CHANGES
    return SNAPSHOT_NONE


def snapshot_reason(plan: QueryPlan, tables: Sequence[TableReadInfo]) -> str:
    """A sentence saying how the snapshot was chosen, with the LWMs it was chosen from."""
    kind = snapshot_source(plan)
    lwms = ", ".join(f"{t.table}={t.lwm}" for t in tables if t.snapshot is not None)
    if kind == SNAPSHOT_LWM:
        return f"no snapshot clause: the lowest low-watermark of the tables read ({lwms})"
    if kind == SNAPSHOT_VERSION:
        return f"VERSION AS OF {plan.snapshot} (current low-watermarks: {lwms})"
    if kind == SNAPSHOT_TIMESTAMP:
        return (
            f"TIMESTAMP AS OF: the last HLC of that millisecond, {plan.snapshot} "
            f"(current low-watermarks: {lwms})"
        )
    if kind == SNAPSHOT_CHANGES:
        windows = "; ".join(
            f"{t.table} ({lo}, {hi}]" for t in tables for lo, hi in t.change_windows
        )
        return f"table_changes windows: {windows}"
    return "the query reads no upsert table at a snapshot"


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
            info = _read_info(read, view, self.views.layout(view))
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
                        head, done = _first_batches(stream, FIRST_FLUSH_BYTES)
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


def _read_info(read: Any, view: Any, layout: ViewLayout) -> TableReadInfo:
    segments = tuple(view.visible_segments)
    if read.views and tuple(read.views) != layout.names:
        raise Internal(
            f"table {view.table}: the rewrite reads views {', '.join(read.views)} but the "
            f"segment layout has {', '.join(layout.names)}"
        )
    return TableReadInfo(
        table=view.table,
        snapshot=read.snapshot,
        generation=int(view.generation),
        lwm=view.lwm,
        retention_horizon=int(view.retention_horizon or 0),
        view=read.source_view,
        segments=segments,
        files=segment_files(segments),
        schema_ddl=schema_ddl(view.descriptor),
        staleness_s=float(view.staleness_s),
        laggard=view.laggard,
        change_windows=tuple(read.change_windows),
        layout=layout,
    )
