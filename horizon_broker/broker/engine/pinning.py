"""Reading at a snapshot pin: every table of the query at the pin's one snapshot.

A pinned read is a default read whose "now" is the pin's snapshot: the catalog sees each pinned
table's LWM as that snapshot (so ``VERSION AS OF`` above it is "in the future" and a change feed
with no end stops there), and a table the pin does not hold is refused rather than read at some
other moment.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from horizon_broker._core.errors import FailedPrecondition, InvalidArgument, NotFound
from horizon_broker.broker.engine.freshness import required_snapshot, wait_for_snapshot
from horizon_broker.broker.grants import Principal, resolve_readable
from horizon_broker.pins.rules import Pin


def find_pin(store: Any, pin_id: str) -> Pin:
    """The live pin ``pin_id`` from the pin store, or NOT_FOUND saying it expired or never was."""
    tables = store.pin_tables(pin_id)
    if tables:
        _, pins = store.listing(tables)
        for pin in pins:
            if pin.pin_id == pin_id:
                return pin
    raise NotFound(
        f"snapshot pin {pin_id} is not held: it expired, was released, or never existed "
        "(take a new one with PinSnapshot)"
    )


def pinned_views(views: Mapping[str, Any], pin: Pin) -> dict[str, Any]:
    """``views`` with every pinned table's LWM replaced by the pin's snapshot."""
    held = {table.lower() for table in pin.tables}
    return {
        key: dataclasses.replace(view, lwm=pin.snapshot) if key in held else view
        for key, view in views.items()
    }


def check_pinned_tables(reads: Any, pin: Pin) -> None:
    """Refuse a pinned query that reads a table the pin does not hold at a snapshot."""
    held = {table.lower() for table in pin.tables}
    for read in reads:
        if (read.snapshot is not None or read.change_windows) and read.name.lower() not in held:
            raise FailedPrecondition(
                f"table {read.name} is not held by snapshot pin {pin.pin_id} (it holds "
                f"{', '.join(pin.tables)}): pin it too, or query it without the pin"
            )


DEFAULT_LEASE_S = 300.0


def resolve_tables(follower: Any, names: Iterable[str], principal: Principal) -> list[str]:
    """The registered spelling of each name (tables resolve case-insensitively, like SQL), each
    one the caller may read (unknown and ungranted answer alike, see :mod:`horizon_broker.broker.api.auth`)."""
    registered = follower.tables()
    resolved = []
    for name in names:
        if not name:
            raise InvalidArgument("a table name is empty")
        resolved.append(resolve_readable(principal, registered, name))
    if not resolved:
        raise InvalidArgument("name at least one table to pin")
    return list(dict.fromkeys(resolved))


def choose_pin_snapshot(
    follower: Any,
    tables: Sequence[str],
    asked: int | None,
    min_snapshot: Mapping[str, int],
    deadline: float,
) -> int:
    """The snapshot to pin: ``asked``, or the lowest current LWM of ``tables`` once it reached
    ``min_snapshot`` (what a query of them all with no snapshot clause reads now)."""
    required = required_snapshot(tables, min_snapshot)
    if required is not None and asked is None:
        wait_for_snapshot(
            follower, tables, required, deadline, f"min_snapshot asks for {required} or later"
        )
    lowest = min(follower.lwm(table) for table in tables)
    if asked is None:
        return lowest
    if asked > lowest:
        raise FailedPrecondition(
            f"snapshot {asked} is in the future: above the low-watermark {lowest} of "
            f"{', '.join(tables)}; pin it once the tables reached it"
        )
    return asked


def take_pin(
    store: Any,
    follower: Any,
    tables: Sequence[str],
    *,
    snapshot: int | None,
    lease_s: float,
    owner: str,
    min_snapshot: Mapping[str, int],
    deadline: float,
) -> Pin:
    """Pin one snapshot of ``tables`` (registered names) for ``lease_s`` seconds."""
    chosen = choose_pin_snapshot(follower, tables, snapshot, min_snapshot, deadline)
    return store.pin(tables, chosen, lease_s=lease_s, owner=owner)


def pin_plan(store: Any, prepared: Any, lease_s: float, *, owner: str) -> Pin | None:
    """Pin what a passthrough plan reads, so its files and history outlive the lease: the
    lowest snapshot (or change-feed window start) of its tables (None: nothing to pin)."""
    if prepared.pin is not None:
        return prepared.pin
    lows: dict[str, int] = {}
    for table in prepared.tables:
        points = [lo for lo, _ in table.change_windows]
        points += [table.snapshot] if table.snapshot is not None else []
        if points:
            lows[table.table] = max(min(points), table.retention_horizon)
    if not lows:
        return None
    return store.pin(list(lows), min(lows.values()), lease_s=lease_s, owner=owner)
