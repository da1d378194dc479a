"""The query engine: follower state -> catalog -> rewrite -> access check -> views -> Spark.

Transport-neutral: the gRPC servicer turns these results into messages. One query takes one atomic
view of each table (segments, generation, LWM), rewrites against it, and runs on the temp views of
exactly those generations. When Spark finds a segment file unreadable, the segment is removed from
the timeline (which falls back to what it overwrote) and the query is prepared and run once more.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import pyarrow as pa

from horizon_broker._core.errors import FailedPrecondition, HorizonError, Unavailable
from horizon_broker.broker.config import BrokerConfig
from horizon_broker.broker.grants import Principal, check_read, not_readable
from horizon_broker.broker.spark.executor import QueryScope, ResultLimits, SparkExecutor, job_group
from horizon_broker.broker.spark.supervisor import check_engine_up, engine_failure
from horizon_broker.broker.spark.views import UnreadableFiles, ViewCache, ViewMissing
from horizon_broker.broker.sql import ParsedQuery
from horizon_broker.broker.sql.errors import NoLowWatermark, UnknownTable
from horizon_broker.broker.sql.model import RewriteLimits
from horizon_broker.pins.rules import Pin

from .admission import admission_of
from .catalog import CatalogEntries, build_catalog
from .direct import DirectLookups
from .execution import Execution
from .fallbacks import check_fallbacks, drop_unreadable, retry_refused
from .floor import SnapshotFloor
from .freshness import check_prepared_staleness, required_snapshot, wait_for_snapshot
from .pinning import check_pinned_tables, find_pin, pin_plan, pinned_views
from .prepared import SNAPSHOT_LWM, Prepared, read_info
from .query_cache import QueryCache, cached_execution
from .query_limits import query_deadline, reprepare_after_queue, result_limits
from .query_texts import QueryTexts
from .read_options import DEFAULT as DEFAULT_READ
from .read_options import ReadOptions
from .registry import QueryRegistry
from .result_cache import ResultCache
from .retry import ATTEMPTS, Failure, failure_of, retries
from .starting import Attempt, start_answer

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
        pins: Any = None,
        floor: SnapshotFloor | None = None,
    ) -> None:
        """``pins`` is the pin store (:class:`horizon_broker.pins.store.PinStore`; None: pins are off);
        ``floor`` the persisted served-snapshot floor (None: kept in memory only)."""
        from horizon_broker.broker.sql.functions_from_spark import function_policy_from_spark

        self.follower = follower
        self.config = config
        self._view_namespace = view_namespace
        self.spark_generation = 0
        """Bumped each time the engine moves to a new Spark session (:meth:`use_spark`)."""
        self.supervisor: Any = None
        """The Spark supervisor (:class:`horizon_broker.broker.spark.supervisor.SparkSupervisor`), if any:
        told when a query suspects the engine, asked whether it is up."""
        self.use_spark(spark)
        self.queries = QueryRegistry()
        """Running and recent queries (the service records their lifecycle)."""
        self.catalog_entries = CatalogEntries()
        self.direct = DirectLookups(config.spark, self.executor.mode)
        self.admission = admission_of(config)
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
        self.budget = config.limits.budget
        """The work budget every bind checks (built once: the limits are frozen)."""
        self.texts = QueryTexts(self.rewrite_limits, self.functions)

    def use_spark(self, spark: Any) -> None:
        """Run every later query on ``spark`` (a new session after the old one died): a fresh
        executor and view cache; views are rebuilt from the follower's state as queries lease
        them. Queries still running on the old session fail as having lost their engine."""
        executor = SparkExecutor(spark)
        views = ViewCache(spark, namespace=self._view_namespace, mirrors=executor.mirrors)
        self.spark, self.executor, self.views = spark, executor, views
        self.spark_generation += 1

    # -- preparing -----------------------------------------------------------------------------

    def parse(self, sql: str) -> ParsedQuery:
        """Check and parse a query's text, once for every prepare of it (and of it again)."""
        return self.texts.parse(sql)

    def prepare(
        self,
        query: str | ParsedQuery,
        principal: Principal,
        *,
        query_id: str | None = None,
        options: ReadOptions = DEFAULT_READ,
        deadline: float | None = None,
        row_cap: int | None = None,
        gone: Callable[[], HorizonError | None] = lambda: None,
    ) -> Prepared:
        """Rewrite ``query`` (its text, or the :meth:`parse` of it) against the current state
        and check the caller may read its tables (``gone``: why the caller no longer waits).

        ``row_cap`` plans the result's row limit into the SQL that runs (``Prepared.run_sql``).

        ``options`` are the read controls (:mod:`horizon_broker.broker.engine.read_options`): a default read
        waits, until ``deadline`` (monotonic), for its tables' LWM to reach ``min_snapshot`` and
        this broker's floor, and is refused when older than ``max_staleness``; a pinned one reads
        at the pin.
        """
        started = time.perf_counter()
        parsed = query if isinstance(query, ParsedQuery) else self.parse(query)
        pin = self._pin(options.pin_id) if options.pin_id else None
        waited_s = 0.0
        while True:
            prepared = self._prepare_once(parsed, principal, query_id, pin, row_cap)
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
            wait_for_snapshot(
                self.follower, tables, required, self.wait_deadline(deadline), why, gone=gone
            )
            waited_s += time.perf_counter() - wait_started
        if prepared.snapshot_source == SNAPSHOT_LWM and prepared.plan.snapshot is not None:
            check_prepared_staleness(prepared, options.max_staleness_s)
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
        self,
        parsed: ParsedQuery,
        principal: Principal,
        query_id: str | None,
        pin: Pin | None,
        row_cap: int | None,
    ) -> Prepared:
        staleness = self._check_fresh()
        views, failures = self._table_views(principal, parsed.tables)
        if pin is not None:
            views = pinned_views(views, pin)
        catalog = build_catalog(
            views.values(),
            [d for d, _ in failures.values()],
            namespace=self.views.namespace,
            layout_of=self.views.layout,
            kept=self.catalog_entries,
        )
        try:
            result = self.texts.bind(
                parsed, catalog, budget=self.budget, row_cap=row_cap, keep=not failures
            )
        except NoLowWatermark:
            # A table whose state could not be read explains itself better than "no LWM".
            self._raise_failed_table(parsed.sql, failures)
            raise
        except UnknownTable as error:
            # The catalog holds only the caller's tables: to a caller without every grant an
            # unknown name and an ungranted one must look the same.
            if principal.restricted:
                raise not_readable(principal, [error.name or "?"]) from None
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
            entry = catalog.get(read.name)
            files = entry.files if entry is not None and entry.segments else None
            info = read_info(read, view, self.views.layout(view), files)
            check_fallbacks(info, view)
            reads.append(info)
        return Prepared(
            query_id=query_id or uuid.uuid4().hex[:16],
            original_sql=parsed.sql,
            rewrite=result,
            tables=tuple(reads),
            table_views=tuple(table_views),
            staleness_s=staleness,
            rewrite_s=0.0,
            pin=pin,
            identity=principal.name,
        )

    def pin_store(self) -> Any:
        if self.pins is None:
            raise FailedPrecondition("this broker has no pin store: snapshot pins are off")
        return self.pins

    def _pin(self, pin_id: str) -> Pin:
        return find_pin(self.pin_store(), pin_id)

    def pin_plan(self, prepared: Prepared, lease_s: float, *, owner: str) -> Pin | None:
        """Pin what a passthrough plan reads (see :func:`~horizon_broker.broker.engine.pinning.pin_plan`)."""
        return pin_plan(self.pin_store(), prepared, lease_s, owner=owner)

    def _check_fresh(self) -> float:
        staleness = float(self.follower.staleness_s())
        limit = self.config.state.max_staleness_s
        if staleness > limit:
            raise Unavailable(
                f"the broker's server state is {staleness:.1f}s stale (limit {limit:.1f}s): "
                "the state store is unreachable"
            )
        return staleness

    def _table_views(
        self, principal: Principal, named: frozenset[str] | None = None
    ) -> tuple[dict[str, Any], dict[str, tuple[Any, HorizonError]]]:
        """Each table ``principal`` may read (of those ``named``, if given), as one atomic view
        (or the error reading it)."""
        views: dict[str, Any] = {}
        failures: dict[str, tuple[Any, HorizonError]] = {}
        for table in self.follower.tables():
            if not principal.may_read(table) or (named is not None and table.lower() not in named):
                continue
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
        """Start a query: limits, deadline, preparation, the result cache, admission, then its
        route, tried again once after a failure the engine repaired (:mod:`.retry`).

        Returns once the result's first :data:`FIRST_FLUSH_BYTES` (or all of it) came from Spark;
        the rest streams from :meth:`Execution.batches`. Until then a read failure can still be
        retried on the fallen-back timeline; after that it ends the stream. The caller must
        :meth:`Execution.close` the execution (it holds an admission slot until then). An answer
        in the result cache is returned without a slot or Spark (grants were checked by prepare).
        """
        limits = result_limits(self.config.limits, max_rows)
        timeout_s = self.config.limits.query_timeout_s
        scope.deadline = query_deadline(scope.deadline, timeout_s, time.monotonic())
        prepare = self._preparation(sql, principal, scope, options, limits.max_rows, is_active)
        prepared = prepare()
        cache = QueryCache(self.cache, limits.max_rows, options.use_cache)
        answer = cache.look_up(prepared)
        if answer is not None:
            return cached_execution(prepared, answer)
        check_engine_up(self.supervisor)
        generation = self.spark_generation
        with ExitStack() as held:
            queued_s = held.enter_context(
                self.admission.slot(
                    deadline=scope.deadline, is_active=is_active, identity=principal.name
                )
            )
            if reprepare_after_queue(queued_s):
                prepared = prepare()
            attempt = self._start(prepare, prepared, scope, limits, generation)
            held.callback(attempt.started.stream.close)
            return attempt.execution(
                cache,
                queued_s=queued_s,
                on_failure=lambda error: self._engine_failure(error, generation),
                held=held.pop_all(),
            )

    def _preparation(
        self,
        sql: str,
        principal: Principal,
        scope: QueryScope,
        options: ReadOptions,
        row_cap: int,
        is_active: Callable[[], bool],
    ) -> Callable[[], Prepared]:
        """``sql`` parsed once, and how to prepare it (again) on the newest state."""
        return functools.partial(
            self.prepare,
            self.parse(sql),
            principal,
            query_id=scope.query_id,
            options=options,
            deadline=scope.deadline,
            row_cap=row_cap,
            gone=functools.partial(scope.why_stopped, is_active),
        )

    def _start(
        self,
        prepare: Callable[[], Prepared],
        prepared: Prepared,
        scope: QueryScope,
        limits: ResultLimits,
        generation: int,
    ) -> Attempt:
        """Start ``prepared`` on its route; after a failure :mod:`.retry` allows, prepare it
        again (on the repaired state) and start that."""
        unreadable: list[str] = []
        for attempt in range(ATTEMPTS):
            if attempt > 0:
                prepared = prepare()
            route = self.direct.route(prepared, self.executor.mode.describe())
            try:
                started = start_answer(route, prepared, scope, limits, self.executor, self.views)
            except BaseException as error:
                self._after_failure(error, prepared, attempt, generation, unreadable)
                continue
            return Attempt(prepared, route, started, attempt, unreadable)
        raise AssertionError("unreachable")  # pragma: no cover

    def _after_failure(
        self,
        error: BaseException,
        prepared: Prepared,
        attempt: int,
        generation: int,
        unreadable: list[str],
    ) -> None:
        """Repair what ``error`` says is broken, then return to retry or raise the query's
        error (the policies are :mod:`.retry`'s). Called while ``error`` is handled."""
        failure = failure_of(error)
        removed = self._repair(error, prepared)
        unreadable.extend(removed)
        if retries(failure, attempt, removed):
            if failure is Failure.UNREADABLE_FILES:
                log.warning(
                    "query %s: %s; retrying on the new visible set", prepared.query_id, error
                )
            return
        if failure is Failure.VIEW_MISSING:
            raise error
        if isinstance(error, UnreadableFiles):
            raise retry_refused(error, removed) from None
        raise self._engine_failure(error, generation) from None

    def _repair(self, error: BaseException, prepared: Prepared) -> list[str]:
        """Undo what ``error`` found broken before a retry: a vanished view is forgotten (the
        retry registers it again), segments with files nobody can read leave the timeline
        (their ids are returned)."""
        if isinstance(error, ViewMissing):
            self.views.forget(error.name)
        elif isinstance(error, UnreadableFiles):
            return drop_unreadable(self.follower, prepared, error)
        return []

    def spark_jobs_running(self, handle: str) -> int | None:
        """How many Spark jobs of the query (its scope's handle) still run (None: unknown)."""
        try:
            return self.executor.mode.jobs_running(job_group(handle))
        except Exception:  # the engine is restarting: nothing of that query runs there
            return None

    def _engine_failure(self, error: BaseException, generation: int) -> BaseException:
        replaced = generation != self.spark_generation
        return engine_failure(error, self.supervisor, session_replaced=replaced)

    def cache_state(self, prepared: Prepared, options: ReadOptions = DEFAULT_READ) -> str:
        """What :meth:`execute` would do with the cache for ``prepared`` (explain's answer)."""
        max_rows = self.config.limits.max_result_rows
        return QueryCache(self.cache, max_rows, options.use_cache).state(prepared)

    @property
    def direct_answers(self) -> int:
        """Queries answered from the files (a test and benchmark probe)."""
        return self.direct.answers

    def spark_plan(self, prepared: Prepared, *, deadline: float | None = None) -> str:
        """Spark's physical plan of ``prepared``: planning is work on the shared driver, so it
        takes an admission slot in its caller's share (waiting until ``deadline`` at most)."""
        return self._on_driver(prepared, self.executor.explain, deadline)

    def result_schema(self, prepared: Prepared, *, deadline: float | None = None) -> pa.Schema:
        """The Arrow schema ``prepared`` answers with, from Spark's analysis (no job runs): what
        a client asks before running a statement (Flight SQL's GetSchema, prepared statements).
        Analysis is work on the shared driver too: it takes an admission slot."""
        return self._on_driver(prepared, self.executor.schema, deadline)

    def _on_driver(
        self, prepared: Prepared, work: Callable[[str], Any], deadline: float | None
    ) -> Any:
        check_engine_up(self.supervisor)
        generation, timeout = self.spark_generation, self.config.limits.query_timeout_s
        deadline = time.monotonic() + timeout if deadline is None else deadline
        with (
            self.admission.slot(deadline=deadline, identity=prepared.identity),
            self.views.lease(prepared.table_views),
        ):
            try:
                return work(prepared.run_sql)
            except BaseException as error:
                raise self._engine_failure(error, generation) from None
