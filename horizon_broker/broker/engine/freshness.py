"""How fresh a default read must be: the lowest snapshot it may use, and its staleness bound.

The pure rules come first; :func:`wait_for_snapshot` is the one piece that blocks (on the
follower, until its LWMs move or the deadline passes).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from horizon_broker._core.errors import DeadlineExceeded, HorizonError, Unavailable
from horizon_broker._core.hlc import LOGICAL_BITS
from horizon_broker.timeline.interval import format_instant

MAX_LAGGARDS_NAMED = 5


def required_snapshot(tables: Iterable[str], *floors: Mapping[str, int]) -> int | None:
    """The lowest snapshot a default read of ``tables`` may use: the highest any floor names for
    one of them (a multi-table read has one snapshot, so every table must reach it). None: no
    constraint.

    >>> required_snapshot(["a", "B"], {"a": 5, "c": 9}, {"b": 7})
    7
    """
    wanted = [floor[t.lower()] for floor in floors for t in tables if t.lower() in floor]
    return max(wanted, default=None)


def staleness_ms(snapshot: int, now_ms: int) -> int:
    """How far ``snapshot`` (an HLC) is behind ``now_ms`` on the commit clock."""
    return max(0, now_ms - (snapshot >> LOGICAL_BITS))


def check_staleness(
    snapshot: int, now_ms: int, max_staleness_s: float | None, holding_back: str
) -> None:
    """Refuse a read whose snapshot is older than ``max_staleness_s`` (UNAVAILABLE: the laggard
    may catch up, so a retry can succeed)."""
    if max_staleness_s is None:
        return
    behind = staleness_ms(snapshot, now_ms)
    if behind > max_staleness_s * 1000:
        raise Unavailable(
            f"the snapshot this query would read, {snapshot} "
            f"({format_instant(snapshot >> LOGICAL_BITS)}), is {behind / 1000:.1f}s old on the "
            f"commit clock, over max_staleness {max_staleness_s:g}s: {holding_back}"
        )


def laggards(follower: Any, tables: Iterable[str], snapshot: int) -> str:
    """A sentence naming the partitions and servers holding ``tables`` below ``snapshot``."""
    named: list[str] = []
    for table in tables:
        try:
            report = follower.watermarks(table)
        except Exception as error:  # the table's state cannot be read: say that instead
            named.append(f"table {table}: {error}")
            continue
        behind = sorted(
            (p for p in report.partitions if p.lwm is None or p.lwm < snapshot),
            key=lambda p: (p.lwm or 0, p.partition),
        )
        for entry in behind[:MAX_LAGGARDS_NAMED]:
            state = "live" if entry.live else "not heartbeating"
            if getattr(entry, "state", "active") != "active":
                state = f"{entry.state}, {state}" if entry.state == "idle" else entry.state
            at = "no progress yet" if entry.lwm is None else f"at {entry.lwm}"
            named.append(
                f"table {table} partition {entry.partition} on server {entry.owner or '?'} "
                f"({state}) {at}"
            )
        if len(behind) > MAX_LAGGARDS_NAMED:
            named.append(f"table {table}: {len(behind) - MAX_LAGGARDS_NAMED} more partitions")
        if not behind and report.lwm is not None and report.lwm < snapshot:
            named.append(f"table {table}: this broker serves {report.lwm} (state not caught up)")
    return "held back by " + "; ".join(named) if named else "no partition is behind it"


def wait_for_snapshot(
    follower: Any,
    tables: Iterable[str],
    snapshot: int,
    deadline: float,
    why: str,
    *,
    gone: Callable[[], HorizonError | None] = lambda: None,
) -> None:
    """Block until every one of ``tables`` has an LWM at or above ``snapshot``; at ``deadline``
    (a ``time.monotonic()`` instant) fail with DEADLINE_EXCEEDED naming what holds it back.
    ``gone`` says why the caller no longer wants the answer (cancelled, left): the wait ends
    with that error within a tenth of a second, freeing its thread and its place."""
    tables = list(tables)
    stopped: list[HorizonError] = []

    def reached(_: Any) -> bool:
        error = gone()
        if error is not None:
            stopped.append(error)
            return True
        for table in tables:
            try:
                if follower.lwm(table) < snapshot:
                    return False
            except Exception:
                return False
        return True

    if follower.wait_for(reached, max(0.0, deadline - time.monotonic())):
        if stopped:
            raise stopped[0]
        return
    raise DeadlineExceeded(
        f"{why}: waited for snapshot {snapshot} of {', '.join(tables)} until the deadline; "
        f"{laggards(follower, tables, snapshot)}"
    )


def check_prepared_staleness(prepared: Any, max_staleness_s: float | None) -> None:
    """Refuse a prepared default read older than ``max_staleness_s``, naming what holds its
    lowest table back."""
    snapshot = prepared.plan.snapshot
    if max_staleness_s is None or snapshot is None:
        return
    lowest = min((t for t in prepared.tables if t.snapshot is not None), key=lambda t: t.lwm or 0)
    laggard = lowest.laggard
    holding = (
        f"table {lowest.table} is held back by partition {laggard.partition} on server "
        f"{laggard.server}"
        if laggard is not None
        else f"table {lowest.table} has no laggard on record"
    )
    check_staleness(snapshot, int(time.time() * 1000), max_staleness_s, holding)
