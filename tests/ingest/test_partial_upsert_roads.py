"""Partial upserts through the real pipeline, on every road (driver rows, driver columns, Spark):
every snapshot answers a reference model that folds each key's events committed by then in
comparison order (ties: commit order) with the columns' strategies, late events (a lower
comparison value, in a later batch too) included. A deleted key is absent; the events before a
delete (in comparison order) no longer count.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from horizon_broker.ingest.job import IngestJob
from horizon_broker.ingest.table import TableDefinition
from tests.ingest.conftest import broker_view

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
}
MERGED = [name for name in COLUMNS if name not in ("id", "seq", "deleted")]
_example = itertools.count()


@dataclass(frozen=True)
class Change:
    """One drawn event: its key, comparison value, delete flag and values (None: null)."""

    id: int
    seq: int
    deleted: bool
    values: tuple[tuple[str, Any], ...]

    def as_row(self) -> dict[str, Any]:
        return {"id": self.id, "seq": self.seq, "deleted": self.deleted, **dict(self.values)}


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


def reference(log: list[tuple[int, Change]], snapshot: int) -> dict[int, dict[str, Any]]:
    """Per key, the fold of its events committed by ``snapshot``, by (seq, commit order)."""
    rows: dict[int, dict[str, Any] | None] = {}
    for _, change in sorted(((c.seq, ts), c) for ts, c in log if ts <= snapshot):
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
            **overrides,
        }
    )


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=histories(), road=st.sampled_from(sorted(ROADS)))
@example(history=LATE_IN_A_LATER_BATCH, road="driver rows")
@example(history=LATE_IN_A_LATER_BATCH, road="driver columns")
@example(history=LATE_IN_A_LATER_BATCH, road="spark")
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
        log += [(result.base + place, change) for place, change in enumerate(batch)]
        view = broker_view(follower, client, name)
        rows = stored_rows(view)
        for snapshot in sorted({ts for ts, _ in log if ts <= view.lwm} | {view.lwm}):
            assert table_at(rows, snapshot) == reference(log, snapshot), (road, snapshot)
