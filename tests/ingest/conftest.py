"""Helpers for ingestion tests: a reference model of key resolution and a broker's-eye check.

The model replays a changelog in plain Python (newest by comparison value, ties by source order,
deletes end a key, older records lose). The check reads what a broker would: the follower's visible
segments at the served low-watermark, with the visibility rule applied to the Parquet rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from horizon_broker._core.keys import Keys
from horizon_broker.ingest.table import TableDefinition
from horizon_broker.watermark.follower import Follower
from horizon_broker.watermark.server import ServerClient

COLUMNS = ("user_id", "balance", "seq", "deleted")


def accounts_table(root: Path, **overrides: Any) -> TableDefinition:
    """The Pinot design's account balances: key user_id, newest by seq, deletes by a flag."""
    data: dict[str, Any] = {
        "name": "accounts",
        "columns": {
            "user_id": "string",
            "balance": "bigint",
            "seq": "bigint",
            "deleted": "boolean",
        },
        "primary_key": ["user_id"],
        "comparison": ["seq"],
        "delete_column": "deleted",
        "key_partitions": 2,
        "storage_root": str(root),
        "granularity": "DAY",
    }
    data.update(overrides)
    return TableDefinition.from_dict(data)


@dataclass(frozen=True)
class Seen:
    """What a check saw: the served LWM and every stored row of the visible segments."""

    lwm: int
    stored: list[dict[str, Any]]


@dataclass(frozen=True)
class Change:
    user_id: str
    balance: int
    seq: int | None
    deleted: bool = False

    def as_row(self) -> dict[str, Any]:
        return {"user_id": self.user_id, "balance": self.balance, "seq": self.seq,
                "deleted": self.deleted}  # fmt: skip


def replay(changes: Sequence[tuple[int, Change]], snapshot: int | None = None) -> dict[str, Change]:
    """The current version of each key after the changes with commit ts <= snapshot."""
    best: dict[str, tuple[bool, int]] = {}
    current: dict[str, Change | None] = {}
    for ts, change in sorted(changes, key=lambda item: item[0]):
        if snapshot is not None and ts > snapshot:
            continue
        rank = (change.seq is not None, change.seq or 0)  # a null seq is the oldest
        if change.user_id in best and rank < best[change.user_id]:
            continue  # out of order: loses
        best[change.user_id] = rank
        current[change.user_id] = None if change.deleted else change
    return {key: value for key, value in current.items() if value is not None}


def stamp(changes: Sequence[Change], base: int) -> list[tuple[int, Change]]:
    """Commit timestamps of a one-file batch: change i gets base + i."""
    return [(base + i, change) for i, change in enumerate(changes)]


