"""The exact diff: two answers of a query to change rows and back, for any pair of answers."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from horizon_broker.broker.subscribe.coalesce import parts
from horizon_broker.broker.subscribe.diff import (
    CHANGE_COLUMN,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    apply_delta,
    apply_rows,
    diff,
    diff_rows,
)

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])
values = st.tuples(
    st.integers(0, 6), st.sampled_from(["a", "b", None]), st.sampled_from([1.0, 2.5, None])
)


def as_table(rows: list[tuple]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in rows], SCHEMA)


def multiset(table: pa.Table) -> Counter:
    return Counter(tuple(r.values()) for r in table.to_pylist())


def keyed(rows: list[tuple]) -> list[tuple]:
    """One row per id (the last), as a query with the table's key answers."""
    return list({r[0]: r for r in rows}.values())


@settings(max_examples=300, deadline=None)
@given(st.lists(values, max_size=12), st.lists(values, max_size=12))
def test_first_result_plus_delta_is_the_answer_at_to_without_a_key(before, after) -> None:
    old, new = as_table(before), as_table(after)
    delta = diff(old, new)
    assert delta.key == ()
    assert multiset(apply_delta(old, delta.rows)) == multiset(new)


@settings(max_examples=300, deadline=None)
@given(st.lists(values, max_size=12), st.lists(values, max_size=12))
def test_first_result_plus_delta_is_the_answer_at_to_by_key(before, after) -> None:
    old, new = as_table(keyed(before)), as_table(keyed(after))
    delta = diff(old, new, ("id",))
    assert delta.key == ("id",)
    assert multiset(apply_delta(old, delta.rows, delta.key)) == multiset(new)
    kinds = delta.rows.column(CHANGE_COLUMN).to_pylist()
    ids = delta.rows.column("id").to_pylist()
    assert len(set(zip(ids, kinds, strict=True))) == len(ids), "one change of a kind per key"
    for at, kind in enumerate(kinds):
        if kind == UPDATE_BEFORE:
            assert kinds[at + 1] == UPDATE_AFTER and ids[at + 1] == ids[at]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(values, max_size=10), min_size=1, max_size=5))
def test_a_chain_of_deltas_applied_in_order_gives_each_answer(answers) -> None:
    held = as_table(answers[0])
    for before, after in itertools.pairwise(answers):
        delta = diff(as_table(before), as_table(after))
        held = apply_delta(held, delta.rows, delta.key)
        assert multiset(held) == multiset(as_table(after))


def test_a_key_that_is_not_unique_falls_back_to_the_multiset_diff() -> None:
    old = as_table([(1, "a", 1.0), (1, "b", 1.0)])
    new = as_table([(1, "a", 1.0)])
    delta = diff(old, new, ("id",))
    assert delta.key == ()
    assert multiset(apply_delta(old, delta.rows)) == multiset(new)


def test_the_same_rows_in_another_order_are_no_change() -> None:
    rows = [(1, "a", 1.0), (2, "b", None), (2, "b", None)]
    assert diff(as_table(rows), as_table(rows[::-1])).empty
    assert diff(as_table(rows[:2]), as_table(rows[1::-1]), ("id",)).empty


def test_an_updated_key_is_its_old_row_then_its_new_row() -> None:
    delta = diff(as_table([(1, "a", 1.0)]), as_table([(1, "a", 2.5)]), ("id",))
    assert delta.rows.to_pylist() == [
        {CHANGE_COLUMN: "update_before", "id": 1, "name": "a", "score": 1.0},
        {CHANGE_COLUMN: "update_after", "id": 1, "name": "a", "score": 2.5},
    ]


def test_messages_never_split_an_update_pair() -> None:
    old = as_table([(i, "a", 1.0) for i in range(5)])
    new = as_table([(i, "b", 1.0) for i in range(5)])
    delta = diff(old, new, ("id",))
    pieces = list(parts(delta.rows, 3))
    assert sum(p.num_rows for p in pieces) == 10
    for piece in pieces:
        kinds = piece.column(CHANGE_COLUMN).to_pylist()
        assert kinds.count(UPDATE_BEFORE) == kinds.count(UPDATE_AFTER)


PAIR = pa.schema([("a", pa.int64()), ("b", pa.string()), ("score", pa.float64())])
pair_rows = st.tuples(
    st.integers(0, 3),
    st.sampled_from(["x", "y"]),
    st.sampled_from([1.0, 2.5, None, float("nan")]),
)


def pair_table(rows: list[tuple]) -> pa.Table:
    """One row per (a, b): a two-column key."""
    unique = {(r[0], r[1]): r for r in rows}.values()
    return pa.Table.from_pylist([dict(zip(PAIR.names, r, strict=True)) for r in unique], PAIR)


def changes(delta: Any) -> Counter:
    return Counter(repr(tuple(r.values())) for r in delta.rows.to_pylist())


@settings(max_examples=300, deadline=None)
@given(st.lists(pair_rows, max_size=12), st.lists(pair_rows, max_size=12))
def test_arrow_keyed_diff_gives_the_row_diffs_changes_and_its_application(before, after) -> None:
    """The keyed diff and its application in Arrow kernels (large answers) give the same change
    rows and the same applied answer as comparing Python rows, a two-column key, nulls and NaN
    in a value column included (NaN only through Arrow: the rows' diff fails on it)."""
    old, new = pair_table(before), pair_table(after)
    fast = diff(old, new, ("a", "b"))
    assert fast.key == ("a", "b")
    kinds = fast.rows.column(CHANGE_COLUMN).to_pylist()
    keys = list(zip(*(fast.rows.column(k).to_pylist() for k in "ab"), strict=True))
    for at, kind in enumerate(kinds):
        if kind == UPDATE_BEFORE:
            assert kinds[at + 1] == UPDATE_AFTER and keys[at + 1] == keys[at]
    assert _multiset_nan(apply_delta(old, fast.rows, fast.key)) == _multiset_nan(new)
    if any(_nan(r[2]) for r in before + after):
        return  # the rows' diff fails on NaN (a NaN cell is not equal to itself)
    slow = diff_rows(old, new, ("a", "b"))
    assert slow.key == ("a", "b")
    assert changes(fast) == changes(slow)
    assert _multiset_nan(apply_rows(old, fast.rows, fast.key)) == _multiset_nan(new)


def _nan(value: Any) -> bool:
    return isinstance(value, float) and value != value


def _multiset_nan(table: pa.Table) -> Counter:
    """Rows as a multiset, NaN counted as equal to NaN."""
    return Counter(repr(tuple(r.values())) for r in table.to_pylist())
