"""Kept parses and rewrites (pure): a text is parsed once, bound once per set of catalog entries
(by identity, so any new table state binds again), the least recently used texts make way within
the memory budget, and very long texts are never kept."""

from __future__ import annotations

from broker.engine.query_texts import MAX_KEPT_TEXT, TREE_BYTES_PER_CHAR, QueryTexts
from broker.sql import ParsedQuery, bind, parse_query
from broker.sql.catalog import Catalog, CatalogTable
from broker.sql.functions import FunctionPolicy
from broker.sql.model import RewriteResult, WorkBudget
from watermark.catalog import ColumnSpec, TableDescriptor

DESCRIPTOR = TableDescriptor(
    name="t", columns=(ColumnSpec("id", "bigint"), ColumnSpec("v", "string")), primary_key=("id",)
)
POLICY = FunctionPolicy(allowed=frozenset({"count", "sum"}))
BUDGET = WorkBudget()


def entry(lwm: int) -> CatalogTable:
    return CatalogTable.from_descriptor(
        DESCRIPTOR, lwm=lwm, retention_horizon=0, source_view="t_view"
    )


def parse(sql: str) -> ParsedQuery:
    return parse_query(sql, functions=POLICY)


def test_a_text_is_parsed_once_and_a_long_one_every_time() -> None:
    texts = QueryTexts()
    first = texts.parse("SELECT count(*) FROM t", parse)
    assert texts.parse("SELECT count(*) FROM t", parse) is first
    assert texts.parses == 1
    keys = ", ".join(str(key) for key in range(MAX_KEPT_TEXT // 4))
    long_sql = f"SELECT count(*) FROM t WHERE id IN ({keys})"
    assert len(long_sql) > MAX_KEPT_TEXT
    texts.parse(long_sql, parse)
    texts.parse(long_sql, parse)
    assert texts.parses == 3


def test_a_rewrite_is_kept_per_entries_and_equals_a_fresh_one() -> None:
    texts = QueryTexts()
    parsed = parse("SELECT sum(id) FROM t")

    def bound(entries: tuple[CatalogTable, ...]) -> RewriteResult:
        return texts.bind(
            parsed, entries, BUDGET, 10, lambda: bind(parsed, Catalog(entries), row_cap=10)
        )

    at_100 = (entry(100),)
    first = bound(at_100)
    assert bound(at_100) is first and texts.binds == 1
    assert first == bind(parsed, Catalog(at_100), row_cap=10)
    # An equal entry built again is another state object: bound again, with its own snapshot.
    again = bound((entry(100),))
    assert texts.binds == 2 and again == first
    moved = bound((entry(200),))
    assert texts.binds == 3 and moved.plan.snapshot == 200 and first.plan.snapshot == 100
    # Other row caps and budgets are other rewrites; entries built for one query are never kept.
    texts.bind(parsed, at_100, BUDGET, 20, lambda: bind(parsed, Catalog(at_100), row_cap=20))
    texts.bind(parsed, None, BUDGET, 10, lambda: first)
    texts.bind(parsed, None, BUDGET, 10, lambda: first)
    assert texts.binds == 6


def test_the_oldest_texts_make_way_within_the_memory_budget() -> None:
    texts = QueryTexts(kept_bytes=2 * TREE_BYTES_PER_CHAR * len("SELECT 1"))  # two such parses
    for sql in ("SELECT 1", "SELECT 2", "SELECT 1", "SELECT 3", "SELECT 1", "SELECT 2"):
        texts.parse(sql, parse)
    assert texts.parses == 4  # SELECT 2 was the oldest when SELECT 3 came
