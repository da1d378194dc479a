"""Partial upserts through the real pipeline, on every road (driver rows, driver columns, Spark):
every snapshot answers a reference model that folds each key's events committed by then in
comparison order (ties: commit order) with the columns' strategies, late events (a lower
comparison value, in a later batch too) included. A deleted key is absent; the events before a
delete (in comparison order) no longer count. A transaction's events commit at its first
event's timestamp, so an event from outside it that sits between them in the file commits after
all of them. A Debezium ``after`` image without a column leaves it as it was. The merged rows,
held on the driver, are collected once.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from horizon_broker.ingest.driver_batches import COLLECT_ACTION
from horizon_broker.ingest.job import STEPS, IngestJob, SimulatedCrash
from horizon_broker.ingest.partial_upsert_batch import MERGE_ACTION
from horizon_broker.ingest.table import TableDefinition
from tests.ingest.conftest import Change as ConfChange
from tests.ingest.conftest import accounts_table, broker_view, visible_rows, write_changelog
from tests.ingest.debezium_events import lines, postgres_event

ROADS = {
    "driver rows": {},
    "driver columns": {"driver_batch_rows": 1},
    "spark": {"driver_batch_rows": 0},
}
STRATEGIES = {
    "status": "overwrite_if_not_null",
    "views": "increment",
    "tags": "append",
    "labels": "union",
    "high": "max",
    "low": "min",
    "first": "ignore",
}
COLUMNS = {
    "id": "int",
    "seq": "bigint",
    "deleted": "boolean",
    "note": "string",  # overwrite, the default
    "status": "string",
    "views": "bigint",
    "tags": "array<string>",
    "labels": "array<string>",
    "high": "bigint",
    "low": "bigint",
    "first": "string",
    "txn": "string",
}
MERGED = [name for name in COLUMNS if name not in ("id", "seq", "deleted", "txn")]
_example = itertools.count()


@dataclass(frozen=True)
class Change:
    """One drawn event: its key, comparison value, delete flag, values (None: null) and
    transaction (None: alone)."""

    id: int
    seq: int
    deleted: bool
    values: tuple[tuple[str, Any], ...]
    txn: str | None = None

    def as_row(self) -> dict[str, Any]:
        row = {"id": self.id, "seq": self.seq, "deleted": self.deleted, "txn": self.txn}
        return {**row, **dict(self.values)}


def _value(name: str) -> Any:
    small = st.integers(-3, 3)
    words = st.sampled_from(["a", "b", "c"])
    kinds = {"views": small, "high": small, "low": small}
    if name in ("tags", "labels"):
        return st.none() | st.lists(words, max_size=2)
    return st.none() | kinds.get(name, words)


@st.composite
def histories(draw: Any) -> list[list[Change]]:
    """Batches of events of two keys, comparison values drawn with repeats (ties) and in any
    order (late events), some deletes."""
    count = draw(st.integers(1, 8))
    changes = [
        Change(
            draw(st.sampled_from([1, 2])),
            draw(st.integers(1, 6)),
            draw(st.integers(0, 5)) == 0,
            tuple((name, draw(_value(name))) for name in MERGED),
            draw(st.sampled_from([None, None, "t0", "t1"])),
        )
        for _ in range(count)
    ]
    cuts = draw(st.lists(st.integers(1, count - 1), max_size=2)) if count > 1 else []
    bounds = sorted({0, *cuts, count})
    return [changes[start:end] for start, end in itertools.pairwise(bounds)]


def _full(key: int, seq: int, **values: Any) -> Change:
    return Change(key, seq, False, tuple((name, values.get(name)) for name in MERGED))


LATE_IN_A_LATER_BATCH = [
    [_full(1, 5, note="n5", status="s5", views=2, tags=["x"], labels=["x"], high=1, low=1)],
    [
        _full(
            1, 3, note="n3", status="s3", views=3, tags=["y"], labels=["x", "y"], high=3, first="f"
        )
    ],
]
"""A late event in a later batch: it re-derives the key's row from its commit on (views 5, tags
y then x, note and status stay those of the newer event, first is its value)."""

A_TRANSACTION_AROUND_AN_OUTSIDE_CHANGE = [
    [
        Change(1, 2, False, _full(1, 2, views=1, note="t0 first").values, "t0"),
        Change(1, 3, False, _full(1, 3, views=10, note="outside").values, None),
        Change(1, 1, False, _full(1, 1, views=100, note="t0 second").values, "t0"),
    ]
]
"""The outside change commits after both of the transaction's (which share its first's
timestamp): its row is the fold of all three, the transaction's the fold of its two."""


