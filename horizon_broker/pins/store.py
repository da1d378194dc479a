"""Snapshot pins in Redis: take, renew, release and list, each one atomic script.

A pin is one entry per table in ``{p}:t:{table}:pins`` (``snapshot|created|expires|owner``, the
form the retention script reads) plus its table list in ``{p}:pins``. Taking a pin checks, in the
same step, that the snapshot is not below any table's retention horizon: from then on the
retention script caps every horizon by it, so the two can never cross. Times are Redis's clock.

Two expiry indexes keep a pin's cost to what its owner holds: ``{p}:t:{table}:pinexp`` (each new
pin drops a few expired pins of its tables, so short pins never pile up) and
``{p}:pinowner:{owner}`` (the quotas count and sum the owner's live pins there, never a scan of
every pin). Pins taken before the indexes existed are still listed, honoured and dropped once
expired; they are not counted in their owner's quotas (their lease is at most
:data:`MAX_LEASE_S`), and a renewal indexes them. Each script's Lua is in ``lua/<name>.lua``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from horizon_broker._core.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
)
from horizon_broker._core.keys import DEFAULT_PREFIX, LUA_KEYS, Keys, padded_hlc
from horizon_broker._core.lua import lua_constants, lua_file
from horizon_broker._core.redis_calls import ScriptClient
from horizon_broker.pins.rules import Pin

MAX_LEASE_S = 7 * 86400.0
"""The longest lease one call may ask for (renew to hold longer)."""
MAX_TABLES = 100
_ERRORS: dict[str, type[Exception]] = {
    "FAILED_PRECONDITION": FailedPrecondition,
    "NOT_FOUND": NotFound,
    "PERMISSION_DENIED": PermissionDenied,
    "RESOURCE_EXHAUSTED": ResourceExhausted,
}

_NOW = lua_file(__package__, "now")
"""``now``: Redis's clock in ms."""

SWEPT_PER_TAKE = 8
"""Expired pins a new pin drops from its tables' expiry indexes (and as many from its owner's):
more than the one it adds, so a flood of short pins never grows the hashes, and a bounded
amount of work per call however many pins expired."""

_OWNED = lua_constants(SWEEP=SWEPT_PER_TAKE) + lua_file(__package__, "owned")
"""The pin index helpers every script uses: ``pin_info``, ``drop_pin``, ``sweep``, the quotas."""

PIN = LUA_KEYS + _NOW + _OWNED + lua_file(__package__, "pin")
RENEW = LUA_KEYS + _NOW + _OWNED + lua_file(__package__, "renew")
RELEASE = LUA_KEYS + _OWNED + lua_file(__package__, "release")
LIST = LUA_KEYS + _NOW + _OWNED + lua_file(__package__, "list")


@dataclass(frozen=True, slots=True)
class PinQuota:
    """What one identity may hold at once: live pins, and their leases summed (from now)."""

    max_pins: int = 16
    max_lease_total_s: float = 2 * 86_400.0
    min_lease_s: float = 1.0
    """A shorter lease is refused: a pin's cost in Redis must outlast the call that takes it."""


def new_pin_id() -> str:
    return "pin-" + uuid.uuid4().hex[:16]


