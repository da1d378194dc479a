"""How a partition moves between active, idle and parked (rule 7 of
``docs/design/contract/watermarks.md``), as pure functions.

These are the rules the Lua scripts apply in Redis (:mod:`horizon_broker.watermark.partition_lua`); a property
test runs both on the same steps. The one promise they keep: a quiet partition's LWM may be read
up to the clock it follows, so whoever writes to it next first *resumes* it at ``R``, above every
snapshot that may have been served for it (its effective LWM at that moment, and the brokers'
highest served snapshot of the table), and stamps every later commit above ``R``.

>>> from horizon_broker.watermark.lwm import Clocks
>>> idle = PartitionProgress("s1", 100, 100, state=IDLE, since_ms=5)
>>> entry, r = resumed(idle, Clocks({"s1": 900}), served_floor=950)
>>> (entry.state, entry.ingested, r)
('active', 950, 950)
"""

from __future__ import annotations

import dataclasses

from horizon_broker.watermark.lwm import ACTIVE, IDLE, NO_CLOCKS, PARKED, Clocks, PartitionProgress


def resumed(
    entry: PartitionProgress, clocks: Clocks = NO_CLOCKS, served_floor: int = 0
) -> tuple[PartitionProgress, int | None]:
    """An idle or parked partition made active again at ``R`` (its effective LWM now, or the
    brokers' served floor if higher), with its progress raised to ``R``; and ``R``. An active
    partition is unchanged (None)."""
    if not entry.quiet or entry.lwm is None:
        return dataclasses.replace(entry, state=ACTIVE, since_ms=None), None
    r = max(entry.effective(clocks), served_floor)  # type: ignore[type-var]
    raised = dataclasses.replace(
        entry,
        ingested=max(entry.ingested, r),  # type: ignore[type-var]
        applied=max(entry.applied, r),  # type: ignore[type-var]
        state=ACTIVE,
        since_ms=None,
        floor=r,
    )
    return raised, r


def reported(
    entry: PartitionProgress | None,
    server: str,
    ingested: int,
    applied: int,
    *,
    idle: bool,
    now_ms: int,
    clocks: Clocks = NO_CLOCKS,
    served_floor: int = 0,
) -> tuple[PartitionProgress, int | None]:
    """A report of ``server``: a parked partition, or an idle one reported busy, is resumed
    first; the values are raised to the partition's resume floor. Returns the entry and ``R``
    when it was resumed."""
    entry = entry or PartitionProgress(None)
    r = None
    if entry.state == PARKED or (entry.state == IDLE and not idle):
        entry, r = resumed(entry, clocks, served_floor)
    floor = entry.floor or 0
    since = entry.since_ms if entry.state == IDLE and idle else (now_ms if idle else None)
    return (
        PartitionProgress(
            owner=server,
            ingested=max(ingested, floor),
            applied=max(applied, floor),
            reported_at_ms=now_ms,
            state=IDLE if idle else ACTIVE,
            since_ms=since,
            floor=entry.floor,
        ),
        r,
    )


def parked(
    entry: PartitionProgress, now_ms: int, clocks: Clocks = NO_CLOCKS
) -> PartitionProgress | None:
    """An idle partition parked by its owner (its progress raised to where its clock had taken
    it, so the parked LWM never starts lower); None when it cannot be parked: it is active
    (something is pending) or was never reported. A parked one stays as it is."""
    if entry.state == PARKED:
        return entry
    if entry.state != IDLE or entry.lwm is None:
        return None
    value = entry.effective(clocks)
    return dataclasses.replace(
        entry,
        ingested=max(entry.ingested, value),  # type: ignore[type-var]
        applied=max(entry.applied, value),  # type: ignore[type-var]
        state=PARKED,
        since_ms=now_ms,
    )


def claimed(
    entry: PartitionProgress | None,
    server: str,
    clocks: Clocks = NO_CLOCKS,
    served_floor: int = 0,
) -> tuple[PartitionProgress, int | None]:
    """``server`` takes the partition (a claim or a handover): resumed, then owned."""
    entry, r = resumed(entry or PartitionProgress(None), clocks, served_floor)
    return dataclasses.replace(entry, owner=server), r


def released(entry: PartitionProgress) -> PartitionProgress:
    """A decommissioned server's partition: unowned and active (it counts no more)."""
    return dataclasses.replace(entry, owner=None, state=ACTIVE, since_ms=None)


__all__ = ["ACTIVE", "IDLE", "PARKED", "claimed", "parked", "released", "reported", "resumed"]
