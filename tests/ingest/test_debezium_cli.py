"""``horizon ingest --format debezium`` on files of Postgres- and MySQL-shaped change events,
then queries through a real gRPC broker: the tables mirror the sources' final state (deletes
gone, late events losing by log position, tombstones and malformed events not rows)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.client import connect
from horizon_broker.ingest.cli import main_ingest
from tests.broker.conftest import ADMIN, broker_config
from tests.ingest.debezium_events import lines, mysql_event, postgres_event, wrapped

CUSTOMERS = """
name = "customers"
primary_key = ["id"]
comparison = ["lsn"]
delete_column = "deleted"
transaction_column = "txn"
debezium_order = "lsn"
key_partitions = 2

[columns]
id = "bigint"
name = "string"
lsn = "bigint"
deleted = "boolean"
txn = "string"
"""

ORDERS = """
name = "orders"
primary_key = ["id"]
comparison = ["binlog"]
delete_column = "deleted"
debezium_order = "binlog"

[columns]
id = "int"
amount = "decimal(10,2)"
placed = "timestamp"
binlog = "decimal(38,0)"
deleted = "boolean"
"""


def customer(key: int, name: str) -> dict[str, Any]:
    return {"id": key, "name": name}


def order(key: int, amount: str) -> dict[str, Any]:
    return {"id": key, "amount": amount, "placed": "2024-05-01T10:00:00Z"}


def write_postgres_changes(directory: Path) -> None:
    """A snapshot, a transaction, a delete and its tombstone, a malformed line; then a late
    update (an older LSN) and a new customer in a second file."""
    directory.mkdir(parents=True)
    first = [
        wrapped(postgres_event("r", lsn=10, after=customer(1, "alice"))),
        wrapped(postgres_event("r", lsn=11, after=customer(2, "bob"))),
        wrapped(postgres_event("c", lsn=20, after=customer(3, "carol"), tx=700, transaction="700:20")),
        wrapped(postgres_event("u", lsn=21, before=customer(1, "alice"), after=customer(1, "alice b"), tx=700, transaction="700:20")),
        wrapped(postgres_event("d", lsn=30, before={"id": 2, "name": None}, tx=701)),
        None,
    ]  # fmt: skip
    (directory / "0001.json").write_text(lines(first) + "this is not an event\n")
    late = [
        postgres_event("u", lsn=15, after=customer(3, "carol (late)"), tx=650),
        postgres_event("c", lsn=40, after=customer(4, "dave"), tx=702),
    ]
    (directory / "0002.json").write_text(lines(late))


def write_mysql_changes(directory: Path) -> None:
    """A later binlog file wins over a larger position in an earlier one; rows of one multi-row
    event by their row; a delete; a late update from an older position."""
    directory.mkdir(parents=True)
    events = [
        mysql_event("c", file=3, pos=900, after=order(100, "5.00")),
        mysql_event("u", file=4, pos=10, after=order(100, "7.50"), gtid="a:1"),
        mysql_event("c", file=4, pos=20, row=0, after=order(101, "1.00"), gtid="a:2"),
        mysql_event("c", file=4, pos=20, row=1, after=order(102, "2.00"), gtid="a:2"),
        mysql_event("d", file=4, pos=30, before=order(101, "1.00"), gtid="a:3"),
        None,
        mysql_event("u", file=3, pos=950, after=order(100, "6.00")),
    ]
    (directory / "0001.json").write_text(lines(events))


def test_ingest_mirrors_postgres_and_mysql_debezium_files_queried_through_the_broker(
    spark: Any, redis_server: Any, tmp_path: Path, capsys: Any
) -> None:
    (tmp_path / "customers.toml").write_text(CUSTOMERS)
    (tmp_path / "orders.toml").write_text(ORDERS)
    write_postgres_changes(tmp_path / "landing" / "customers")
    write_mysql_changes(tmp_path / "landing" / "orders")
    argv = [
        "--table", str(tmp_path / "customers.toml"), "--table", str(tmp_path / "orders.toml"),
        "--source", str(tmp_path / "landing"), "--format", "debezium", "--server-id", "dbz",
        "--redis", redis_server.url, "--storage-root", str(tmp_path / "store"),
    ]  # fmt: skip
    assert main_ingest(argv) == 0
    printed = capsys.readouterr().out
    assert "7 rows" in printed and "6 rows" in printed
    [letters] = (tmp_path / "store" / "customers" / "_dead_letters" / "dbz").iterdir()
    [letter] = [json.loads(line) for line in letters.read_text().splitlines()]
    assert (letter["position"], letter["event"]) == (7, "this is not an event")
    assert letter["source"].endswith("customers/0001.json")
    tokens = [line.rsplit("token ", 1)[1] for line in printed.splitlines() if "token" in line]

    broker = BrokerServer(broker_config(redis_server.url), spark=spark).start()  # type: ignore[arg-type]
    try:
        with connect(broker.target, token=ADMIN) as horizon:
            customers = horizon.query(
                "SELECT id, name, lsn FROM customers ORDER BY id", min_snapshot=tokens
            ).to_pylist()
            orders = horizon.query("SELECT id, amount FROM orders ORDER BY id").to_pylist()
    finally:
        broker.stop(0)
        broker.follower.stop()
    assert customers == [
        {"id": 1, "name": "alice b", "lsn": 21},
        {"id": 3, "name": "carol", "lsn": 20},
        {"id": 4, "name": "dave", "lsn": 40},
    ]
    assert orders == [
        {"id": 100, "amount": Decimal("7.50")},
        {"id": 102, "amount": Decimal("2.00")},
    ]


def test_ingest_refuses_debezium_for_a_table_without_a_delete_column(
    redis_server: Any, tmp_path: Path, capsys: Any
) -> None:
    (tmp_path / "t.toml").write_text(
        'name = "nodel"\nprimary_key = ["id"]\n[columns]\nid = "bigint"\nname = "string"\n'
    )
    argv = ["--table", str(tmp_path / "t.toml"), "--source", str(tmp_path), "--format",
            "debezium", "--server-id", "nd", "--redis", redis_server.url,
            "--storage-root", str(tmp_path / "data")]  # fmt: skip
    assert main_ingest(argv) == 2
    assert "format debezium needs a delete_column" in capsys.readouterr().err
