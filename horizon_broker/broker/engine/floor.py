"""The broker's floor: the highest default snapshot served per table, kept in the state store.

Within one process the served LWM never decreases (``horizon_broker.watermark.lwm.MonotonicLwm``). Across a
restart that memory is gone, so every default snapshot served is first recorded here (one Redis
round trip, only when it moved up) and a restarted broker reads the floor back: a default read
below it waits for the LWM to reach it, as for read-your-writes, or fails naming what holds it back.
The hash is shared by every broker of a prefix, so a new broker starts from the highest any served.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

import redis

from horizon_broker._core.keys import LUA_KEYS, padded_hlc
from horizon_broker._core.lua import lua_file
from horizon_broker._core.redis_calls import TRANSIENT
from horizon_broker._core.redis_sentinel import STATS

log = logging.getLogger("horizon.broker.floor")

RAISE = LUA_KEYS + lua_file(__package__, "raise")
"""Raise each table's stored floor to a snapshot, never lower it (``lua/raise.lua``)."""


class SnapshotFloor:
    """The persisted floor of one broker (thread-safe). ``client`` None keeps it in memory only."""

    def __init__(self, client: redis.Redis | None, *, prefix: str) -> None:
        self._redis = client
        self._prefix = prefix
        self._lock = threading.Lock()
        self._loaded: dict[str, int] | None = None if client is not None else {}
        self._stored: dict[str, int] = {}
        self._raise = client.register_script(RAISE) if client is not None else None
        self._generation = STATS.primary_changes

    def floor(self) -> Mapping[str, int]:
        """``{table (lowercase): snapshot}`` read back from the store (once, at the first call
        that reaches it); empty while it cannot be read."""
        with self._lock:
            if self._loaded is None:
                try:
                    raw = self._redis.hgetall(f"{self._prefix}:floor")  # type: ignore[union-attr]
                except TRANSIENT as error:
                    log.warning("cannot read the served-snapshot floor yet: %s", error)
                    return {}
                self._loaded = {k.decode(): int(v) for k, v in raw.items()}
                self._stored = dict(self._loaded)
            return self._loaded

    def record(self, served: Mapping[str, int]) -> None:
        """Remember that ``served`` (``{table: snapshot}``) was handed out."""
        with self._lock:
            self._forget_if_primary_changed()
            moved = {t.lower(): s for t, s in served.items() if s > self._stored.get(t.lower(), -1)}
            if not moved:
                return
            if self._raise is not None:
                args: list[Any] = [self._prefix]
                for table, snapshot in sorted(moved.items()):
                    padded_hlc(snapshot)  # a valid HLC, or InvalidArgument
                    args += [table, str(snapshot)]
                try:
                    self._raise(args=args)
                except TRANSIENT as error:
                    # The follower cannot move the LWM either while Redis is away; the next
                    # query after it is back records the floor.
                    log.warning("could not record the served-snapshot floor: %s", error)
                    return
            if self._forget_if_primary_changed():
                self._stored = dict(moved)  # written to the new primary: all it surely has
                return
            self._stored.update(moved)

    def _forget_if_primary_changed(self) -> bool:
        """After a change of primary the store may have lost floors we wrote: forget what we
        believed stored, so each table's is written again when next served (rule F7 of
        ``docs/design/contract/failover.md``)."""
        if self._redis is None:
            return False
        generation = STATS.primary_changes  # any client of this process (the follower's)
        if generation == self._generation:
            return False
        self._generation = generation
        self._stored.clear()
        return True
