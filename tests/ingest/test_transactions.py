"""Source transactions: the changes of one transaction commit at one timestamp, so every snapshot
sees all of a transaction or none of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from horizon_broker.ingest.job import IngestJob
from horizon_broker.ingest.partitioning import partitions_of
from horizon_broker.ingest.table import TableDefinition
from tests.ingest.conftest import broker_view

COLUMNS = ("user_id", "balance", "seq", "txn")


def ledger(root: Path) -> TableDefinition:
    return TableDefinition.from_dict({
        "name": "ledger",
        "columns": {"user_id": "string", "balance": "bigint", "seq": "bigint", "txn": "string"},
        "primary_key": ["user_id"], "comparison": ["seq"], "key_partitions": 2,
        "transaction_column": "txn", "storage_root": str(root),
    })  # fmt: skip


def write(directory: Path, name: str, rows: list[tuple[str, int, int, str | None]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(dict(zip(COLUMNS, row, strict=True))) + "\n" for row in rows]
    (directory / name).write_text("".join(lines))


def stored_rows(view: Any) -> list[dict[str, Any]]:
    """Every row of the visible segments (what a broker reads), with its validity columns."""
    import pyarrow.parquet as pq

    rows = []
    for segment in view.visible_segments:
        for location in segment.location:
            rows += pq.read_table(location.removeprefix("file:")).to_pylist()
    return rows


def visible(rows: list[dict[str, Any]], snapshot: int) -> dict[str, list[int]]:
    """Key -> balances of its versions visible at ``snapshot`` (the visibility rule)."""
    seen: dict[str, list[int]] = {}
    for row in rows:
        if row["validFrom"] <= snapshot and (
            row["validUntil"] is None or row["validUntil"] > snapshot
        ):
            seen.setdefault(row["user_id"], []).append(row["balance"])
    return seen


def snapshots(rows: list[dict[str, Any]]) -> list[int]:
    """Every commit timestamp where visibility can change, and the instants on either side."""
    instants = {r["validFrom"] for r in rows} | {r["validUntil"] for r in rows} - {None}
    return sorted({t + d for t in instants for d in (-1, 0, 1)})


def same_partition_keys(spark: Any, count: int) -> list[str]:
    names = [f"acct{i}" for i in range(20)]
    numbers = partitions_of(spark, [(n,) for n in names], ["user_id"], 2, "user_id string")
    return [n for n, p in zip(names, numbers, strict=True) if p == numbers[0]][:count]


def test_a_transfer_between_two_keys_is_visible_all_or_nothing_at_every_snapshot(
    spark, server, follower, tmp_path
):
    a, b, c = same_partition_keys(spark, 3)
    source = tmp_path / "changelog"
    write(source, "001.json", [(a, 100, 1, "open"), (c, 5, 1, None), (b, 100, 1, "open")])
    # Two transfers between a and b, interleaved with other changes in the source.
    write(source, "002.json", [
        (a, 70, 2, "t1"), (c, 6, 2, "t2"), (b, 130, 2, "t1"),
        (b, 90, 3, "t3"), (c, 7, 3, None), (a, 110, 3, "t3"),
    ])  # fmt: skip
    client = server("s1")
    job = IngestJob(spark, ledger(tmp_path / "store"), client)
    first = job.run_directory(str(source / "001.json"), "json")
    second = job.run_directory(str(source), "json")
    assert not second.skipped
    job.flush_updates()

    view = broker_view(follower, client, "ledger")
    rows = stored_rows(view)
    starts = {(r["user_id"], r["seq"]): r["validFrom"] for r in rows}
    # One timestamp per transaction: its first change's position; transactions in source order.
    assert starts[(a, 1)] == starts[(b, 1)] == first.base
    assert starts[(c, 1)] == first.base + 1
    assert starts[(a, 2)] == starts[(b, 2)] == second.base
    assert starts[(c, 2)] == second.base + 1
    assert starts[(b, 3)] == starts[(a, 3)] == second.base + 3
    assert starts[(c, 3)] == second.base + 4
    assert view.lwm >= second.high
    for snapshot in snapshots(rows):
        seen = visible(rows, snapshot)
        assert all(len(balances) == 1 for balances in seen.values()), snapshot
        pair = [seen.get(a, [0])[0], seen.get(b, [0])[0]]
        assert sum(pair) in (0, 200), f"a torn transfer at {snapshot}: {pair}"
    assert visible(rows, view.lwm) == {a: [110], b: [90], c: [7]}


def test_a_key_changed_twice_in_one_transaction_has_one_visible_version(
    spark, server, follower, tmp_path
):
    source = tmp_path / "changelog"
    write(source, "001.json", [("x", 1, 1, None), ("y", 1, 1, None)])
    write(source, "002.json", [
        ("x", 2, 5, "t"), ("y", 2, 7, "t"), ("x", 3, 7, "t"),  # x: the later and newer wins
        ("y", 3, 6, "t"),  # y: older by seq than the transaction's first y: loses
    ])  # fmt: skip
    client = server("s1")
    job = IngestJob(spark, ledger(tmp_path / "store"), client)
    job.run_directory(str(source / "001.json"), "json")
    second = job.run_directory(str(source), "json")
    assert second.updated_segments > 0  # the first versions of x and y were closed once each

    view = broker_view(follower, client, "ledger")
    rows = stored_rows(view)
    assert sorted((r["user_id"], r["balance"]) for r in rows) == [
        ("x", 1),
        ("x", 2),
        ("x", 3),
        ("y", 1),
        ("y", 2),
        ("y", 3),
    ]  # every change stored once: no duplicate from closing an old version twice
    by_version = {(r["user_id"], r["balance"]): r for r in rows}
    for loser in (("x", 2), ("y", 3)):
        assert by_version[loser]["validFrom"] == by_version[loser]["validUntil"] == second.base
    for snapshot in snapshots(rows):
        assert all(len(v) == 1 for v in visible(rows, snapshot).values()), snapshot
    assert visible(rows, second.base - 1) == {"x": [1], "y": [1]}
    assert visible(rows, second.base) == {"x": [3], "y": [2]}
