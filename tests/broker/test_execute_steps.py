"""The steps of QueryEngine.execute, each alone and without Spark: the result limits and the
deadline, the route (decided once, from the prepared query), the retry policy per failure, and
the result cache's key and bypass rules. The queries are real rewrites of real table states."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

from horizon_broker._core.errors import Internal, ResourceExhausted
from horizon_broker.broker.config import LimitsConfig, SparkConfig
from horizon_broker.broker.engine.catalog import build_catalog
from horizon_broker.broker.engine.direct import DirectLookups
from horizon_broker.broker.engine.prepared import Prepared, read_info
from horizon_broker.broker.engine.query_cache import CACHE_ROUTE, QueryCache, cached_execution
from horizon_broker.broker.engine.query_limits import (
    query_deadline,
    reprepare_after_queue,
    result_limits,
)
from horizon_broker.broker.engine.result_cache import BYPASSED, HIT, MISS, OFF, ResultCache
from horizon_broker.broker.engine.retry import ATTEMPTS, Failure, failure_of, retries
from horizon_broker.broker.engine.route import RouteKind, decide_route, lookup_target
from horizon_broker.broker.spark.failures import UnreadableFiles, ViewMissing
from horizon_broker.broker.spark.modes.connect import ConnectMode
from horizon_broker.broker.spark.scan_layout import scan_layout
from horizon_broker.broker.sql import bind
from horizon_broker.broker.sql.functions import FunctionPolicy
from horizon_broker.broker.sql.rewrite import parse_query
from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor
from horizon_broker.watermark.follower import TableState

COLUMNS = (ColumnSpec("id", "bigint"), ColumnSpec("v", "string"))
ACCOUNTS = TableDescriptor(name="accounts", columns=COLUMNS, primary_key=("id",))
OWNERS = TableDescriptor(name="owners", columns=COLUMNS, primary_key=("id",))
EVENTS = TableDescriptor(name="events", columns=COLUMNS, upsert=False)
STATES = [
    TableState(descriptor.name, descriptor, 1, (), 100, 0, 0.0, None)
    for descriptor in (ACCOUNTS, OWNERS, EVENTS)
]
POLICY = FunctionPolicy(allowed=frozenset({"count", "rand"}))
ENGINE_LINE = "local Spark (local[2])"


def prepared(sql: str, max_rows: int = 100) -> Prepared:
    """``sql`` bound to the three tables' states, as the engine prepares it."""
    catalog = build_catalog(STATES, layout_of=scan_layout)
    rewrite = bind(parse_query(sql, functions=POLICY), catalog, row_cap=max_rows)
    views = {state.table: state for state in STATES}
    read = rewrite.plan.tables_read
    reads = [views[r.name.lower()] for r in read]
    infos = tuple(read_info(r, v, scan_layout(v)) for r, v in zip(read, reads, strict=True))
    return Prepared("q1", sql, rewrite, infos, tuple(reads), 0.0, 0.0)


# -- limits and deadline -------------------------------------------------------------------------


def test_a_callers_max_rows_applies_only_when_tighter_than_the_brokers_and_is_named_as_its():
    limits = LimitsConfig(max_result_rows=1_000, max_result_bytes=5_000)
    tighter = result_limits(limits, 10)
    assert (tighter.max_rows, tighter.max_bytes, tighter.rows_limit_name) == (10, 5_000, "max_rows")
    with pytest.raises(ResourceExhausted, match="max_rows = 10"):
        tighter.check(11, 0)
    for asked in (0, 1_000, 5_000):  # no limit of the caller's own, or a looser one
        broker = result_limits(limits, asked)
        assert (broker.max_rows, broker.rows_limit_name) == (1_000, "max_result_rows")


def test_a_query_deadline_is_the_callers_but_never_past_the_query_timeout():
    assert query_deadline(None, 30.0, now=100.0) == 130.0
    assert query_deadline(110.0, 30.0, now=100.0) == 110.0
    assert query_deadline(500.0, 30.0, now=100.0) == 130.0


def test_only_a_query_that_queued_past_a_second_is_prepared_again_once_admitted():
    assert not reprepare_after_queue(0.0)
    assert not reprepare_after_queue(1.0)
    assert reprepare_after_queue(1.5)