def write_changelog(directory: Path, name: str, changes: Sequence[Change]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("".join(json.dumps(change.as_row()) + "\n" for change in changes))
    return path


def reported_lwm(client: ServerClient, table: str) -> int:
    progress = client.partition_progress(table)
    return min(min(p.ingested, p.applied) for p in progress.values())


def broker_view(follower: Follower, client: ServerClient, table: str) -> Any:
    """The follower's view once it has caught up with what the servers reported (idle and
    parked partitions may take it higher: their LWM follows a clock)."""
    expected = reported_lwm(client, table)
    seq, epoch = _log_position(client)
    assert follower.wait_for(
        lambda f: (_served(f, table) or -1) >= expected and _applied(f, seq, epoch), timeout=10
    ), f"follower never served LWM {expected} (has {_served(follower, table)})"
    return follower.view(table)


def _log_position(client: ServerClient) -> tuple[int, str]:
    """The last event in the state store's log: a compaction publishes without moving the LWM."""
    keys = Keys(client.prefix)
    seq = int(client.redis.get(keys.seq) or 0)
    epoch = (client.redis.get(keys.epoch) or b"").decode()
    return seq, epoch


def _applied(follower: Follower, seq: int, epoch: str) -> bool:
    return follower.state_epoch == epoch and follower.state_seq >= seq


def _served(follower: Follower, table: str) -> int | None:
    try:
        return follower.view(table).lwm
    except Exception:
        return None


def segment_rows(spark: Any, segments: Sequence[Any]) -> list[dict[str, Any]]:
    """Every stored row of the given segments, with its validity columns.

    Read with pyarrow, not Spark: the same Parquet rows without a Spark job per check (the
    broker's tests cover reading segments through Spark). ``spark`` is kept for the callers.
    """
    import pyarrow.parquet as pq

    del spark
    rows: list[dict[str, Any]] = []
    for segment in segments:
        for location in segment.location:
            path = location.removeprefix("file:")
            rows += pq.read_table(path, columns=[*COLUMNS, "validFrom", "validUntil"]).to_pylist()
    return rows


def visible_at(rows: Sequence[dict[str, Any]], snapshot: int) -> list[dict[str, Any]]:
    """The visibility rule: validFrom <= S AND (validUntil IS NULL OR validUntil > S)."""
    return [
        {name: row[name] for name in COLUMNS}
        for row in rows
        if row["validFrom"] <= snapshot
        and (row["validUntil"] is None or row["validUntil"] > snapshot)
    ]


def visible_by_key(
    rows: Sequence[dict[str, Any]], snapshot: int, key: str = "id"
) -> dict[Any, dict[str, Any]]:
    """The rows visible at ``snapshot`` (the visibility rule) by their key, each key once."""
    visible = [
        row
        for row in rows
        if row["validFrom"] <= snapshot
        and (row["validUntil"] is None or row["validUntil"] > snapshot)
    ]
    keys = [row[key] for row in visible]
    assert len(keys) == len(set(keys)), f"a key is visible twice at {snapshot}: {keys}"
    return {row[key]: row for row in visible}


def visible_rows(spark: Any, segments: Sequence[Any], snapshot: int) -> list[dict[str, Any]]:
    """Rows of the visible segments that are visible at ``snapshot``."""
    return visible_at(segment_rows(spark, segments), snapshot)


def assert_broker_sees(
    spark: Any, follower: Follower, client: ServerClient, table: str,
    changes: Sequence[tuple[int, Change]], *, exact_ts: bool = True,
) -> Seen:  # fmt: skip
    """Exactly one version per key at the served LWM, equal to the replay of the changelog.

    With ``exact_ts`` false, every change is assumed to be at or below the LWM (used when the
    timestamps of crashed attempts are unknown; the caller makes sure everything is applied).
    """
    view = broker_view(follower, client, table)
    stored = segment_rows(spark, view.visible_segments)
    rows = visible_at(stored, view.lwm)
    keys = [row["user_id"] for row in rows]
    assert len(keys) == len(set(keys)), f"a key is visible twice at {view.lwm}: {sorted(keys)}"
    expected = replay(changes, view.lwm if exact_ts else None)
    got = {row["user_id"]: Change(**row) for row in rows}
    assert got == expected
    return Seen(int(view.lwm), stored)


def assert_every_snapshot_answers_the_replay(
    spark: Any,
    follower: Follower,
    client: ServerClient,
    log: Sequence[tuple[int, Change]],
    since: int = 0,
    table: str = "accounts",
) -> int:
    """At every commit timestamp from ``since`` up to the LWM: one version per key, equal to the
    replay of the changelog."""
    view = broker_view(follower, client, table)
    stored = segment_rows(spark, view.visible_segments)
    snapshots = sorted({ts for ts, _ in log if since <= ts <= view.lwm} | {view.lwm})
    for snapshot in snapshots:
        rows = visible_at(stored, snapshot)
        keys = [row["user_id"] for row in rows]
        assert len(keys) == len(set(keys)), f"a key is visible twice at {snapshot}"
        assert {row["user_id"]: Change(**row) for row in rows} == replay(log, snapshot), snapshot
    return len(snapshots)


@pytest.fixture
def follower(redis_server: Any, redis_client: Any) -> Iterator[Follower]:
    instance = Follower(redis_server.url)
    instance.start()
    instance.wait_until_synced()
    yield instance
    instance.stop()


@pytest.fixture
def server(redis_server: Any, redis_client: Any) -> Iterator[Any]:
    """A factory of server clients on the shared Redis (closed after the test)."""
    clients: list[ServerClient] = []

    def make(server_id: str) -> ServerClient:
        client = ServerClient(redis_server.url, server_id)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()
