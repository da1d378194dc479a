"""The chooser of a subscription's strategy (pure): the cheapest strategy that is exact for the
query, the reason in words, and a forced strategy refused with INVALID_ARGUMENT saying why; and
the SQL the incremental strategies run."""

from __future__ import annotations

import datetime
import decimal

import pytest
import sqlglot

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.broker.subscribe.choose import TableFacts, check_name, choose
from horizon_broker.broker.subscribe.group_totals import totals_of
from horizon_broker.broker.subscribe.incremental_sql import (
    feed_images_sql,
    groups_at_sql,
    sql_literal,
    touched_groups_sql,
)
from horizon_broker.broker.subscribe.strategy import explain_choice

TABLES = [TableFacts("accounts", ("id",)), TableFacts("ledger", ("k1", "k2"))]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id, balance FROM accounts",
        "SELECT a.id, a.balance * 2 AS doubled FROM accounts AS a WHERE a.owner LIKE 'o%'",
        "SELECT balance, id FROM accounts WHERE balance > 10 ORDER BY balance",
        "SELECT k2, k1, v FROM ledger",
        "SELECT ID, balance FROM ACCOUNTS",
    ],
)
def test_filters_and_projections_carrying_the_primary_key_use_the_change_feed(sql: str) -> None:
    assert choose(sql, TABLES).strategy == "change_feed"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT owner, count(*) AS n FROM accounts GROUP BY owner",
        "SELECT owner AS o, sum(balance), avg(balance), min(balance), max(balance) "
        "FROM accounts WHERE balance > 0 GROUP BY 1 HAVING count(*) > 1",
        "SELECT upper(owner) AS u, count(id) FROM accounts GROUP BY upper(owner)",
        "SELECT a.owner, round(avg(a.balance), 2) FROM accounts a GROUP BY owner ORDER BY 2",
        "SELECT id, max(balance) FROM accounts GROUP BY id",
    ],
)
def test_group_by_with_count_sum_avg_min_max_uses_changed_groups(sql: str) -> None:
    assert choose(sql, TABLES).strategy == "changed_groups"


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("SELECT * FROM accounts a JOIN ledger b ON a.id = b.k1", "the query joins tables"),
        ("SELECT id, row_number() OVER (ORDER BY balance) FROM accounts", "window function"),
        ("SELECT id, balance FROM accounts ORDER BY balance LIMIT 5", "LIMIT"),
        ("SELECT DISTINCT id, owner FROM accounts", "SELECT DISTINCT"),
        ("SELECT balance FROM accounts", "primary key column id"),
        ("SELECT id AS account FROM accounts", "primary key column id"),
        ("SELECT k1, v FROM ledger", "primary key column k2"),
        ("SELECT * FROM accounts", "validity columns"),
        ("SELECT id, validUntil FROM accounts", "validity columns"),
        ("SELECT id, rand() AS r FROM accounts", "changes without the data"),
        ("SELECT id FROM accounts WHERE owner IN (SELECT owner FROM accounts)", "subquery"),
        ("WITH c AS (SELECT id FROM accounts) SELECT id FROM c", "WITH clause"),
        ("SELECT id FROM accounts UNION ALL SELECT id FROM accounts", "not a single SELECT"),
        ("SELECT id FROM events", "not an upsert table"),
        ("SELECT owner, collect_list(id) FROM accounts GROUP BY owner", "COLLECT_LIST"),
        ("SELECT owner, count(*) FROM accounts GROUP BY owner, balance", "GROUP BY balance"),
        ("SELECT count(*) FROM accounts", "without GROUP BY"),
        ("SELECT owner, count(*) FROM accounts GROUP BY ROLLUP (owner)", "ROLLUP"),
    ],
)
def test_everything_else_uses_the_exact_diff_and_says_why(sql: str, why: str) -> None:
    choice = choose(sql, [*TABLES, TableFacts("events", (), upsert=False)])
    assert choice.strategy == "exact_diff"
    assert why in choice.reason
    assert choice.text.startswith("exact_diff: ")


def test_a_forced_strategy_that_cannot_serve_the_query_is_refused_naming_why() -> None:
    join = "SELECT * FROM accounts a JOIN ledger b ON a.id = b.k1"
    with pytest.raises(InvalidArgument, match=r"change_feed cannot serve .* joins tables"):
        choose(join, TABLES, "change_feed")
    with pytest.raises(InvalidArgument, match=r"changed_groups cannot serve .* has no GROUP BY"):
        choose("SELECT id, balance FROM accounts", TABLES, "changed_groups")
    assert choose(join, TABLES, "exact_diff").strategy == "exact_diff"
    grouped = "SELECT owner, count(*) FROM accounts GROUP BY owner"
    assert choose(grouped, TABLES, "exact_diff").strategy == "exact_diff"
    assert choose(grouped, TABLES, "changed_groups").strategy == "changed_groups"


