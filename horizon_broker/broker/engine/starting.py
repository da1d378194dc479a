"""Starting a query on its route: its schema and first batches, gathered before anything is sent.

Until the first :data:`~horizon_broker.broker.engine.execution.FIRST_FLUSH_BYTES` are held a
failure can still be retried (:mod:`~horizon_broker.broker.engine.retry`); the rest streams later.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import cast

import pyarrow as pa

from horizon_broker.broker.engine.execution import (
    FIRST_FLUSH_BYTES,
    Execution,
    Stream,
    first_batches,
    limited_batches,
    no_stream,
)
from horizon_broker.broker.engine.prepared import Prepared
from horizon_broker.broker.engine.query_cache import QueryCache
from horizon_broker.broker.engine.route import Route, RouteKind
from horizon_broker.broker.spark.executor import QueryScope, ResultLimits, SparkExecutor
from horizon_broker.broker.spark.views import ViewCache


@dataclass(slots=True)
class Started:
    """A query's answer begun: the stream of the rest (close it when done) and the timings."""

    stream: Stream
    schema: pa.Schema
    head: list[pa.RecordBatch]
    done: bool
    """Whether ``head`` is the whole answer."""
    views_s: float
    spark_s: float


@dataclass(slots=True)
class Attempt:
    """The start that succeeded: on which preparation and route, after how many failures."""

    prepared: Prepared
    route: Route
    started: Started
    number: int
    """0 for the first start; more after retries."""
    unreadable: list[str]
    """Segments taken off the timeline as unreadable before this start."""

    def execution(
        self,
        cache: QueryCache,
        *,
        queued_s: float,
        on_failure: Callable[[BaseException], BaseException],
        held: ExitStack,
    ) -> Execution:
        """The started query the caller streams (``held``: what it frees on close)."""
        prepared, started = self.prepared, self.started
        return Execution(
            prepared=prepared,
            schema=started.schema,
            head=started.head,
            rest=None if started.done else started.stream,
            files=prepared.files,
            queued_s=queued_s,
            rewrite_s=prepared.rewrite_s,
            views_s=started.views_s,
            spark_s=started.spark_s,
            unreadable_segments=self.unreadable,
            retried=self.number > 0,
            cache=cache.decide(prepared)[1],
            route=self.route.describe(),
            on_failure=on_failure,
            recorder=cache.recorder(prepared, started.schema),
            _held=held,
        )


def start_answer(
    route: Route,
    prepared: Prepared,
    scope: QueryScope,
    limits: ResultLimits,
    executor: SparkExecutor,
    views: ViewCache,
) -> Started:
    """Start ``prepared`` on ``route``: from the files alone when the route says so and the
    reader answers, else on Spark over the leased views. A failure closes the stream begun."""
    stream: Stream = no_stream()
    try:
        started = time.perf_counter()
        answer = _files_answer(route, prepared, scope, limits, executor)
        if answer is not None:  # from the files: no view, no job, no call into Spark
            stream = answer
            return _gathered(stream, views_s=0.0, since=started)
        stream = cast(  # a generator function, typed as the iterator it is to its callers
            Stream,
            executor.stream(
                prepared.run_sql,
                scope,
                limits,
                files=prepared.files,
                views=prepared.view_names,
                lookup=prepared.plan.shape.point_lookup,
                ordered=prepared.plan.shape.ordered,
                direct=route.reader_after_analysis,
                on_schema=route.remember_schema,
            ),
        )
        with views.lease(prepared.table_views) as (_, views_s):
            return _gathered(stream, views_s=views_s, since=time.perf_counter())
    except BaseException:
        stream.close()
        raise


def _files_answer(
    route: Route,
    prepared: Prepared,
    scope: QueryScope,
    limits: ResultLimits,
    executor: SparkExecutor,
) -> Stream | None:
    """The FILES route's answer as a stream (schema, then batches; the limits checked), or
    None: Spark must run the query (another route, or the reader declined)."""
    schema = route.known_schema
    if route.kind is not RouteKind.FILES or route.reader is None or schema is None:
        return None
    answer = executor.answer_directly(route.reader, schema, scope, prepared.files)
    return None if answer is None else limited_batches(schema, answer, limits)


def _gathered(stream: Stream, *, views_s: float, since: float) -> Started:
    """The schema and first batches of ``stream``; Spark's time counted from ``since``."""
    schema = next(stream)
    head, done = first_batches(stream, FIRST_FLUSH_BYTES)
    return Started(stream, schema, head, done, views_s, time.perf_counter() - since)