def commit_times(batch: list[Change], base: int) -> list[tuple[int, Change]]:
    """Each event's commit timestamp in a one-file batch: base + its place, or that of its
    transaction's first event."""
    first: dict[str, int] = {}
    stamped = []
    for place, change in enumerate(batch):
        if change.txn is not None:
            place = first.setdefault(change.txn, place)
        stamped.append((base + place, change))
    return stamped


def reference(log: list[tuple[int, Change]], snapshot: int) -> dict[int, dict[str, Any]]:
    """Per key, the fold of its events committed by ``snapshot``, by (seq, commit order)."""
    rows: dict[int, dict[str, Any] | None] = {}
    ordered = sorted((c.seq, ts, place) for place, (ts, c) in enumerate(log) if ts <= snapshot)
    for _, _, place in ordered:
        change = log[place][1]
        if change.deleted:
            rows[change.id] = None
            continue
        row = rows.get(change.id) or dict.fromkeys(MERGED)
        rows[change.id] = {name: _merge(name, row[name], value) for name, value in change.values}
    return {key: row for key, row in rows.items() if row is not None}


def _merge(name: str, old: Any, new: Any) -> Any:
    strategy = STRATEGIES.get(name, "overwrite")
    if strategy == "overwrite":
        return new
    if new is None:
        return old
    if old is None:
        return list(dict.fromkeys(new)) if strategy == "union" else new
    merged = {
        "overwrite_if_not_null": lambda: new,
        "increment": lambda: old + new,
        "append": lambda: old + new,
        "union": lambda: list(dict.fromkeys(old + new)),
        "max": lambda: max(old, new),
        "min": lambda: min(old, new),
        "ignore": lambda: old,
    }
    return merged[strategy]()


def stored_rows(view: Any) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    columns = [*COLUMNS, "validFrom", "validUntil"]
    return [
        row
        for segment in view.visible_segments
        for location in segment.location
        for row in pq.read_table(location.removeprefix("file:"), columns=columns).to_pylist()
    ]


def table_at(rows: list[dict[str, Any]], snapshot: int) -> dict[int, dict[str, Any]]:
    visible = [
        row
        for row in rows
        if row["validFrom"] <= snapshot
        and (row["validUntil"] is None or row["validUntil"] > snapshot)
    ]
    keys = [row["id"] for row in visible]
    assert len(keys) == len(set(keys)), f"a key is visible twice at {snapshot}: {keys}"
    return {row["id"]: {name: row[name] for name in MERGED} for row in visible}


def partial_table(root: Path, name: str, **overrides: Any) -> TableDefinition:
    return TableDefinition.from_dict(
        {
            "name": name,
            "columns": COLUMNS,
            "primary_key": ["id"],
            "comparison": ["seq"],
            "delete_column": "deleted",
            "key_partitions": 2,
            "storage_root": str(root),
            "partial_upsert": STRATEGIES,
            "transaction_column": "txn",
            **overrides,
        }
    )


@settings(
    max_examples=4,  # drawn histories on top of the six examples below (each road's two cases)
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=histories(), road=st.sampled_from(sorted(ROADS)))
@example(history=LATE_IN_A_LATER_BATCH, road="driver rows")
@example(history=LATE_IN_A_LATER_BATCH, road="driver columns")
@example(history=LATE_IN_A_LATER_BATCH, road="spark")
@example(history=A_TRANSACTION_AROUND_AN_OUTSIDE_CHANGE, road="driver rows")
@example(history=A_TRANSACTION_AROUND_AN_OUTSIDE_CHANGE, road="driver columns")
@example(history=A_TRANSACTION_AROUND_AN_OUTSIDE_CHANGE, road="spark")
def test_every_snapshot_of_a_partial_table_is_the_fold_of_the_events_committed_by_then(
    spark: Any, server: Any, follower: Any, tmp_path: Path, history: Any, road: str
) -> None:
    n = next(_example)
    name = f"partial{n}"
    table = partial_table(tmp_path / name, name, **ROADS[road])
    client = server(f"p{n}")
    job = IngestJob(spark, table, client).start()
    changes = tmp_path / f"{name}-changes"
    changes.mkdir()
    log: list[tuple[int, Change]] = []
    for number, batch in enumerate(history):
        text = "".join(json.dumps(change.as_row()) + "\n" for change in batch)
        (changes / f"{number:04d}.json").write_text(text)
        result = job.run_directory(str(changes), "json")
        log += commit_times(batch, result.base)
        view = broker_view(follower, client, name)
        rows = stored_rows(view)
        for snapshot in sorted({ts for ts, _ in log if ts <= view.lwm} | {view.lwm}):
            assert table_at(rows, snapshot) == reference(log, snapshot), (road, snapshot)