# -- the route -----------------------------------------------------------------------------------


def test_the_files_may_answer_only_a_plain_key_lookup_of_one_table_at_a_snapshot():
    lookup = lookup_target(prepared("SELECT v FROM accounts WHERE id = 5"))
    assert lookup is not None and lookup.snapshot == 100 and lookup.table.table == "accounts"
    assert [p.column for p in lookup.lookup.predicates] == ["id"]
    pinned = lookup_target(prepared("SELECT v FROM accounts VERSION AS OF 50 WHERE id IN (1, 2)"))
    assert pinned is not None and pinned.snapshot == 50
    for sql in (
        "SELECT count(*) FROM accounts",  # not a lookup
        "SELECT v FROM accounts WHERE v = 'x'",  # not by key
        "SELECT a.v FROM accounts a JOIN owners o ON a.id = o.id WHERE a.id = 5",  # two tables
        "SELECT v FROM events WHERE id = 5",  # an append table: read at no snapshot
    ):
        assert lookup_target(prepared(sql)) is None, sql
    # Whatever the rewrite recognised, the files answer one table read at a snapshot only.
    by_key = prepared("SELECT v FROM accounts WHERE id = 5")
    (table,) = by_key.tables
    at_no_snapshot = dataclasses.replace(table, snapshot=None)
    assert lookup_target(dataclasses.replace(by_key, tables=(at_no_snapshot,))) is None
    assert lookup_target(dataclasses.replace(by_key, tables=(table, table))) is None


def test_a_lookup_routes_to_the_files_once_its_shape_is_known_and_to_spark_first():
    lookup = prepared("SELECT v FROM accounts WHERE id = 5")
    schema = pa.schema([("v", pa.string())])
    new_shape = decide_route(lookup, ENGINE_LINE, enabled=True, bypassed="", known_schema=None)
    assert new_shape.kind is RouteKind.SPARK_SCHEMA_THEN_FILES and new_shape.target is not None
    known = decide_route(lookup, ENGINE_LINE, enabled=True, bypassed="", known_schema=schema)
    assert known.kind is RouteKind.FILES and known.known_schema == schema
    # Spark may answer through the reader after analysis only for a new shape: a known
    # shape's files were asked already, before Spark.
    reader = lambda schema: None  # noqa: E731 - a reader that declines
    new_shape.reader = known.reader = reader
    assert new_shape.reader_after_analysis is reader
    assert known.reader_after_analysis is None
    assert known.describe() == ENGINE_LINE


def test_everything_but_a_lookup_and_every_lookup_without_direct_reads_routes_to_spark():
    aggregate = prepared("SELECT count(*) FROM accounts")
    spark = decide_route(aggregate, ENGINE_LINE, enabled=True, bypassed="", known_schema=None)
    assert spark.kind is RouteKind.SPARK and spark.target is None and spark.reader is None
    lookup = prepared("SELECT v FROM accounts WHERE id = 5")
    off = decide_route(lookup, ENGINE_LINE, enabled=False, bypassed="", known_schema=None)
    assert off.kind is RouteKind.SPARK and off.notes == [ENGINE_LINE]
    bypassed = decide_route(
        lookup, ENGINE_LINE, enabled=False, bypassed="Spark Connect", known_schema=None
    )
    assert bypassed.kind is RouteKind.SPARK
    assert bypassed.describe() == f"{ENGINE_LINE}; direct key lookup bypassed: Spark Connect"


def test_the_direct_lookups_route_a_query_once_and_remember_sparks_schema_of_its_shape():
    lookups = DirectLookups(SparkConfig(), ConnectMode(None))
    lookup = prepared("SELECT v FROM accounts WHERE id = 5")
    route = lookups.route(lookup, "connect Spark (sc://)")
    assert route.kind is RouteKind.SPARK and "bypassed: Spark Connect" in route.describe()
    assert route.remember_schema is not None
    schema = pa.schema([("v", pa.string())])
    route.remember_schema(schema)
    assert lookups.known_schema(lookups.schema_key(lookup)) == schema
    other_key = prepared("SELECT v FROM accounts WHERE id = 7")
    assert lookups.known_schema(lookups.schema_key(other_key)) == schema, "one shape"
    aggregate = lookups.route(prepared("SELECT count(*) FROM accounts"), "connect Spark (sc://)")
    assert aggregate.remember_schema is None and aggregate.notes == ["connect Spark (sc://)"]


