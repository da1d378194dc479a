"""Unit tests for recognising key lookups and ordered results (pure: SQL text in, bool out)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
import sqlglot

from horizon_broker.broker.sql.passes import describe_shape


def is_key_lookup(sql: str, primary_keys: Mapping[str, Sequence[str]]) -> bool:
    try:
        tree = sqlglot.parse_one(sql, dialect="spark")
    except sqlglot.errors.SqlglotError:
        return False
    return describe_shape.is_key_lookup(tree, primary_keys)


def is_ordered(sql: str) -> bool:
    """Unparseable SQL counts as ordered: holding batches back is always correct."""
    try:
        tree = sqlglot.parse_one(sql, dialect="spark")
    except sqlglot.errors.SqlglotError:
        return True
    return describe_shape.is_ordered(tree)


KEYS = {"t": ("id",), "pair": ("a", "b")}


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM t WHERE id = 5",
        "SELECT owner FROM t WHERE 5 = id",
        "SELECT * FROM t WHERE (id = -5) AND balance > 3",
        "SELECT * FROM t WHERE id IN (1, 2, 3)",
        "SELECT * FROM T AS x WHERE x.id = 5 LIMIT 1",
        "SELECT * FROM t VERSION AS OF 7 WHERE id = 5",
        "SELECT * FROM pair WHERE a = 1 AND b = 'x'",
    ],
)
def test_queries_fixing_every_key_column_to_literals_are_lookups(sql):
    assert is_key_lookup(sql, KEYS)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM t",
        "SELECT * FROM t WHERE id > 5",
        "SELECT * FROM t WHERE id = 5 OR balance = 1",
        "SELECT count(*) FROM t WHERE id = 5",
        "SELECT * FROM t AS l JOIN t AS r ON l.id = r.id WHERE l.id = 5",
        "SELECT * FROM t WHERE id = (SELECT max(id) FROM t)",
        "SELECT DISTINCT owner FROM t WHERE id = 5",
        "SELECT * FROM pair WHERE a = 1",
        "SELECT * FROM unknown WHERE id = 1",
        "SELECT * FROM t WHERE id = 5 UNION ALL SELECT * FROM t WHERE id = 6",
        "this is not sql (",
    ],
)
def test_scans_aggregates_joins_and_partial_keys_are_not_lookups(sql):
    assert not is_key_lookup(sql, KEYS)


def test_a_long_in_list_is_a_scan_not_a_lookup():
    keys = ", ".join(str(k) for k in range(2_000))
    assert not is_key_lookup(f"SELECT * FROM t WHERE id IN ({keys})", KEYS)


def test_any_order_by_makes_the_result_ordered():
    assert is_ordered("SELECT * FROM t ORDER BY id")
    assert is_ordered("SELECT * FROM (SELECT * FROM t ORDER BY id) AS s")
    assert is_ordered("SELECT 1 AS x UNION ALL SELECT 2 ORDER BY x")
    assert not is_ordered("SELECT * FROM t WHERE id < 10 LIMIT 3")
    assert is_ordered("not sql (")
