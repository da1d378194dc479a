"""A small shop database (customers and orders) and the Debezium change stream it writes, for
the demo's change-data step (:mod:`demo.cdc`). Pure: no Redis, no Horizon.

The model keeps the database's rows as a Postgres connector would see them and, for each change,
the envelope Debezium writes (``op``, ``before``, ``after``, ``source`` with ``lsn`` and
``txId``, ``ts_ms``, ``transaction``), plus the tombstone after each delete, as Debezium
Server's Redis sink adds them to one stream per table (``extended`` entries: ``key`` and
``value``). Besides the database's own changes the order service sends *status events*: an
``after`` image holding only ``id``, ``status`` and ``status_events = 1``, merged by the mirror's
partial upsert (``status`` overwritten, ``status_events`` incremented). :meth:`Shop.mirror`
says what the mirrored tables must hold: the database's rows plus that count.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

CUSTOMERS, ORDERS = "customers", "orders"
STREAMS = {CUSTOMERS: "shop.public.customers", ORDERS: "shop.public.orders"}
"""Each table's stream, named as the sink names it (``<topic prefix>.<schema>.<table>``)."""
TOMBSTONE = "default"
"""The sink's ``null.value``: what it writes for a tombstone."""
TS_MS = 1_790_000_000_000
STATUSES = ("placed", "paid", "packed", "shipped", "delivered")
TIERS = ("bronze", "silver", "gold")
SOURCE_COLUMNS = {
    CUSTOMERS: ("id", "name", "email", "tier"),
    ORDERS: ("id", "customer_id", "amount_cents", "status"),
}
"""The database's columns of each table (the mirror adds lsn, deleted, txn and, for orders, the
status_events count)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One stream entry: the sink's ``key`` and ``value`` fields."""

    table: str
    key: str
    value: str

    def fields(self) -> dict[str, str]:
        return {"key": self.key, "value": self.value}