# -- the retry policy ----------------------------------------------------------------------------


def test_each_failure_has_its_policy():
    assert failure_of(ViewMissing("__horizon_accounts_g1")) is Failure.VIEW_MISSING
    assert failure_of(UnreadableFiles(["/x.parquet"], "gone")) is Failure.UNREADABLE_FILES
    assert failure_of(Internal("boom")) is Failure.ENGINE
    assert failure_of(RuntimeError("py4j")) is Failure.ENGINE
    assert failure_of(KeyboardInterrupt()) is Failure.ENGINE


def test_a_vanished_view_is_retried_once():
    assert retries(Failure.VIEW_MISSING, 0, removed=[])
    assert not retries(Failure.VIEW_MISSING, ATTEMPTS - 1, removed=[])


def test_unreadable_files_are_retried_once_and_only_when_segments_left_the_timeline():
    assert retries(Failure.UNREADABLE_FILES, 0, removed=["seg-1"])
    assert not retries(Failure.UNREADABLE_FILES, 0, removed=[]), "the broker reads the files"
    assert not retries(Failure.UNREADABLE_FILES, ATTEMPTS - 1, removed=["seg-1"])


def test_any_other_failure_is_never_retried():
    assert ATTEMPTS == 2
    assert not retries(Failure.ENGINE, 0, removed=["seg-1"])


# -- the result cache ----------------------------------------------------------------------------


def test_the_cache_key_holds_the_row_cap_and_a_kept_answer_is_found_by_it():
    cache = ResultCache(1 << 20, 1 << 20)
    query = prepared("SELECT v FROM accounts WHERE id = 5")
    capped = QueryCache(cache, 100)
    key, state = capped.decide(query)
    assert state == MISS and key is not None
    assert key != QueryCache(cache, 10).decide(prepared("SELECT v FROM accounts WHERE id = 5"))[0]
    assert capped.look_up(query) is None and cache.misses == 1
    recorder = capped.recorder(query, pa.schema([("v", pa.string())]))
    assert recorder is not None
    recorder.add(pa.record_batch({"v": ["x"]}))
    assert recorder.finish()
    assert capped.state(query) == HIT and cache.hits == 0, "explain's answer touches nothing"
    answer = capped.look_up(query)
    assert answer is not None and cache.hits == 1
    assert QueryCache(cache, 10).look_up(query) is None, "another row cap is another answer"
    execution = cached_execution(query, answer)
    assert (execution.cache, execution.route, execution.rest) == (HIT, CACHE_ROUTE, None)
    assert [b.to_pylist() for b in execution.batches()] == [[{"v": "x"}]]


def test_a_bypassing_caller_neither_reads_nor_fills_the_cache():
    cache = ResultCache(1 << 20, 1 << 20)
    query = prepared("SELECT v FROM accounts WHERE id = 5")
    recorder = QueryCache(cache, 100).recorder(query, pa.schema([("v", pa.string())]))
    assert recorder is not None
    recorder.add(pa.record_batch({"v": ["x"]}))
    recorder.finish()
    bypassing = QueryCache(cache, 100, use_cache=False)
    assert bypassing.decide(query) == (None, BYPASSED)
    assert bypassing.look_up(query) is None and (cache.hits, cache.misses) == (0, 0)
    assert bypassing.recorder(query, pa.schema([("v", pa.string())])) is None
    assert bypassing.state(query) == BYPASSED


def test_no_cache_and_uncacheable_queries_say_why_they_were_not_cached():
    query = prepared("SELECT v FROM accounts WHERE id = 5")
    assert QueryCache(None, 100).decide(query) == (None, OFF)
    assert QueryCache(None, 100).look_up(query) is None
    cache = ResultCache(1 << 20, 1 << 20)
    random_rows = QueryCache(cache, 100).decide(prepared("SELECT rand() FROM accounts"))
    assert random_rows == (None, "not cached: it calls rand")
    no_snapshot = QueryCache(cache, 100).decide(prepared("SELECT v FROM events"))
    assert no_snapshot == (None, "not cached: it reads no table at a snapshot")
