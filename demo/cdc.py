"""The demo's change-data step: a shop database (customers and orders) mirrored from its Debezium
change stream in Redis Streams by a real ``horizon ingest`` process, checked row by row.

The database (:mod:`demo.cdc_source`) is snapshotted (``op = r``), then changed: inserts,
updates, deletes with their tombstones, the order service's partial status events, and one
source transaction over both tables. Its entries go into one Redis stream per table, as
Debezium Server's Redis sink writes them; ``horizon ingest --config`` reads both streams (one
server, two ``[[tables]]`` entries). Every answer is read through the broker's gRPC client and
compared with the database's own rows: at the end (current state) and, by ``VERSION AS OF``, at a
snapshot taken after the first half of the history.

The step takes the running demo (:class:`demo.run.Demo`): its client, Redis, console, checks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.table import Table

from demo.cdc_source import CUSTOMERS, ORDERS, STREAMS, Shop
from horizon_broker._core.errors import Internal
from horizon_broker._core.hlc import format_snapshot

WAIT_S = 180.0
"""How long the step waits for the mirror to show the stream (a hang, not a timing check)."""
SERVER_ID = "cdc-1"
LOG = "ingest.log"
TABLE_FILES = {
    CUSTOMERS: """\
name = "customers"
primary_key = ["id"]
comparison = ["lsn"]
debezium_order = "lsn"          # the comparison column holds Postgres' source.lsn
delete_column = "deleted"       # true for op = d
transaction_column = "txn"      # transaction.id, else source.txId
key_partitions = 2
storage_root = "{storage}"

[columns]
id = "bigint"
name = "string"
email = "string"
tier = "string"
lsn = "bigint"
deleted = "boolean"
txn = "string"
""",
    ORDERS: """\
name = "orders"
primary_key = ["id"]
comparison = ["lsn"]
debezium_order = "lsn"
delete_column = "deleted"
transaction_column = "txn"
key_partitions = 2
storage_root = "{storage}"

[columns]
id = "bigint"
customer_id = "bigint"
amount_cents = "bigint"
status = "string"
status_events = "bigint"
lsn = "bigint"
deleted = "boolean"
txn = "string"

[partial_upsert]                # a status event carries only id, status and status_events = 1
status = "overwrite_if_not_null"
status_events = "increment"
""",
}
ADDED = ("phone", "string")
"""The column the database gains halfway (``ALTER TABLE customers ADD COLUMN phone``)."""


def mirrored_columns(shop: Shop, table: str) -> tuple[str, ...]:
    """The mirror's columns of ``table`` that mirror the database (orders: and the count)."""
    return (*shop.columns[table], "status_events") if table == ORDERS else shop.columns[table]


def show_change_data(demo: Any) -> None:
    """Step 9: mirror the shop, check it now and at an earlier snapshot."""
    demo.heading("10. Change data: a database's Debezium stream in Redis, mirrored")
    directory = demo.workdir / "cdc"
    config = write_config(directory, demo.redis_url, demo.storage)
    shop = Shop(seed=demo.options.seed)
    shop.snapshot(customers=12, orders=20)
    shop.business(70)
    shop.order_with_upgrade(customer=1, amount_cents=12_345)
    with ingest_process(config, directory / LOG) as process:
        demo.console.print(
            f"  [cyan]horizon ingest --config {config.name}[/cyan] (pid {process.pid}) reads "
            f"{', '.join(STREAMS.values())} from {demo.redis_url}"
        )
        pushed = push(demo.redis_url, shop, 0)
        earlier = mirrored(demo, process, shop)
        demo.console.print(f"  first half: {pushed} entries, visible at {format_snapshot(earlier)}")
        then = {table: (shop.mirror(table), mirrored_columns(shop, table)) for table in STREAMS}
        shop.business(90)
        tx = shop.order_with_upgrade(customer=2, amount_cents=67_890)
        pushed = push(demo.redis_url, shop, pushed)
        mirrored(demo, process, shop)
        add_a_column(demo, shop, config.parent)
        pushed = push(demo.redis_url, shop, pushed)
        final = mirrored(demo, process, shop)
        demo.console.print(f"  all {pushed} entries visible at {format_snapshot(final)}")
    print_history(demo, shop)
    print_orders(demo, shop)
    for table in STREAMS:
        compare(demo, table, shop.mirror(table), mirrored_columns(shop, table),
                f"the current {table}", "")  # fmt: skip
        compare(demo, table, *then[table], f"{table} at the first half's snapshot",
                f" VERSION AS OF {earlier}")  # fmt: skip
    check_transaction(demo, tx, earlier)
    check_old_schema(demo, earlier)