@pytest.mark.parametrize("road", sorted(ROADS))
def test_a_debezium_status_event_without_the_other_columns_keeps_their_values(
    spark: Any, server: Any, follower: Any, tmp_path: Path, road: str
) -> None:
    name = "orders_" + road.replace(" ", "_")
    table = TableDefinition.from_dict(
        {
            "name": name,
            "columns": {"id": "bigint", "status": "string", "visits": "bigint",
                        "lsn": "bigint", "deleted": "boolean"},
            "primary_key": ["id"],
            "comparison": ["lsn"],
            "delete_column": "deleted",
            "debezium_order": "lsn",
            "storage_root": str(tmp_path / "store"),
            "partial_upsert": {"visits": "increment"},
            **ROADS[road],
        }
    )  # fmt: skip
    client = server(name)
    job = IngestJob(spark, table, client).start()
    changes = tmp_path / "changes"
    changes.mkdir()
    batches = [
        [
            postgres_event("c", lsn=10, after={"id": 1, "status": "new", "visits": 1}),
            postgres_event("u", lsn=30, after={"id": 1, "visits": 1}),  # status absent
        ],
        [postgres_event("u", lsn=20, after={"id": 1, "status": "paid"})],  # late, in a later batch
    ]
    seen = []
    for number, events in enumerate(batches):
        (changes / f"{number:04d}.json").write_text(lines(events))
        result = job.run_directory(str(changes), "debezium")
        if road != "spark":  # the merged rows, held on the driver, are not collected again
            assert MERGE_ACTION in job.action_seconds
            assert COLLECT_ACTION not in job.action_seconds
        view = broker_view(follower, client, name)
        assert view.lwm >= result.high
        seen.append(table_of(stored_debezium_rows(view), view.lwm))
    # Read as nulls, the absent status would have overwritten "new" and then "paid".
    assert seen == [{1: ("new", 2, 30)}, {1: ("paid", 2, 30)}]


def stored_debezium_rows(view: Any) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    columns = ["id", "status", "visits", "lsn", "validFrom", "validUntil"]
    return [
        row
        for segment in view.visible_segments
        for location in segment.location
        for row in pq.read_table(location.removeprefix("file:"), columns=columns).to_pylist()
    ]


def table_of(rows: list[dict[str, Any]], snapshot: int) -> dict[int, tuple[Any, ...]]:
    return {
        row["id"]: (row["status"], row["visits"], row["lsn"])
        for row in rows
        if row["validFrom"] <= snapshot
        and (row["validUntil"] is None or row["validUntil"] > snapshot)
    }


def test_a_partial_table_killed_at_any_step_and_restarted_counts_each_increment_once(
    spark: Any, server: Any, follower: Any, tmp_path: Path
) -> None:
    """A dead attempt's logged events go with its files (its prepare record names them), so the
    retried batch folds them once; a late increment in every batch too."""
    table = accounts_table(tmp_path / "store", partial_upsert={"balance": "increment"})
    source = tmp_path / "changelog"
    total = 0
    for round_, step in enumerate(STEPS, start=1):
        batch = [ConfChange("k", 10 * round_, round_), ConfChange("k", 1, 0)]
        total += 10 * round_ + 1
        write_changelog(source, f"{round_:03d}.json", batch)
        with pytest.raises(SimulatedCrash):
            IngestJob(spark, table, server("s1"), fail_at=step).run_directory(str(source), "json")
        IngestJob(spark, table, server("s1")).run_directory(str(source), "json")
        view = broker_view(follower, server("s1"), "accounts")
        rows = visible_rows(spark, view.visible_segments, view.lwm)
        assert [(row["user_id"], row["balance"]) for row in rows] == [("k", total)], step
