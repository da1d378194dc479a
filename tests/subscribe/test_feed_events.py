"""The incremental strategies run the change feed alone and finish in Arrow (no second shuffle in
Spark): change_feed picks each changed key's rows at both snapshots, the count-and-sum totals sum
each change's contributions by group. The SQL (pure), and the picking and the sums against the
rules the Spark SQL stated, over random event histories (pure)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import sqlglot
from hypothesis import given
from hypothesis import strategies as st

from horizon_broker.broker.subscribe.change_feed import pick_images
from horizon_broker.broker.subscribe.choose import TableFacts, choose
from horizon_broker.broker.subscribe.group_totals import (
    ROWS,
    contribution_events_sql,
    summed,
    totals_of,
)
from horizon_broker.broker.subscribe.incremental_sql import AT, ENDS, PASSES, feed_events_sql

TABLES = [TableFacts("accounts", ("id",))]


def test_the_events_sql_computes_the_columns_only_where_the_filter_holds() -> None:
    sql = "SELECT a.id, a.balance * 2 AS doubled FROM accounts AS a WHERE a.balance > 1 ORDER BY 2"
    text = feed_events_sql(sql, choose(sql, TABLES), 10, 20)
    assert text is not None
    sqlglot.parse_one(text, read="spark")
    assert text.startswith(
        "SELECT CASE WHEN a.balance > 1 THEN a.id END AS `id`, "
        "CASE WHEN a.balance > 1 THEN a.balance * 2 END AS `doubled`, `a`.`id` AS _subscribe_k0"
    )
    assert f"COALESCE(a.balance > 1, FALSE) AS {PASSES}" in text
    assert text.endswith("FROM table_changes('accounts', 10, 20) AS `a`")
    assert "ORDER BY" not in text and "PARTITION BY" not in text


def test_a_column_whose_name_sqlglot_cannot_tell_falls_back_to_the_images_sql() -> None:
    sql = "SELECT id, balance + 1 FROM accounts WHERE balance > 1"
    assert feed_events_sql(sql, choose(sql, TABLES), 10, 20) is None
    plain = "SELECT id, balance + 1 FROM accounts"  # no filter: the column is kept as written
    assert "balance + 1, `accounts`.`id`" in (
        feed_events_sql(plain, choose(plain, TABLES), 1, 2) or ""
    )


END_KINDS = ("delete", "update_preimage")
event = st.tuples(
    st.sampled_from([1, 2, 3]),  # key
    st.integers(1, 4),  # instant
    st.sampled_from(["insert", "update_postimage", *END_KINDS]),
    st.booleans(),  # the filter holds
)


def _reference(events: list[tuple[int, int, str, bool]]) -> tuple[set, set]:
    """The images SQL's rule: a key's first change (earliest, an ending one first at one
    instant) when it ends a version, its last (latest, a beginning one last) when it begins one."""
    before, after = set(), set()
    for key in {e[0] for e in events}:
        mine = [e for e in events if e[0] == key]
        order = sorted(mine, key=lambda e: (e[1], 0 if e[2] in END_KINDS else 1))
        first, last = order[0], order[-1]
        if first[2] in END_KINDS and first[3]:
            before.add((key, first[1], first[2]))
        if last[2] not in END_KINDS and last[3]:
            after.add((key, last[1], last[2]))
    return before, after


@given(st.lists(event, max_size=12, unique_by=lambda e: (e[0], e[1], e[2] in END_KINDS)))
def test_each_changed_keys_rows_at_both_snapshots_are_its_first_ending_and_last_beginning_change(
    events: list[tuple[int, int, str, bool]],
) -> None:
    table = pa.table(
        {
            "id": [e[0] for e in events],
            "at": [e[1] for e in events],
            "kind": [e[2] for e in events],
            "_subscribe_k0": [e[0] for e in events],
            AT: [e[1] for e in events],
            ENDS: [e[2] in END_KINDS for e in events],
            PASSES: [e[3] for e in events],
        },
        schema=pa.schema(
            [("id", pa.int64()), ("at", pa.int64()), ("kind", pa.string()),
             ("_subscribe_k0", pa.int64()), (AT, pa.int64()), (ENDS, pa.bool_()),
             (PASSES, pa.bool_())]
        ),
    )  # fmt: skip
    before, after = pick_images(table, 1)
    assert before.column_names == after.column_names == ["id", "at", "kind"]

    def rows(t: pa.Table) -> set[Any]:
        return {tuple(r.values()) for r in t.to_pylist()}

    assert (rows(before), rows(after)) == _reference(events)


def test_the_totals_sql_gives_each_changes_contributions_unsummed() -> None:
    sql = "SELECT owner, count(*) AS n, sum(balance) AS b FROM accounts WHERE balance > 0 GROUP BY owner"
    choice = choose(sql, TABLES)
    totals = totals_of(sql, choice)
    assert totals is not None
    text = contribution_events_sql(sql, choice, totals, 3, 9)
    sqlglot.parse_one(text, read="spark")
    assert text.startswith("SELECT owner AS _subscribe_g0, CASE WHEN _change_type IN")
    assert "* (balance) AS _subscribe_t1" in text and "sum(" not in text.lower()
    assert text.endswith("FROM table_changes('accounts', 3, 9) AS `accounts` WHERE balance > 0")


contribution = st.tuples(
    st.sampled_from(["a", "b", None]), st.sampled_from([1, -1]), st.none() | st.integers(-5, 5)
)


@given(st.lists(contribution, max_size=10))
def test_each_groups_contributions_are_summed_null_where_every_value_was(
    events: list[tuple[str | None, int, int | None]],
) -> None:
    table = pa.table(
        {
            "_subscribe_g0": pa.array([e[0] for e in events], pa.string()),
            ROWS: pa.array([e[1] for e in events], pa.int32()),
            "_subscribe_t0": pa.array([e[2] for e in events], pa.int32()),
        }
    )
    expected: dict[str | None, tuple[int, int | None]] = {}
    for group, sign, value in events:
        rows, total = expected.get(group, (0, None))
        expected[group] = (rows + sign, total if value is None else (total or 0) + value)
    got = {r["_subscribe_g0"]: (r[ROWS], r["_subscribe_t0"]) for r in summed(table, 1).to_pylist()}
    assert got == expected