def test_an_unknown_strategy_name_is_refused_listing_the_names() -> None:
    assert check_name("") == ""
    with pytest.raises(InvalidArgument, match="one of change_feed, changed_groups, exact_diff"):
        check_name("fastest")


def test_explain_names_no_strategy_for_a_query_without_upsert_tables() -> None:
    assert explain_choice("SELECT 1", []).strategy == ""
    assert "reads no upsert table" in explain_choice("SELECT 1", []).reason
    assert explain_choice("SELECT 1", []).text.startswith("Subscribe refuses this query")


def _parses(sql: str) -> str:
    sqlglot.parse_one(sql, read="spark")
    return sql


def test_the_change_feed_sql_projects_and_filters_each_changed_keys_first_and_last_row() -> None:
    sql = "SELECT a.id, a.balance AS b FROM accounts VERSION AS OF 7 AS a WHERE a.balance > 1 ORDER BY b"
    text = _parses(feed_images_sql(sql, choose(sql, TABLES), 10, 20))
    assert "TABLE_CHANGES('accounts', 10, 20)" in text
    assert "VERSION AS OF" not in text and "ORDER BY b" not in text
    assert text.endswith(") AS a WHERE a.balance > 1")
    assert "PARTITION BY `id` ORDER BY _commit_timestamp, CASE" in text


def test_the_changed_groups_sql_lists_the_touched_groups_and_reruns_only_them() -> None:
    sql = "SELECT owner AS o, count(*) AS n FROM accounts WHERE balance > 0 GROUP BY owner"
    choice = choose(sql, TABLES)
    touched = _parses(touched_groups_sql(sql, choice, 3, 9))
    assert touched == (
        "SELECT DISTINCT owner AS _subscribe_g0 FROM table_changes('accounts', 3, 9) AS "
        "`accounts` WHERE balance > 0"
    )
    rerun = _parses(groups_at_sql(sql, {"accounts"}, 9, choice, [("x",), (None,)]) or "")
    assert "accounts VERSION AS OF 9" in rerun
    assert (
        "balance > 0 AND (owner IS NOT DISTINCT FROM 'x' OR owner IS NOT DISTINCT FROM NULL)"
        in rerun
    )
    assert groups_at_sql(sql, {"accounts"}, 9, choice, [(datetime.datetime(2026, 1, 1),)]) is None


def _or_depth(node: sqlglot.exp.Expr) -> int:
    below = [_or_depth(child) for child in node.iter_expressions()]
    return int(isinstance(node, sqlglot.exp.Or)) + max(below, default=0)


def test_many_touched_groups_make_a_shallow_condition_the_depth_limit_allows() -> None:
    sql = "SELECT owner, count(*) FROM accounts GROUP BY owner"
    values = [(f"o{i}",) for i in range(512)]
    rerun = groups_at_sql(sql, {"accounts"}, 9, choose(sql, TABLES), values)
    assert rerun is not None
    assert _or_depth(sqlglot.parse_one(rerun, read="spark")) <= 10


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        (None, "NULL"),
        (True, "TRUE"),
        (42, "42"),
        ("it's", "'it\\'s'"),
        (1.5, "CAST('1.5' AS DOUBLE)"),
        (decimal.Decimal("1E+2"), "100"),
        (datetime.date(2026, 11, 29), "CAST('2026-11-29' AS DATE)"),
        (float("nan"), None),
        (b"\x00", None),
    ],
)
def test_group_values_become_exact_literals_or_none(value: object, literal: str | None) -> None:
    found = sql_literal(value)
    assert (found.sql(dialect="spark") if found is not None else None) == literal


@pytest.mark.parametrize(
    ("sql", "totals"),
    [
        ("SELECT owner, count(*) AS n, sum(balance) AS s FROM accounts GROUP BY owner", 2),
        ("SELECT upper(owner) AS u, count(id) FROM accounts WHERE balance > 0 GROUP BY 1", 1),
        ("SELECT owner FROM accounts GROUP BY owner", 0),
        ("SELECT owner, min(balance) FROM accounts GROUP BY owner", None),
        ("SELECT owner, avg(balance) FROM accounts GROUP BY owner", None),
        ("SELECT owner, count(DISTINCT id) FROM accounts GROUP BY owner", None),
        ("SELECT owner, sum(balance) + 1 AS s FROM accounts GROUP BY owner", None),
        ("SELECT owner, count(*) AS n FROM accounts GROUP BY owner HAVING count(*) > 1", None),
    ],
)
def test_only_counts_and_sums_without_having_are_kept_as_totals(
    sql: str, totals: int | None
) -> None:
    """Adding the feed's contributions to held totals is exact for count and sum only (min and
    max need the rows, HAVING hides groups whose totals must still be kept)."""
    found = totals_of(sql, choose(sql, TABLES))
    assert (None if found is None else len(found)) == totals
