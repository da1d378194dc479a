"""Hostile sizes and depths end in a clean ResourceExhausted error, never a RecursionError."""

from __future__ import annotations

import sys
import threading

import pytest

from horizon_broker._core.errors import ResourceExhausted
from horizon_broker.broker.sql import Catalog, FunctionPolicy, RewriteLimits, rewrite
from horizon_broker.broker.sql.errors import QueryTooLarge

DEEP = 5_000

HOSTILE = {
    "parentheses": "SELECT " + "(" * DEEP + "1" + ")" * DEEP + " FROM orders",
    "not-chain": "SELECT " + "NOT " * DEEP + "true FROM orders",
    "unary-minus": "SELECT " + "- " * DEEP + "1 FROM orders",
    "case-nesting": "SELECT " + "CASE WHEN true THEN " * DEEP + "1" + " END" * DEEP,
    "subscripts": "SELECT items" + "[0]" * DEEP + " FROM orders",
    "subqueries": "SELECT * FROM orders WHERE id IN "
    + "(SELECT id FROM orders WHERE id IN " * DEEP
    + "(1)"
    + ")" * DEEP,
    "plus-chain": "SELECT " + " + ".join(["1"] * DEEP) + " FROM orders",
    "and-chain": "SELECT * FROM orders WHERE " + " AND ".join(["id = 1"] * DEEP),
}


@pytest.mark.parametrize("sql", HOSTILE.values(), ids=HOSTILE.keys())
def test_five_thousand_deep_query_is_a_clean_resource_error(
    sql: str, catalog: Catalog, functions: FunctionPolicy
) -> None:
    with pytest.raises(QueryTooLarge) as raised:
        rewrite(sql, catalog, functions=functions)
    assert isinstance(raised.value, ResourceExhausted)


#: Shapes sqlglot handles iteratively (long operator chains) can pass once the limits are lifted.
ITERATIVE_IN_SQLGLOT = {"plus-chain", "and-chain"}


@pytest.mark.parametrize(("name", "sql"), HOSTILE.items(), ids=HOSTILE.keys())
def test_recursion_inside_sqlglot_is_caught_when_the_limits_are_lifted(
    name: str, sql: str, catalog: Catalog, functions: FunctionPolicy
) -> None:
    lifted = RewriteLimits(max_sql_length=10**7, max_nesting=10**6, max_tree_depth=10**6)
    if name in ITERATIVE_IN_SQLGLOT:
        assert rewrite(sql, catalog, limits=lifted, functions=functions).plan.snapshot == 70_000
        return
    with pytest.raises(QueryTooLarge, match="nested too deeply"):
        rewrite(sql, catalog, limits=lifted, functions=functions)


def test_text_over_the_length_limit_is_refused_before_parsing(
    catalog: Catalog, functions: FunctionPolicy
) -> None:
    sql = "SELECT 1 FROM orders WHERE status = '" + "x" * 200 + "'"
    with pytest.raises(QueryTooLarge, match="over the limit of 100"):
        rewrite(sql, catalog, limits=RewriteLimits(max_sql_length=100), functions=functions)


def test_nesting_at_the_limit_is_accepted_and_one_more_level_is_refused(
    catalog: Catalog, functions: FunctionPolicy
) -> None:
    limits = RewriteLimits(max_nesting=100)
    at_limit = "SELECT " + "(" * 100 + "id" + ")" * 100 + " FROM orders"
    assert (
        "__horizon_orders_g17" in rewrite(at_limit, catalog, limits=limits, functions=functions).sql
    )
    with pytest.raises(QueryTooLarge, match="nesting depth 101"):
        rewrite("SELECT (" + at_limit[7:] + ")", catalog, limits=limits, functions=functions)


def test_default_limits_hold_in_a_worker_thread_with_a_low_recursion_limit(
    catalog: Catalog, functions: FunctionPolicy
) -> None:
    """The broker rewrites on gRPC worker threads; even a lowered interpreter recursion limit
    gives either an answer or QueryTooLarge for every allowed nesting, never a RecursionError."""
    outcomes: list[object] = []

    def work() -> None:
        previous = sys.getrecursionlimit()
        sys.setrecursionlimit(250)
        try:
            for depth in (10, 50, 100):
                sql = "SELECT " + "(" * depth + "id" + ")" * depth + " FROM orders"
                try:
                    outcomes.append(rewrite(sql, catalog, functions=functions).plan.snapshot)
                except QueryTooLarge as error:
                    outcomes.append(error)
        except BaseException as error:
            outcomes.append(("escaped", error))
        finally:
            sys.setrecursionlimit(previous)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert len(outcomes) == 3
    assert not any(isinstance(o, tuple) for o in outcomes), outcomes
    assert outcomes[0] == 70_000
