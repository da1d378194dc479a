"""Kept parses and rewrites (pure): a text is parsed once, bound once per set of catalog entries
(by identity, so any new table state binds again), the least recently used texts make way within
the memory budget, and very long texts are never kept."""

from __future__ import annotations

import pytest

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.broker.engine.query_texts import MAX_KEPT_TEXT, TREE_BYTES_PER_CHAR, QueryTexts
from horizon_broker.broker.sql import bind
from horizon_broker.broker.sql.catalog import Catalog, CatalogTable
from horizon_broker.broker.sql.functions import FunctionPolicy
from horizon_broker.broker.sql.model import RewriteLimits, WorkBudget
from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor

DESCRIPTOR = TableDescriptor(
    name="t", columns=(ColumnSpec("id", "bigint"), ColumnSpec("v", "string")), primary_key=("id",)
)
POLICY = FunctionPolicy(allowed=frozenset({"count", "sum"}))
BUDGET = WorkBudget()


def texts(**options: int) -> QueryTexts:
    return QueryTexts(RewriteLimits(), POLICY, **options)


def entry(lwm: int) -> CatalogTable:
    return CatalogTable.from_descriptor(
        DESCRIPTOR, lwm=lwm, retention_horizon=0, source_view="t_view"
    )


def test_a_text_is_parsed_once_a_long_one_every_time_and_an_empty_one_never() -> None:
    kept = texts()
    first = kept.parse("SELECT count(*) FROM t")
    assert kept.parse("SELECT count(*) FROM t") is first
    assert kept.parses == 1
    keys = ", ".join(str(key) for key in range(MAX_KEPT_TEXT // 4))
    long_sql = f"SELECT count(*) FROM t WHERE id IN ({keys})"
    assert len(long_sql) > MAX_KEPT_TEXT
    kept.parse(long_sql)
    kept.parse(long_sql)
    assert kept.parses == 3
    with pytest.raises(InvalidArgument, match="the query is empty"):
        kept.parse("  ")


def test_a_rewrite_is_kept_per_entries_and_equals_a_fresh_one() -> None:
    kept = texts()
    parsed = kept.parse("SELECT sum(id) FROM t")

    def bound(catalog: Catalog, row_cap: int = 10, keep: bool = True):  # type: ignore[no-untyped-def]
        return kept.bind(parsed, catalog, budget=BUDGET, row_cap=row_cap, keep=keep)

    at_100 = Catalog([entry(100)])
    first = bound(at_100)
    assert bound(at_100) is first and kept.binds == 1
    assert first == bind(parsed, at_100, row_cap=10)
    # An equal entry built again is another state object: bound again, with its own snapshot.
    again = bound(Catalog([entry(100)]))
    assert kept.binds == 2 and again == first
    moved = bound(Catalog([entry(200)]))
    assert kept.binds == 3 and moved.plan.snapshot == 200 and first.plan.snapshot == 100
    # Another row cap is another rewrite; a catalog built for one query alone is never kept.
    assert bound(at_100, row_cap=20) != first
    assert bound(at_100, keep=False) == first
    assert bound(at_100, keep=False) == first
    assert kept.binds == 6


def test_the_oldest_texts_make_way_within_the_memory_budget() -> None:
    kept = texts(kept_bytes=2 * TREE_BYTES_PER_CHAR * len("SELECT 1"))  # two such parses
    for sql in ("SELECT 1", "SELECT 2", "SELECT 1", "SELECT 3", "SELECT 1", "SELECT 2"):
        kept.parse(sql)
    assert kept.parses == 4  # SELECT 2 was the oldest when SELECT 3 came
