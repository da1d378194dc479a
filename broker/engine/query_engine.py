"""The query engine: follower state -> catalog -> rewrite -> access check -> views -> Spark.

Transport-neutral: the gRPC servicer turns these results into messages. One query takes one atomic
view of each table (segments, generation, LWM), rewrites against it, and runs on the temp views of
exactly those generations. When Spark finds a segment file unreadable, the segment is removed from
the timeline (which falls back to what it overwrote) and the query is prepared and run once more.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Hashable
from contextlib import ExitStack
from typing import Any

import pyarrow as pa

from broker.admission import Admission
from broker.auth import Principal, check_read
from broker.catalog_builder import build_catalog
from broker.config import BrokerConfig
from broker.direct_read import DirectReader
from broker.engine.execution import FIRST_FLUSH_BYTES, Execution, first_batches
from broker.engine.prepared import SNAPSHOT_LWM, Prepared, TableReadInfo, read_info
from broker.executor import QueryScope, ResultLimits, SparkExecutor
from broker.key_lookup import plan_key_lookup
from broker.query_shape import is_key_lookup, is_ordered
from broker.reads.cache import BYPASSED, HIT, MISS, OFF, ResultCache, cache_key
from broker.reads.floor import SnapshotFloor
from broker.reads.freshness import check_staleness, required_snapshot, wait_for_snapshot
from broker.reads.options import DEFAULT as DEFAULT_READ
from broker.reads.options import ReadOptions
from broker.reads.pinning import check_pinned_tables, find_pin, pinned_views
from broker.sql.errors import NoLowWatermark
from broker.sql.model import RewriteLimits
from broker.views import SegmentViews, UnreadableFiles, ViewMissing
from pins.rules import Pin
from timeline.errors import FailedPrecondition, HorizonError, InvalidArgument, Unavailable
from timeline.fallback import fallback_problem
from timeline.interval import format_instant

log = logging.getLogger("horizon.broker.engine")

_EVERY_SNAPSHOT = 2**63 - 1
"""What a read of an upsert table that names no snapshot must be assumed to see."""

DIRECT_ROUTE = "answered from the segment files with pyarrow (direct key lookup), no Spark job"
CACHE_ROUTE = "answered from the result cache, no Spark job"

REPREPARE_AFTER_QUEUE_S = 1.0
"""A query that queued longer than this is prepared again on the newest state once admitted
(what it was prepared on may have been replaced, and its files collected, meanwhile)."""


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
        pins: Any = None,
        floor: SnapshotFloor | None = None,
    ) -> None:
        """``pins`` is the pin store (:class:`pins.store.PinStore`; None: pins are off);
        ``floor`` the persisted served-snapshot floor (None: kept in memory only)."""
        from broker.sql.functions_from_spark import function_policy_from_spark

        self.follower = follower
        self.spark = spark
        self.config = config
        self.executor = SparkExecutor(spark)
        self.views = SegmentViews(spark, namespace=view_namespace, mirrors=self.executor.mirrors)
        self.direct = DirectReader(max_rows=config.spark.direct_lookup_max_rows)
        mode = self.executor.mode
        self._direct_enabled = config.spark.direct_lookups and mode.direct_reads
        """Only with embedded Spark: its files are this machine's files (on a cluster or behind
        Spark Connect a local path may name a file the broker cannot see)."""
        self.direct_bypassed = (
            mode.bypass_reason if config.spark.direct_lookups and not mode.direct_reads else ""
        )
        """Why direct lookups are configured but not used ("" when they are, or are off)."""
        if self.direct_bypassed:
            log.warning("direct key lookups are bypassed: %s", self.direct_bypassed)
        self.direct_answers = 0
        """Queries answered by :attr:`direct` (a test and benchmark probe)."""
        self.admission = Admission(config.limits.max_concurrent, config.limits.queue_size)
        self.pins = pins
        self.floor = floor if floor is not None else SnapshotFloor(None, prefix="")
        reads = config.reads
        self.cache = (
            ResultCache(reads.cache_max_bytes, reads.cache_max_entry_bytes)
            if reads.cache and reads.cache_max_bytes > 0
            else None
        )
        self.functions = functions if functions is not None else function_policy_from_spark(spark)
        self.rewrite_limits = RewriteLimits(
            max_sql_length=config.limits.max_sql_length,
            max_nesting=config.limits.max_sql_nesting,
            max_tree_depth=config.limits.max_sql_tree_depth,
        )

    # -- preparing -----------------------------------------------------------------------------

    def prepare(
        self,
        sql: str,
        principal: Principal,
        *,
        query_id: str | None = None,
        options: ReadOptions = DEFAULT_READ,
        deadline: float | None = None,
    ) -> Prepared:
        """Rewrite ``sql`` against the current state and check the caller may read its tables.

        ``options`` are the read controls (:mod:`broker.reads`): a default read waits, until
        ``deadline`` (monotonic), for its tables' LWM to reach ``min_snapshot`` and this broker's
        floor, and is refused when older than ``max_staleness``; a pinned one reads at the pin.
        """
        started = time.perf_counter()
        if not isinstance(sql, str) or not sql.strip():
            raise InvalidArgument("the query is empty: send one SELECT statement")
        pin = self._pin(options.pin_id) if options.pin_id else None
        waited_s = 0.0
        while True:
            prepared = self._prepare_once(sql, principal, query_id, pin)
            if prepared.snapshot_source != SNAPSHOT_LWM:
                break
            tables = [t.table for t in prepared.tables if t.snapshot is not None]
            floor = self.floor.floor()
            required = required_snapshot(tables, options.min_snapshot, floor)
            snapshot = prepared.plan.snapshot
            if required is None or snapshot is None or snapshot >= required:
                break
            why = (
                f"min_snapshot asks for snapshot {required} or later"
                if required == required_snapshot(tables, options.min_snapshot)
                else f"this broker already served snapshot {required} (its floor)"
            )
            wait_started = time.perf_counter()
            wait_for_snapshot(self.follower, tables, required, self.wait_deadline(deadline), why)
            waited_s += time.perf_counter() - wait_started
        if prepared.snapshot_source == SNAPSHOT_LWM and prepared.plan.snapshot is not None:
            self._check_staleness(prepared, options.max_staleness_s)
            self.floor.record(
                {t.table: t.snapshot for t in prepared.tables if t.snapshot is not None}
            )
        return dataclasses.replace(
            prepared, waited_s=waited_s, rewrite_s=time.perf_counter() - started
        )

    def wait_deadline(self, deadline: float | None) -> float:
        """When to stop waiting for a snapshot: a little before the call's deadline, so the
        caller gets the error naming the laggard rather than a bare DEADLINE_EXCEEDED."""
        now = time.monotonic()
        limit = now + self.config.reads.max_wait_s
        if deadline is None:
            return limit
        return min(limit, deadline - min(0.25, max(0.0, deadline - now) * 0.1))

    def _prepare_once(
        self, sql: str, principal: Principal, query_id: str | None, pin: Pin | None
    ) -> Prepared:
        from broker.sql import rewrite

        staleness = self._check_fresh()
        views, failures = self._table_views()
        if pin is not None:
            views = pinned_views(views, pin)
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
        if pin is not None:
            check_pinned_tables(result.plan.tables_read, pin)
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
            rewrite_s=0.0,
            pin=pin,
        )

    def pin_store(self) -> Any:
        if self.pins is None:
            raise FailedPrecondition("this broker has no pin store: snapshot pins are off")
        return self.pins

    def _pin(self, pin_id: str) -> Pin:
        return find_pin(self.pin_store(), pin_id)

    def pin_plan(self, prepared: Prepared, lease_s: float, *, owner: str) -> Pin | None:
        """Pin what a passthrough plan reads, so its files and history outlive the lease: the
        lowest snapshot (or change-feed window start) of its tables (None: nothing to pin)."""
        if prepared.pin is not None:
            return prepared.pin
        lows: dict[str, int] = {}
        for table in prepared.tables:
            points = [lo for lo, _ in table.change_windows]
            points += [table.snapshot] if table.snapshot is not None else []
            if points:
                lows[table.table] = max(min(points), table.retention_horizon)
        if not lows:
            return None
        return self.pin_store().pin(list(lows), min(lows.values()), lease_s=lease_s, owner=owner)

    def _check_staleness(self, prepared: Prepared, max_staleness_s: float | None) -> None:
        snapshot = prepared.plan.snapshot
        if max_staleness_s is None or snapshot is None:
            return
        lowest = min(
            (t for t in prepared.tables if t.snapshot is not None), key=lambda t: t.lwm or 0
        )
        laggard = lowest.laggard
        holding = (
            f"table {lowest.table} is held back by partition {laggard.partition} on server "
            f"{laggard.server}"
            if laggard is not None
            else f"table {lowest.table} has no laggard on record"
        )
        check_staleness(snapshot, int(time.time() * 1000), max_staleness_s, holding)

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
        options: ReadOptions = DEFAULT_READ,
    ) -> Execution:
        """Start a query under admission control, falling back once on unreadable segment files.

        Returns once the result's first :data:`FIRST_FLUSH_BYTES` (or all of it) came from Spark;
        the rest streams from :meth:`Execution.batches`. Until then a read failure can still be
        retried on the fallen-back timeline; after that it ends the stream. The caller must
        :meth:`Execution.close` the execution (it holds an admission slot until then). An answer
        in the result cache is returned without a slot or Spark (grants were checked by prepare).
        """
        limits = self.config.limits
        if max_rows > 0 and max_rows < limits.max_result_rows:
            rows_limit = ResultLimits(max_rows, limits.max_result_bytes, rows_limit_name="max_rows")
        else:
            rows_limit = ResultLimits(limits.max_result_rows, limits.max_result_bytes)
        timeout_deadline = time.monotonic() + limits.query_timeout_s
        scope.deadline = min(scope.deadline or timeout_deadline, timeout_deadline)
        prepared = self.prepare(
            sql, principal, query_id=scope.query_id, options=options, deadline=scope.deadline
        )
        key, cache_state = self._cache_key(prepared, rows_limit.max_rows, options)
        answer = self.cache.get(key) if self.cache is not None and key is not None else None
        if answer is not None:
            return Execution(
                prepared=prepared,
                schema=answer.schema,
                head=list(answer.batches),
                rest=None,
                rewrite_s=prepared.rewrite_s,
                cache=HIT,
                route=CACHE_ROUTE,
            )
        with ExitStack() as held:
            queued_s = held.enter_context(
                self.admission.slot(deadline=scope.deadline, is_active=is_active)
            )
            unreadable: list[str] = []
            for attempt in range(2):
                if attempt > 0 or queued_s > REPREPARE_AFTER_QUEUE_S:
                    prepared = self.prepare(
                        sql,
                        principal,
                        query_id=scope.query_id,
                        options=options,
                        deadline=scope.deadline,
                    )
                    key, cache_state = self._cache_key(prepared, rows_limit.max_rows, options)
                keys = {v.table.lower(): v.descriptor.primary_key for v in prepared.table_views}
                route = [self.executor.mode.describe()]
                stream = self.executor.stream(
                    prepared.sql,
                    scope,
                    rows_limit,
                    files=prepared.files,
                    lookup=is_key_lookup(prepared.original_sql, keys),
                    ordered=is_ordered(prepared.sql),
                    direct=self._direct_lookup(prepared, route),
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
                    cache=cache_state,
                    route="; ".join(route),
                    recorder=(
                        self.cache.recorder(key, schema)
                        if self.cache is not None and key is not None
                        else None
                    ),
                    _held=held.pop_all(),
                )
        raise AssertionError("unreachable")  # pragma: no cover

    def _cache_key(
        self, prepared: Prepared, max_rows: int, options: ReadOptions
    ) -> tuple[Hashable | None, str]:
        """The result cache key of ``prepared`` and what the metadata says about the cache."""
        if self.cache is None:
            return None, OFF
        if not options.use_cache:
            return None, BYPASSED
        key, reason = cache_key(prepared, max_rows)
        return (key, MISS) if key is not None else (None, f"not cached: {reason}")

    def cache_state(self, prepared: Prepared, options: ReadOptions = DEFAULT_READ) -> str:
        """What :meth:`execute` would do with the cache for ``prepared`` (explain's answer)."""
        key, state = self._cache_key(prepared, self.config.limits.max_result_rows, options)
        if key is not None and self.cache is not None and self.cache.contains(key):
            return HIT
        return state

    def _direct_lookup(
        self, prepared: Prepared, route: list[str]
    ) -> Callable[[pa.Schema], pa.Table | None] | None:
        """A reader of ``prepared`` straight from its files, when it is a plain key lookup.
        ``route`` gets a line saying so when the reader answered, or why it was bypassed."""
        if len(prepared.tables) != 1 or len(prepared.plan.tables_read) != 1:
            return None
        table, view = prepared.tables[0], prepared.table_views[0]
        if table.snapshot is None:
            return None
        lookup = plan_key_lookup(prepared.original_sql, table.table, view.descriptor.primary_key)
        if lookup is None:
            return None
        if not self._direct_enabled:
            if self.direct_bypassed:
                route.append(f"direct key lookup bypassed: {self.direct_bypassed}")
            return None

        def read(schema: pa.Schema) -> pa.Table | None:
            answer = self.direct.read(lookup, table.files, table.snapshot, schema)
            if answer is not None:
                self.direct_answers += 1
                route[:] = [DIRECT_ROUTE]
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

    def result_schema(self, prepared: Prepared) -> pa.Schema:
        """The Arrow schema ``prepared`` answers with, from Spark's analysis (no job runs): what
        a client asks before running a statement (Flight SQL's GetSchema, prepared statements)."""
        with self.views.lease(prepared.table_views):
            return self.executor.schema(prepared.sql)
