"""``horizon ingest`` processes reading Redis streams of Debezium events, killed with SIGKILL in
the middle of the streams and restarted: every table ends as its events define it (each live
key's newest row, deleted keys gone) with exactly one stored version per create, update and
snapshot read (none lost, none twice), and every malformed event dead-lettered once with its
entry id; a truncate (``op = t``) ends every version current at it, once. One server reads two
streams (one table each), in both message formats of Debezium Server's Redis sink."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import redis

from horizon_broker.watermark.server import ServerClient
from tests.ingest.redis_stream_events import Change, history, malformed, reference

HORIZON = str(Path(sys.executable).with_name("horizon"))
TABLE = """
name = "{name}"
primary_key = ["id"]
comparison = ["lsn"]
delete_column = "deleted"
transaction_column = "txn"
debezium_order = "lsn"
allow_truncate = true
key_partitions = 2

[columns]
id = "bigint"
name = "string"
balance = "decimal(10,2)"
lsn = "bigint"
deleted = "boolean"
txn = "string"
"""
STREAMS = {
    "customers": ("shop.public.customers", False, 7),
    "accounts": ("shop.public.accounts", True, 11),
}
"""Table -> its stream, whether the sink writes compact entries, and the table's max_events."""


def server_file(tmp_path: Path, redis_url: str) -> Path:
    lines = [
        'server_id = "streams"',
        f'redis = "{redis_url}"',
        "watch = 0.2",
        'format = "debezium"',
        f'storage_root = "{tmp_path / "store"}"',
    ]
    for table, (stream, _, max_events) in STREAMS.items():
        (tmp_path / f"{table}.toml").write_text(TABLE.format(name=table))
        lines += [
            "[[tables]]",
            f'definition = "{table}.toml"',
            f'stream = "{redis_url}#{stream}"',
            f"max_events = {max_events}",
        ]
    path = tmp_path / "server.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def add(client: redis.Redis, table: str, changes: list[Change]) -> list[str]:
    stream, compact, _ = STREAMS[table]
    return [
        client.xadd(stream, change.fields(compact)).decode()  # type: ignore[arg-type, union-attr]
        for change in changes
    ]


def ingest(config: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [HORIZON, "ingest", "--config", str(config), "--spark-master", "local[1]", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def kill_after_batches(process: subprocess.Popen[str], table: str, batches: int) -> list[str]:
    """SIGKILL the server (its JVM too) once it printed ``batches`` batches of ``table``."""
    seen, count = [], 0
    assert process.stdout is not None
    for line in process.stdout:
        seen.append(line.rstrip())
        count += line.startswith(f"{table}: batch ")
        if count >= batches:
            break
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert count >= batches, "the server ended before it was killed:\n" + "\n".join(seen[-30:])
    return seen


def stored_rows(redis_url: str, table: str) -> list[dict[str, Any]]:
    """Every stored version of ``table``: the rows of its announced segments."""
    reader = ServerClient(redis_url, "test-reader")
    rows = []
    for segment in reader.announced_segments(table):
        for location in segment.location:
            path = location.removeprefix("file:")
            columns = ["id", "name", "lsn", "validFrom", "validUntil"]
            rows += pq.read_table(path, columns=columns).to_pylist()
    return rows


def dead_letters(tmp_path: Path, table: str) -> list[dict[str, Any]]:
    directory = tmp_path / "store" / table / "_dead_letters" / "streams"
    return [
        json.loads(line)
        for path in sorted(directory.iterdir())
        for line in path.read_text().splitlines()
    ]


def assert_truncated(stored: list[dict[str, Any]], events: list[Change]) -> None:
    """Every version current at the truncate ended there: before any version after it began."""
    [at] = [json.loads(c.text)["source"]["lsn"] for c in events if c.op == "t"]
    began = min(row["validFrom"] for row in stored if row["lsn"] > at)
    alive = [
        row["id"]
        for row in stored
        if row["lsn"] < at and (row["validUntil"] is None or row["validUntil"] > began)
    ]
    assert not alive, f"versions of keys {alive} outlived the truncate at lsn {at}"


def test_killed_stream_servers_lose_nothing_and_ingest_nothing_twice(
    redis_server: Any, redis_client: redis.Redis, tmp_path: Path
) -> None:
    config = server_file(tmp_path, redis_server.url)
    # each stream truncates its table once, in the stretch the second killed server reads
    changes = {
        "customers": history(1, 160, truncate_at=90),
        "accounts": history(2, 140, truncate_at=80),
    }
    ids: dict[str, list[str]] = {}
    for table, events in changes.items():
        ids[table] = add(redis_client, table, events[: len(events) // 2])

    # Killed twice mid-stream: once after its first batches, once while the rest arrives.
    kill_after_batches(ingest(config), "customers", 3)
    for table, events in changes.items():
        ids[table] += add(redis_client, table, events[len(events) // 2 :][:20])
    kill_after_batches(ingest(config), "accounts", 2)
    for table, events in changes.items():
        ids[table] += add(redis_client, table, events[len(events) // 2 :][20:])

    finished = ingest(config, "--once")
    output, _ = finished.communicate(timeout=300)
    assert finished.returncode == 0, output

    for table, events in changes.items():
        rows, versions = reference(events)
        stored = stored_rows(redis_server.url, table)
        current = {
            row["id"]: {"name": row["name"], "lsn": row["lsn"]}
            for row in stored
            if row["validUntil"] is None
        }
        assert current == rows, f"{table}: the table is not its events' final state"
        counted: dict[int, int] = {}
        for row in stored:
            counted[row["id"]] = counted.get(row["id"], 0) + 1
        assert counted == versions, f"{table}: versions per key differ from one per event"
        assert_truncated(stored, events)
        letters = dead_letters(tmp_path, table)
        assert sorted(letter["entry"] for letter in letters) == sorted(
            ids[table][i] for i in malformed(events)
        ), f"{table}: each malformed event is dead-lettered once, at its entry id"
        assert all(letter["stream"].endswith(STREAMS[table][0]) for letter in letters)