class PinStore:
    """Pin calls against one Redis (one key prefix)."""

    def __init__(
        self,
        redis_: str | redis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        retry_timeout_s: float = 2.0,
        quota: PinQuota | None = None,
    ) -> None:
        """``quota``: what one owner may hold (None: no limit, for jobs and tests)."""
        self.quota = quota
        self._keys = Keys(prefix)
        self._scripts = ScriptClient(
            redis_,
            {"PIN": PIN, "RENEW": RENEW, "RELEASE": RELEASE, "LIST": LIST},
            prefix=self._keys.prefix,
            retry_timeout_s=retry_timeout_s,
            unreachable="the pin store (Redis) is unreachable",
            acknowledged=frozenset({"PIN"}),
        )

    def pin(
        self,
        tables: Sequence[str],
        snapshot: int,
        *,
        lease_s: float,
        owner: str = "",
        pin_id: str | None = None,
    ) -> Pin:
        """Pin ``snapshot`` of every table in ``tables`` for ``lease_s`` seconds."""
        tables = tuple(dict.fromkeys(tables))
        if not tables:
            raise InvalidArgument("a pin needs at least one table")
        if len(tables) > MAX_TABLES:
            raise InvalidArgument(f"a pin holds at most {MAX_TABLES} tables, {len(tables)} asked")
        lease_ms = self._lease_ms(lease_s)
        padded_hlc(snapshot)
        pin_id = pin_id or new_pin_id()
        owner = _owner(owner)
        reply = self._call(
            "PIN", [pin_id, str(snapshot), str(lease_ms), owner, *self._quota_args(), *tables]
        )
        return Pin(pin_id, tables, snapshot, int(reply[0]), int(reply[1]), owner)

    def renew(self, pin_id: str, *, lease_s: float, owner: str = "") -> int:
        """Extend a live pin's lease to ``lease_s`` from now; returns its new expiry (epoch ms).
        Only the pin's ``owner`` may (PERMISSION_DENIED otherwise)."""
        lease_ms = self._lease_ms(lease_s)
        reply = self._call(
            "RENEW", [check_pin_id(pin_id), str(lease_ms), _owner(owner), *self._quota_args()]
        )
        return int(reply[0])

    def release(self, pin_id: str, *, owner: str = "") -> bool:
        """Stop holding anything back for ``pin_id``; False when it was already gone. Only the
        pin's ``owner`` may (PERMISSION_DENIED otherwise)."""
        return self._call("RELEASE", [check_pin_id(pin_id), _owner(owner)])[0] == "1"

    def _lease_ms(self, lease_s: float) -> int:
        """``lease_s`` in ms, INVALID_ARGUMENT outside (0 or the quota's minimum, MAX_LEASE_S]."""
        lease_ms = _lease_ms(lease_s)
        if self.quota is not None and lease_s < self.quota.min_lease_s:
            raise InvalidArgument(
                f"a pin's lease must be at least {self.quota.min_lease_s:g} seconds "
                f"([reads].min_pin_lease_s), {lease_s!r} asked"
            )
        return lease_ms

    def _quota_args(self) -> list[str]:
        if self.quota is None:
            return ["0", "0"]
        return [str(self.quota.max_pins), str(int(self.quota.max_lease_total_s * 1000))]

    def pin_tables(self, pin_id: str) -> list[str]:
        """The tables ``pin_id`` holds (empty: no such pin, or it was released)."""
        listed = self._scripts.retrying(
            lambda: self._scripts.redis.hget(self._keys.pin_index, check_pin_id(pin_id))
        )
        if not listed:
            return []
        info = json.loads(listed)
        return list(info["t"] if isinstance(info, dict) else info)

    def listing(self, tables: Iterable[str]) -> tuple[int, list[Pin]]:
        """Redis's clock and the live pins of ``tables`` (one entry per pin)."""
        tables = list(dict.fromkeys(tables))
        if not tables:
            return int(time.time() * 1000), []
        reply = self._call("LIST", tables)
        now_ms = int(reply[0])
        found: dict[str, Pin] = {}
        for i in range(1, len(reply), 3):
            table, pin_id, value = reply[i], reply[i + 1], reply[i + 2]
            snapshot, created, expires, owner = value.split("|", 3)
            known = found.get(pin_id)
            held = (*known.tables, table) if known else (table,)
            found[pin_id] = Pin(pin_id, held, int(snapshot), int(created), int(expires), owner)
        return now_ms, sorted(found.values(), key=lambda pin: (pin.snapshot, pin.pin_id))

    def close(self) -> None:
        self._scripts.close()

    def _call(self, name: str, args: list[str]) -> list[Any]:
        reply = self._scripts.call(name, args)
        if reply[0] == "ERR":
            raise _ERRORS.get(reply[1], FailedPrecondition)(reply[2])
        return reply[1:]


def _owner(owner: str) -> str:
    return owner.replace("|", "/")[:200]


def _lease_ms(lease_s: float) -> int:
    if not isinstance(lease_s, (int, float)) or not 0 < lease_s <= MAX_LEASE_S:
        raise InvalidArgument(
            f"a pin's lease must be more than 0 and at most {MAX_LEASE_S:.0f} seconds, "
            f"{lease_s!r} asked"
        )
    return max(1, int(lease_s * 1000))


def check_pin_id(pin_id: str) -> str:
    """``pin_id`` if it can name a pin, else INVALID_ARGUMENT."""
    if not isinstance(pin_id, str) or not pin_id or len(pin_id) > 64 or "|" in pin_id:
        raise InvalidArgument(f"{pin_id!r} is not a pin id")
    return pin_id


def pinned_releases(client: Any, table: str, grace_ms: int) -> Callable[[int], bool]:
    """For a garbage collector: whether a live pin of ``table`` holds the files released at a
    given time (:func:`horizon_broker.pins.rules.holds_release`), as of one read of the pins now. ``client`` is
    a :class:`horizon_broker.watermark.server.ServerClient` (its connection and key prefix are used)."""
    from horizon_broker.pins.rules import holds_release

    now_ms, pins = PinStore(client.redis, prefix=client.prefix).listing([table])
    return lambda released_ms: holds_release(pins, table, released_ms, grace_ms, now_ms)