@dataclass(slots=True)
class Shop:
    """The database, its log position, and the entries its changes produced so far."""

    seed: int = 11
    rows: dict[str, dict[int, dict[str, Any]]] = field(
        default_factory=lambda: {CUSTOMERS: {}, ORDERS: {}}
    )
    status_events: dict[int, int] = field(default_factory=dict)
    entries: list[Entry] = field(default_factory=list)
    lsn: int = 1_000
    tx_id: int = 500
    counts: dict[str, int] = field(default_factory=dict)
    columns: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(SOURCE_COLUMNS))
    """Each table's columns now (:meth:`add_column` adds one)."""
    _open_tx: str | None = None
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    # -- the database's changes ----------------------------------------------------------------

    def insert(self, table: str, row: dict[str, Any], *, op: str = "c") -> None:
        """A new row (``op = r`` for the initial snapshot's reads)."""
        self.rows[table][row["id"]] = dict(row)
        self._emit(table, op, row["id"], None, dict(row))

    def update(self, table: str, key: int, **changes: Any) -> None:
        before = dict(self.rows[table][key])
        self.rows[table][key].update(changes)
        self._emit(table, "u", key, before, dict(self.rows[table][key]))

    def delete(self, table: str, key: int) -> None:
        before = self.rows[table].pop(key)
        if table == ORDERS:
            self.status_events.pop(key, None)
        self._emit(table, "d", key, before, None)
        self.entries.append(Entry(table, _key(key), TOMBSTONE))
        self._count("tombstone")

    def status_event(self, order: int, status: str) -> None:
        """The order service's partial event: only the key, the status and a count of one."""
        self.rows[ORDERS][order]["status"] = status
        self.status_events[order] = self.status_events.get(order, 0) + 1
        partial = {"id": order, "status": status, "status_events": 1}
        self._emit(ORDERS, "u", order, None, partial, counted="partial")

    def add_column(self, table: str, name: str) -> None:
        """``ALTER TABLE ... ADD COLUMN``: every row has it, null until a change sets it."""
        self.columns[table] = (*self.columns[table], name)
        for row in self.rows[table].values():
            row[name] = None

    @contextmanager
    def transaction(self) -> Iterator[str]:
        """Changes made inside share one source transaction (``txId``, ``transaction.id``)."""
        self.tx_id += 1
        self._open_tx = f"{self.tx_id}:{self.lsn + 1}"
        try:
            yield self._open_tx
        finally:
            self._open_tx = None

    # -- what the mirror must hold -------------------------------------------------------------

    def mirror(self, table: str) -> dict[int, dict[str, Any]]:
        """Each live key's row as the mirror must show it (the database's columns, and the
        orders' ``status_events``: None for an order that never had one)."""
        rows = {key: dict(row) for key, row in self.rows[table].items()}
        if table == ORDERS:
            for key, row in rows.items():
                row["status_events"] = self.status_events.get(key)
        return rows

    def last_lsn(self, table: str) -> int:
        """The log position of ``table``'s newest change (its mirror's max(lsn) once every
        entry is in, when that change is not a delete)."""
        for entry in reversed(self.entries):
            if entry.table == table and entry.value != TOMBSTONE:
                return int(json.loads(entry.value)["source"]["lsn"])
        return 0

    # -- drawing a history ---------------------------------------------------------------------

    def snapshot(self, customers: int, orders: int) -> None:
        """The connector's initial snapshot: every row read (``op = r``)."""
        for key in range(1, customers + 1):
            self.insert(CUSTOMERS, _customer(key, self._rng), op="r")
        for key in range(1, orders + 1):
            self.insert(ORDERS, self._order(key), op="r")

    def business(self, changes: int) -> None:
        """``changes`` random changes: new customers and orders, edits, status events (about
        one change in three), cancelled orders and closed accounts (deletes)."""
        for _ in range(changes):
            roll = self._rng.random()
            orders = sorted(self.rows[ORDERS])
            if roll < 0.35 and orders:
                order = self._rng.choice(orders)
                self.status_event(order, _next_status(self.rows[ORDERS][order]["status"]))
            elif roll < 0.55:
                self.insert(ORDERS, self._order(max(orders, default=0) + 1))
            elif roll < 0.70 and orders:
                self.update(ORDERS, self._rng.choice(orders), amount_cents=self._amount())
            elif roll < 0.82:
                key = self._rng.choice(sorted(self.rows[CUSTOMERS]))
                self.update(CUSTOMERS, key, email=f"c{key}.{self.lsn}@example.com")
            elif roll < 0.90:
                self.new_customer()
            elif roll < 0.96 and len(orders) > 3:
                self.delete(ORDERS, self._rng.choice(orders))
            else:
                self._close_a_customer()

    def order_with_upgrade(self, customer: int, amount_cents: int) -> str:
        """One source transaction over both tables: a new order and its customer's new tier."""
        with self.transaction() as tx:
            self.insert(ORDERS, {"id": max(self.rows[ORDERS]) + 1, "customer_id": customer,
                                 "amount_cents": amount_cents, "status": "placed"})  # fmt: skip
            tier = TIERS[min(TIERS.index(self.rows[CUSTOMERS][customer]["tier"]) + 1, 2)]
            self.update(CUSTOMERS, customer, tier=tier)
        return tx

    def _close_a_customer(self) -> None:
        """A customer without orders closes the account (a delete); none: nothing happens."""
        ordering = {row["customer_id"] for row in self.rows[ORDERS].values()}
        idle = sorted(set(self.rows[CUSTOMERS]) - ordering)
        if len(idle) > 1:
            self.delete(CUSTOMERS, self._rng.choice(idle))

    def new_customer(self, **values: Any) -> int:
        """A new customer (with ``values`` for columns added since the snapshot)."""
        key = max(self.rows[CUSTOMERS]) + 1
        row = (
            _customer(key, self._rng)
            | dict.fromkeys(self.columns[CUSTOMERS][len(SOURCE_COLUMNS[CUSTOMERS]) :])
            | values
        )
        self.insert(CUSTOMERS, row)
        return key

    def _order(self, key: int) -> dict[str, Any]:
        customer = self._rng.choice(sorted(self.rows[CUSTOMERS]))
        return {"id": key, "customer_id": customer, "amount_cents": self._amount(),
                "status": "placed"}  # fmt: skip

    def _amount(self) -> int:
        return self._rng.randrange(500, 50_000)

    def _emit(
        self,
        table: str,
        op: str,
        key: int,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        *,
        counted: str | None = None,
    ) -> None:
        self.lsn += 1
        tx = self._open_tx
        envelope = {
            "before": before,
            "after": after,
            "source": {
                "version": "2.7.0.Final", "connector": "postgresql", "name": "shop",
                "ts_ms": TS_MS + self.lsn, "snapshot": "true" if op == "r" else "false",
                "db": "shop", "schema": "public", "table": table,
                "txId": int(tx.split(":")[0]) if tx else self.lsn, "lsn": self.lsn,
            },
            "op": op,
            "ts_ms": TS_MS + self.lsn + 3,
            "transaction": {"id": tx, "total_order": 1, "data_collection_order": 1}
            if tx else None,
        }  # fmt: skip
        self.entries.append(Entry(table, _key(key), json.dumps(envelope)))
        self._count(counted or op)

    def _count(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1


def _key(key: int) -> str:
    return json.dumps({"id": key})


def _customer(key: int, rng: random.Random) -> dict[str, Any]:
    return {"id": key, "name": f"customer {key}", "email": f"c{key}@example.com",
            "tier": rng.choice(TIERS[:2])}  # fmt: skip


def _next_status(status: str) -> str:
    return STATUSES[min(STATUSES.index(status) + 1, len(STATUSES) - 1)]