def write_config(directory: Path, redis_url: str, storage: Path) -> Path:
    """The two table files and the server file reading both streams."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = [
        f'server_id = "{SERVER_ID}"',
        f'redis = "{redis_url}"',
        "watch = 0.2",
        'format = "debezium"',
    ]
    for table, stream in STREAMS.items():
        (directory / f"{table}.toml").write_text(TABLE_FILES[table].format(storage=storage))
        lines += ["", "[[tables]]", f'definition = "{table}.toml"',
                  f'stream = "{redis_url}#{stream}"']  # fmt: skip
    path = directory / "server.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@contextmanager
def ingest_process(config: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``horizon ingest --config`` in its own process group, stopped (SIGTERM) on exit."""
    horizon = str(Path(sys.executable).with_name("horizon"))
    command = [horizon, "ingest", "--config", str(config), "--spark-master", "local[1]"]
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, cwd=config.parent, stdout=output, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            yield process
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()


def push(redis_url: str, shop: Shop, start: int) -> int:
    """XADD the shop's entries from ``start`` on to their streams; returns how many exist."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        pipeline = client.pipeline(transaction=False)
        for entry in shop.entries[start:]:
            pipeline.xadd(STREAMS[entry.table], entry.fields())  # type: ignore[arg-type]
        pipeline.execute()
    finally:
        client.close()
    return len(shop.entries)


def mirrored(demo: Any, process: subprocess.Popen[bytes], shop: Shop) -> int:
    """Wait until one snapshot shows both tables' newest change; returns that snapshot."""
    targets = {table: shop.last_lsn(table) for table in STREAMS}
    sql = "SELECT " + ", ".join(f"(SELECT MAX(lsn) FROM {table}) AS {table}" for table in STREAMS)
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise Internal(f"horizon ingest ended ({process.returncode}): {_tail(process)}")
        if not set(STREAMS) <= {info.name for info in demo.client.tables()}:
            time.sleep(0.2)  # the server registers its tables once its Spark is up
            continue
        row = (result := demo.client.execute(sql)).table.to_pylist()[0]
        if all((row[table] or 0) >= target for table, target in targets.items()):
            return int(result.snapshot)
        time.sleep(0.1)
    raise Internal(f"the mirror did not reach {targets} within {WAIT_S:.0f} s")


