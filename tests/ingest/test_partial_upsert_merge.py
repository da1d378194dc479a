"""Partial upserts' pure core: each strategy's merge, the fold in comparison order (a late event
lands in its place, a delete resets the key, an absent column is kept), the merged rows a batch
hands its road (commit order, transactions), and the table file's rules for strategies."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.ingest.debezium import EnvelopeSpec, Place, flatten
from horizon_broker.ingest.partial_upsert import Event, Strategy, fold, merged_value
from horizon_broker.ingest.partial_upsert_batch import commit_order, merged_rows
from horizon_broker.ingest.table import TableDefinition

S = Strategy


@pytest.mark.parametrize(
    ("strategy", "current", "value", "merged"),
    [
        (S.OVERWRITE, 1, 2, 2),
        (S.OVERWRITE, 1, None, None),
        (S.OVERWRITE_IF_NOT_NULL, 1, None, 1),
        (S.OVERWRITE_IF_NOT_NULL, 1, 2, 2),
        (S.INCREMENT, 1, 2, 3),
        (S.INCREMENT, None, 2, 2),
        (S.INCREMENT, 1, None, 1),
        (S.INCREMENT, Decimal("1.5"), Decimal("2.25"), Decimal("3.75")),
        (S.APPEND, ["a"], ["a", "b"], ["a", "a", "b"]),
        (S.APPEND, None, ["a"], ["a"]),
        (S.UNION, ["a", "b"], ["b", "c", "c"], ["a", "b", "c"]),
        (S.UNION, None, ["b", "b"], ["b"]),
        (S.MAX, 3, 2, 3),
        (S.MAX, None, 2, 2),
        (S.MIN, 3, 2, 2),
        (S.MIN, 3, None, 3),
        (S.IGNORE, "first", "second", "first"),
        (S.IGNORE, None, "second", "second"),
    ],
)
def test_each_strategy_merges_a_value_into_the_row_as_documented(
    strategy: Strategy, current: Any, value: Any, merged: Any
) -> None:
    assert merged_value(strategy, current, value) == merged


def event(seq: int, commit: int, deleted: bool = False, **values: Any) -> Event:
    return Event({"id": 1, "seq": seq, **values}, deleted, (((True, seq),), commit), commit)


COLUMNS = ("id", "seq", "views", "note", "tags")
STRATEGIES = {"views": S.INCREMENT, "tags": S.APPEND}


def test_a_late_event_is_folded_in_its_comparison_place_not_its_arrival() -> None:
    events = [event(5, 0, note="n5", tags=["b"]), event(3, 1, note="n3", tags=["a"])]
    row = fold(events, STRATEGIES, COLUMNS)
    assert row == {"id": 1, "seq": 5, "views": None, "note": "n5", "tags": ["a", "b"]}


def test_an_absent_column_keeps_the_rows_value_where_a_null_overwrites_it() -> None:
    present = fold([event(1, 0, note="x"), event(2, 1, note=None)], STRATEGIES, COLUMNS)
    absent = fold([event(1, 0, note="x"), event(2, 1)], STRATEGIES, COLUMNS)
    assert (present["note"], absent["note"]) == (None, "x")  # type: ignore[index]


def test_a_delete_resets_the_key_so_only_the_events_after_it_count() -> None:
    events = [event(1, 0, views=5), event(2, 1, deleted=True), event(3, 2, views=1)]
    assert fold(events, STRATEGIES, COLUMNS)["views"] == 1  # type: ignore[index]
    assert fold(events[:2], STRATEGIES, COLUMNS) is None
    late_before_the_delete = [*events[:2], event(0, 3, views=7)]
    assert fold(late_before_the_delete, STRATEGIES, COLUMNS) is None


def table(**overrides: Any) -> TableDefinition:
    data: dict[str, Any] = {
        "name": "t",
        "columns": {"id": "int", "seq": "bigint", "deleted": "boolean", "views": "bigint",
                    "note": "string", "tags": "array<string>", "txn": "string"},
        "primary_key": ["id"],
        "comparison": ["seq"],
        "delete_column": "deleted",
        "storage_root": "/tmp/unused",
        "partial_upsert": {"views": "increment", "tags": "append"},
    }  # fmt: skip
    return TableDefinition.from_dict({**data, **overrides})


def test_each_merged_row_carries_the_folds_comparison_value_so_every_road_accepts_it() -> None:
    defined = table()
    history = [event(5, 0, views=2, note="old")]
    batch = [
        Event({"id": 1, "seq": 3, "views": 1, "note": "late"}, False, (((True, 3),), 1), 0),
        Event({"id": 1, "seq": 4, "deleted": True}, True, (((True, 4),), 2), 1),
        Event({"id": 1, "seq": 9, "views": 4}, False, (((True, 9),), 3), 2),
    ]
    rows = merged_rows(batch, history, defined)
    # The late event adds its view below the newest one; the late delete (seq 4) then wipes
    # what came before it by seq (the late event's view); seq 9 adds to seq 5's, note absent.
    assert [(row["seq"], row["views"], row["note"]) for row in rows] == [
        (5, 3, "old"), (5, 2, "old"), (9, 6, "old")
    ]  # fmt: skip
    assert [row["deleted"] for row in rows] == [None, None, None]


def test_a_merged_delete_is_the_newest_delete_again_with_its_comparison_value() -> None:
    defined = table()
    history = [event(5, 0, deleted=True)]
    batch = [Event({"id": 1, "seq": 2, "views": 1}, False, (((True, 2),), 1), 0)]
    [row] = merged_rows(batch, history, defined)
    assert (row["seq"], row["deleted"]) == (5, True)


def test_the_transaction_column_keeps_each_events_own_value() -> None:
    defined = table(transaction_column="txn")
    history = [Event({"id": 1, "seq": 5, "txn": "a"}, False, (((True, 5),), 0), 0)]
    batch = [Event({"id": 1, "seq": 1, "txn": "b"}, False, (((True, 1),), 1), 0)]
    [row] = merged_rows(batch, history, defined)
    assert (row["seq"], row["txn"]) == (5, "b")


def test_commit_order_puts_a_transactions_changes_at_its_first_changes_place() -> None:
    records = [
        {"_sourceFile": "f", "_pid": 0, "_row": row, "txn": txn}
        for row, txn in enumerate(["t", None, "t", "u"])
    ]
    assert commit_order(records, "txn") == [0, 2, 1, 3]
    assert commit_order(records, None) == [0, 1, 2, 3]


def test_a_debezium_after_image_without_a_column_leaves_it_absent(tmp_path: Path) -> None:
    defined = TableDefinition.from_dict(
        {
            "name": "c",
            "columns": {"id": "bigint", "status": "string", "lsn": "bigint", "deleted": "boolean"},
            "primary_key": ["id"],
            "comparison": ["lsn"],
            "delete_column": "deleted",
            "debezium_order": "lsn",
            "storage_root": str(tmp_path),
            "partial_upsert": {},
        }
    )
    text = '{"op": "u", "after": {"id": 1}, "source": {"lsn": 7}}'
    flat = flatten([(Place("f", 1), text)], EnvelopeSpec.of(defined))
    assert flat.absent == [frozenset({"status"})]


@pytest.mark.parametrize(
    ("strategies", "refusal"),
    [
        ({"id": "max"}, "'id' is the table's primary key"),
        ({"seq": "overwrite"}, "'seq' is the table's comparison column"),
        ({"deleted": "ignore"}, "'deleted' is the table's delete column"),
        ({"note": "increment"}, "increment adds numbers: the column must be a number type"),
        ({"views": "append"}, "append joins lists: the column must be an array type"),
        ({"note": "union"}, "union joins lists"),
        ({"tags": "max"}, "max compares values"),
        ({"missing": "max"}, "'missing' is not a column"),
        ({"views": "sum"}, "must be 'overwrite', 'overwrite_if_not_null', 'increment'"),
    ],
)
def test_a_strategy_the_table_cannot_apply_is_refused_at_registration_naming_the_rule(
    strategies: dict[str, str], refusal: str
) -> None:
    with pytest.raises(InvalidArgument, match="partial_upsert") as raised:
        table(partial_upsert=strategies)
    assert refusal in str(raised.value)


def test_an_append_only_table_cannot_have_partial_upserts() -> None:
    with pytest.raises(InvalidArgument, match='needs mode = "upsert"'):
        table(mode="append", delete_column=None, primary_key=[], comparison=[])
    with pytest.raises(InvalidArgument, match="transaction column"):
        table(transaction_column="txn", partial_upsert={"txn": "overwrite"})


def test_an_increment_past_the_columns_range_fails_the_batch_naming_the_column() -> None:
    import pyarrow as pa

    from horizon_broker._core.errors import FailedPrecondition
    from horizon_broker.ingest.partial_upsert_batch import merged_column

    schema = pa.schema([("views", pa.int32())])
    with pytest.raises(FailedPrecondition, match="column 'views' merged to a value its type"):
        merged_column(table(), "views", [2**31], schema)


def test_the_ingestion_guides_partial_upsert_example_folds_as_it_says() -> None:
    import json
    import re

    guide = (Path(__file__).parents[2] / "docs" / "guides" / "ingestion.md").read_text()
    section = guide.split("## Partial upserts", 1)[1].split("\n## ", 1)[0]
    toml_block = section.split("```toml\n", 1)[1].split("```", 1)[0]
    defined = TableDefinition.from_toml(toml_block, storage_root="/tmp/unused")
    said = re.search(r"With the table above, (.*?) give the row", section, re.S)
    assert said is not None
    texts = re.findall(r"`(\{.*?\})`", said.group(1).replace("\n", " "))
    events = [
        Event(values, False, (((True, values["lsn"]),), commit), commit)
        for commit, values in enumerate(json.loads(text) for text in texts)
    ]
    row = fold(events, dict(defined.partial_upsert or ()), defined.column_names)
    assert row is not None
    assert (row["status"], row["visits"], row["tags"], row["lsn"]) == ("paid", 7, ["a", "b"], 30)
    assert 'status = "paid", visits = 7, tags = ["a", "b"], lsn = 30' in section


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(1, 2),
            st.integers(0, 4),
            st.sampled_from([False, False, False, True]),
            st.none() | st.integers(-2, 2),
            st.none() | st.lists(st.sampled_from("ab"), max_size=2),
        ),
        max_size=8,
    ),
    st.integers(0, 8),
)
def test_each_merged_row_is_the_fold_of_its_keys_events_up_to_it(
    drawn: list[tuple[int, int, bool, int | None, list[str] | None]], cut: int
) -> None:
    """Applying in-order events one by one and folding again for late ones (the batch's way)
    gives what folding everything from scratch gives, across the history/batch cut too."""
    defined = table()
    strategies = dict(defined.partial_upsert or ())
    events = [
        Event(
            {"id": key, "seq": seq, "deleted": deleted, "views": views, "tags": tags},
            deleted,
            (((True, seq),), commit),
            commit,
        )
        for commit, (key, seq, deleted, views, tags) in enumerate(drawn)
    ]
    history, batch = events[:cut], events[cut:]
    batch = [dataclasses.replace(event, position=place) for place, event in enumerate(batch)]
    rows = merged_rows(batch, history, defined)
    for place, event in enumerate(batch):
        same_key = [
            e for e in [*history, *batch[: place + 1]] if e.values["id"] == event.values["id"]
        ]
        expected = fold(same_key, strategies, defined.column_names)
        if expected is None:
            assert rows[place]["deleted"] is True
        else:
            assert rows[place] == expected


def test_a_batch_reads_only_its_own_keys_events_from_the_log(tmp_path: Path) -> None:
    """The log of a batch's partitions holds the whole table's history: only the batch's keys'
    events are taken (and turned into Python objects and folded), from every server's log."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from horizon_broker.ingest.partial_upsert_batch import read_local_log

    for server, ids in (("s1", [1, 2, 3, 4]), ("s2", [2, 5])):
        (tmp_path / server / "b0000000001").mkdir(parents=True)
        logged = pa.table({"id": pa.array(ids, pa.int64()), "_kp": pa.array([0] * len(ids))})
        pq.write_table(logged, tmp_path / server / "b0000000001" / "events.parquet")
    taken = read_local_log(str(tmp_path), [0], {"id": [2, 4, 9]})
    assert sorted(taken["id"].to_pylist()) == [2, 2, 4]
    assert read_local_log(str(tmp_path), [1], {"id": [2]}).num_rows == 0
