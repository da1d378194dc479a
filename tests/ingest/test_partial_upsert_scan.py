"""Partial upserts folded as columns (a batch without late events, in Arrow and numpy) give the
rows the Python fold gives, event by event, and step aside whenever an event is late: random
batches over a few keys with every scannable strategy, absent columns, nulls, deletes,
transactions and a logged history of earlier batches, against the Python fold (the reference the
roads' property test checks against the model)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import example, given, settings
from hypothesis import strategies as st

from horizon_broker.ingest.partial_upsert import ABSENT, comparison_rank
from horizon_broker.ingest.partial_upsert_batch import commit_order, folded_columns
from horizon_broker.ingest.partial_upsert_scan import commit_order_arrow, scanned_columns
from horizon_broker.ingest.resolve import SOURCE_FILE
from horizon_broker.ingest.table import TableDefinition

COLUMNS = {
    "id": ("int", pa.int32()),
    "seq": ("bigint", pa.int64()),
    "deleted": ("boolean", pa.bool_()),
    "note": ("string", pa.string()),  # overwrite, the default
    "status": ("string", pa.string()),
    "views": ("bigint", pa.int64()),
    "high": ("bigint", pa.int64()),
    "low": ("string", pa.string()),
    "first": ("string", pa.string()),
    "txn": ("string", pa.string()),
}
STRATEGIES = {
    "status": "overwrite_if_not_null",
    "views": "increment",
    "high": "max",
    "low": "min",
    "first": "ignore",
}
MERGED = ["seq", "deleted", "note", *STRATEGIES]


def table() -> TableDefinition:
    return TableDefinition.from_dict(
        {
            "name": "t",
            "columns": {name: kind for name, (kind, _) in COLUMNS.items()},
            "primary_key": ["id"],
            "comparison": ["seq"],
            "delete_column": "deleted",
            "transaction_column": "txn",
            "storage_root": "/tmp/unused",
            "partial_upsert": STRATEGIES,
        }
    )


_event = st.fixed_dictionaries(
    {
        "id": st.integers(0, 2),
        "seq": st.none() | st.integers(0, 5),
        "deleted": st.sampled_from([False, False, False, True]),
        "note": st.none() | st.sampled_from("ab"),
        "status": st.none() | st.sampled_from("xy"),
        "views": st.none() | st.integers(-3, 3),
        "high": st.none() | st.integers(0, 4),
        "low": st.none() | st.sampled_from("pqr"),
        "first": st.none() | st.sampled_from("fg"),
        "txn": st.none() | st.sampled_from("uv"),
        ABSENT: st.lists(st.sampled_from(MERGED), max_size=3, unique=True),
        "_pid": st.integers(0, 1),
    }
)


def _schema(extra: dict[str, pa.DataType]) -> pa.Schema:
    return pa.schema([*((n, t) for n, (_, t) in COLUMNS.items()), *extra.items()])


def collected_batch(events: list[dict[str, Any]]) -> pa.Table:
    """The events as an enriched batch collected on the driver (source position, key
    partition, absent columns)."""
    rows = [
        {**event, SOURCE_FILE: "stream:s:1-0..9-0", "_row": row, "_kp": event["id"] % 2}
        for row, event in enumerate(events)
    ]
    extra = {
        SOURCE_FILE: pa.string(),
        "_pid": pa.int32(),
        "_row": pa.int64(),
        "_kp": pa.int32(),
        ABSENT: pa.list_(pa.string()),
    }
    return pa.Table.from_pylist(rows, schema=_schema(extra))


def logged_history(events: list[dict[str, Any]]) -> pa.Table:
    """The events as an earlier batch's log (two commits: ``_base`` 10 and 20)."""
    rows = [
        {**event, "_kp": event["id"] % 2, "_base": 10 if i % 2 else 20, "_order": i}
        for i, event in enumerate(events)
    ]
    extra = {
        "_kp": pa.int32(),
        "_order": pa.int64(),
        ABSENT: pa.list_(pa.string()),
        "_base": pa.int64(),
    }
    return pa.Table.from_pylist(rows, schema=_schema(extra))


def has_late_event(defined: TableDefinition, batch: pa.Table, history: pa.Table) -> bool:
    """Whether some batch event ranks below an event of its key committed before it."""
    newest: dict[Any, Any] = {}
    for record in history.to_pylist():
        values = {k: v for k, v in record.items() if k not in record[ABSENT]}
        rank = (comparison_rank(values, ["seq"]), (0, record["_base"], record["_order"]))
        newest[record["id"]] = max(newest.get(record["id"], rank), rank)
    records = batch.to_pylist()
    for place, index in enumerate(commit_order(records, defined.transaction_column)):
        record = records[index]
        values = {k: v for k, v in record.items() if k not in record[ABSENT]}
        rank = (comparison_rank(values, ["seq"]), (1, 0, place))
        if record["id"] in newest and rank < newest[record["id"]]:
            return True
        newest[record["id"]] = rank
    return False


@settings(max_examples=300, deadline=None)
@given(st.lists(_event, max_size=10), st.lists(_event, min_size=1, max_size=12))
@example(  # an increment, a delete, and the increment again: the delete restarts the sum
    [],
    [
        {**dict.fromkeys(COLUMNS), "id": 1, "seq": seq, "deleted": deleted, "views": 2}
        | {ABSENT: [], "_pid": 0}
        for seq, deleted in [(1, False), (2, True), (3, False)]
    ],
)
def test_the_columnar_fold_gives_the_python_folds_rows_and_steps_aside_for_late_events(
    logged: list[dict[str, Any]], events: list[dict[str, Any]]
) -> None:
    defined = table()
    batch, history = collected_batch(events), logged_history(logged)
    order = commit_order_arrow(batch, SOURCE_FILE, defined.transaction_column)
    assert order.tolist() == commit_order(batch.to_pylist(), defined.transaction_column)
    scanned = scanned_columns(defined, batch, order, history)
    assert (scanned is None) == has_late_event(defined, batch, history)
    if scanned is not None:
        folded = folded_columns(defined, batch, history)
        assert {n: c.to_pylist() for n, c in scanned.items()} == {
            n: c.to_pylist() for n, c in folded.items()
        }