def add_a_column(demo: Any, shop: Shop, directory: Path) -> None:
    """The database gains a column: ``horizon table alter`` adds it to the mirror (a real
    process, while ``horizon ingest`` runs), then changes set it (new customers, updates)."""
    name, type_ = ADDED
    command = [str(Path(sys.executable).with_name("horizon")), "table", "alter", CUSTOMERS,
               "--redis", demo.redis_url, "--add-column", f"{name} {type_}"]  # fmt: skip
    done = subprocess.run(command, cwd=directory, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise Internal(f"horizon table alter failed: {done.stdout}{done.stderr}")
    demo.console.print(
        f"  [cyan]horizon table alter customers --add-column '{name} {type_}'[/cyan]"
    )
    demo.console.print(f"    {done.stdout.strip()}")
    shop.add_column(CUSTOMERS, name)
    for key in sorted(shop.rows[CUSTOMERS])[:3]:
        shop.update(CUSTOMERS, key, phone=f"+1-555-01{key:02d}")
    shop.new_customer(phone="+1-555-0199")
    shop.business(30)
    shop.order_with_upgrade(customer=3, amount_cents=4_200)  # the last change is no delete


def check_old_schema(demo: Any, earlier: int) -> None:
    """A query at the earlier snapshot that names the added column is refused, naming it."""
    from horizon_broker._core.errors import InvalidArgument

    try:
        demo.client.query(f"SELECT id, {ADDED[0]} FROM customers VERSION AS OF {earlier}")
        refused = ""
    except InvalidArgument as error:
        refused = str(error)
    demo.console.print(f"  {ADDED[0]} at the first half's snapshot: {refused or 'answered!'}")
    demo.check(
        "change data: the added column is refused at a snapshot before it, naming it",
        ADDED[0] in refused,
        refused or "answered",
    )


def compare(
    demo: Any,
    table: str,
    expected: dict[int, dict[str, Any]],
    columns: tuple[str, ...],
    label: str,
    version: str,
) -> None:
    """Check the mirror's rows of ``table`` against the database's, row by row."""
    rows = demo.client.query(f"SELECT {', '.join(columns)} FROM {table}{version}").to_pylist()
    got = {row["id"]: row for row in rows}
    wrong = sorted(key for key in got.keys() & expected.keys() if got[key] != expected[key])
    missing, extra = sorted(expected.keys() - got.keys()), sorted(got.keys() - expected.keys())
    detail = (
        f"{len(got)} rows vs {len(expected)} in the database; "
        f"differing {wrong[:5]}, missing {missing[:5]}, extra {extra[:5]}"
    )
    ok = not wrong and not missing and not extra and len(rows) == len(got)
    demo.console.print(("  [green]✓[/green] " if ok else "  [red]✗[/red] ") + f"{label}: {detail}")
    demo.check(f"change data: {label} equals the database row by row", ok, detail)


def check_transaction(demo: Any, tx: str, since: int) -> None:
    """The transaction over both tables: its order and its customer's new tier, each table's
    part committed at one timestamp of that table."""
    parts = {
        table: demo.client.query(
            f"SELECT id, _commit_timestamp FROM table_changes('{table}', {since}) "
            f"WHERE txn = '{tx}' AND _change_type IN ('insert', 'update_postimage')"
        ).to_pylist()
        for table in STREAMS
    }
    shown = "; ".join(
        f"{table} {[row['id'] for row in rows]} at "
        f"{sorted({format_snapshot(row['_commit_timestamp']) for row in rows})}"
        for table, rows in parts.items()
    )
    demo.console.print(
        f"  transaction {tx} (an order and its customer's new tier): {shown}\n"
        "  (each table commits its part at one timestamp of its own: per table, a reader sees "
        "all of it or none)"
    )
    demo.check(
        "change data: the transaction over both tables is in both, one commit per table",
        all(len(rows) == 1 for rows in parts.values()),
        shown,
    )


def print_history(demo: Any, shop: Shop) -> None:
    view = Table("events in the streams", "count", title="the shop's change history")
    names = {"r": "snapshot reads (r)", "c": "inserts (c)", "u": "updates (u)",
             "d": "deletes (d)", "tombstone": "tombstones", "partial": "partial status events"}  # fmt: skip
    for kind, name in names.items():
        view.add_row(name, str(shop.counts.get(kind, 0)))
    demo.console.print(view)


def print_orders(demo: Any, shop: Shop) -> None:
    """A few orders that had status events, as the mirror shows them."""
    keys = sorted(key for key, count in shop.status_events.items() if count > 1)[:4]
    if not keys:
        return
    rows = demo.client.query(
        f"SELECT {', '.join(mirrored_columns(shop, ORDERS))}, lsn, txn FROM {ORDERS} "
        f"WHERE id IN ({', '.join(map(str, keys))}) ORDER BY id"
    ).to_pylist()
    view = Table(*rows[0].keys(), title="orders merged from full images and partial status events")
    for row in rows:
        view.add_row(*(str(value) for value in row.values()))
    demo.console.print(view)


def _tail(process: subprocess.Popen[bytes]) -> str:
    """The end of the process's log (its working directory's ``ingest.log``)."""
    log = Path(str(process.args[3])).parent / LOG  # type: ignore[index]
    return log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
