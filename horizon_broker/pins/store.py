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
:data:`MAX_LEASE_S`), and a renewal indexes them.
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

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

SWEPT_PER_TAKE = 8
"""Expired pins a new pin drops from its tables' expiry indexes (and as many from its owner's):
more than the one it adds, so a flood of short pins never grows the hashes, and a bounded
amount of work per call however many pins expired."""

_OWNED = (
    f"local SWEEP = {SWEPT_PER_TAKE}\n"
    + """
-- A pin's index entry: {"t": tables, "o": owner} (a bare list of tables before owners).
local function pin_info(id)
  local listed = redis.call('HGET', K_PINS, id)
  if not listed then return nil end
  local info = cjson.decode(listed)
  if info.t == nil then
    local owner = ''
    local value = redis.call('HGET', k_pins(info[1]), id)
    if value then owner = string.match(value, '^[^|]*|[^|]*|[^|]*|(.*)$') or '' end
    info = {t = info, o = owner}
  end
  return info
end
-- Forget pin ``id`` everywhere it is stored: its tables' entries and expiry indexes, its owner's
-- index and the pin index. ``t`` / ``o``: an index it was found in (its entry may outlive the
-- pin's record, which the retention script and older versions dropped alone).
local function drop_pin(id, t, o)
  local info = pin_info(id)
  if info then
    for _, u in ipairs(info.t) do
      redis.call('HDEL', k_pins(u), id)
      redis.call('ZREM', k_pinexp(u), id)
    end
    redis.call('ZREM', k_pinowner(info.o), id)
    redis.call('HDEL', K_PINS, id)
  end
  if t then
    redis.call('HDEL', k_pins(t), id)
    redis.call('ZREM', k_pinexp(t), id)
  end
  if o then redis.call('ZREM', k_pinowner(o), id) end
end
-- Drop at most ``budget`` pins whose lease ran out from expiry index ``key`` (soonest first);
-- returns what is left of the budget.
local function sweep(key, budget, t, o)
  if budget <= 0 then return 0 end
  local expired = redis.call('ZRANGEBYSCORE', key, '-inf', string.format('%.0f', now),
                             'LIMIT', 0, budget)
  for _, id in ipairs(expired) do drop_pin(id, t, o) end
  return budget - #expired
end
local function index_pin(id, tables, owner, expires)
  for _, t in ipairs(tables) do redis.call('ZADD', k_pinexp(t), expires, id) end
  redis.call('ZADD', k_pinowner(owner), expires, id)
end
-- The live pins and the lease (ms from now) ``owner`` holds, leaving out pin ``except``, from
-- the owner's own index: the cost is what the owner holds, never every pin. The lease is only
-- summed (``with_lease``) once the count is within the quota, so at most ``max_pins`` entries.
local function holdings(owner, except, with_lease)
  local key = k_pinowner(owner)
  local after = '(' .. string.format('%.0f', now)
  local count = redis.call('ZCOUNT', key, after, '+inf')
  local mine = redis.call('ZSCORE', key, except)
  if mine and tonumber(mine) > now then count = count - 1 end
  local lease = 0
  if with_lease then
    local live = redis.call('ZRANGEBYSCORE', key, after, '+inf', 'WITHSCORES')
    for j = 1, #live, 2 do
      if live[j] ~= except then lease = lease + (tonumber(live[j + 1]) - now) end
    end
  end
  return count, lease
end
local function over_quota(owner, except, lease, max_pins, max_lease)
  if max_pins <= 0 and max_lease <= 0 then return nil end
  local count = holdings(owner, except, false)
  if max_pins > 0 and count + 1 > max_pins then
    return {'ERR', 'RESOURCE_EXHAUSTED', owner .. ' already holds ' .. count ..
            ' live pins, the limit of [reads].max_pins_per_identity (' .. max_pins ..
            '): release one first'}
  end
  if max_lease <= 0 then return nil end
  local _, held = holdings(owner, except, true)
  if held + lease > max_lease then
    return {'ERR', 'RESOURCE_EXHAUSTED', owner .. ' would hold ' ..
            string.format('%.0f', (held + lease) / 1000) .. ' s of pin leases, over ' ..
            '[reads].max_pin_lease_total_s (' .. string.format('%.0f', max_lease / 1000) ..
            ' s): release a pin or ask for a shorter lease'}
  end
  return nil
end
local function not_owner(id, info, owner)
  if info.o ~= owner then
    return {'ERR', 'PERMISSION_DENIED', 'pin ' .. id .. ' was taken by another identity: ' ..
            'only its owner may renew or release it'}
  end
  return nil
end
"""
)

PIN = (
    LUA_KEYS
    + _NOW
    + _OWNED
    + """
-- ARGV[2] pin id, ARGV[3] snapshot, ARGV[4] lease ms, ARGV[5] owner,
-- ARGV[6] max pins of one owner, ARGV[7] max total lease ms of one owner (0: no limit),
-- ARGV[8..] tables
local id, snapshot, lease, owner = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local max_pins, max_lease = tonumber(ARGV[6]), tonumber(ARGV[7])
local tables = {}
for i = 8, #ARGV do
  local t = ARGV[i]
  tables[#tables + 1] = t
  if redis.call('HEXISTS', K_TABLES, t) == 0 then
    return {'ERR', 'NOT_FOUND', 'table ' .. t .. ' is not registered'}
  end
  for _, horizon in ipairs(redis.call('HVALS', k_ret(t))) do
    if pad(horizon) > pad(snapshot) then
      return {'ERR', 'FAILED_PRECONDITION', 'table ' .. t .. ': snapshot ' .. snapshot ..
              ' is below the retention horizon ' .. horizon ..
              ' (history below it is already gone), pin a later snapshot'}
    end
  end
end
-- Taking a pin cleans up after the ones that ran out, a bounded number of them.
local budget = SWEEP
for _, t in ipairs(tables) do budget = sweep(k_pinexp(t), budget, t, nil) end
sweep(k_pinowner(owner), SWEEP, nil, owner)
local refused = over_quota(owner, id, lease, max_pins, max_lease)
if refused then return refused end
if redis.call('HEXISTS', K_PINS, id) == 1 then drop_pin(id) end
local created = string.format('%.0f', now)
local expires = string.format('%.0f', now + lease)
local value = snapshot .. '|' .. created .. '|' .. expires .. '|' .. owner
for _, t in ipairs(tables) do redis.call('HSET', k_pins(t), id, value) end
redis.call('HSET', K_PINS, id, cjson.encode({t = tables, o = owner}))
index_pin(id, tables, owner, expires)
return {'OK', created, expires}
"""
)

RENEW = (
    LUA_KEYS
    + _NOW
    + _OWNED
    + """
-- ARGV[2] pin id, ARGV[3] lease ms, ARGV[4] caller, ARGV[5] max pins, ARGV[6] max lease ms
local id, lease, caller = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local info = pin_info(id)
if not info then
  return {'ERR', 'NOT_FOUND', 'pin ' .. id .. ' does not exist (released, or never taken)'}
end
local refused = not_owner(id, info, caller)
if refused then return refused end
local tables = info.t
local expires = string.format('%.0f', now + lease)
for _, t in ipairs(tables) do
  local value = redis.call('HGET', k_pins(t), id)
  if not value then
    drop_pin(id)
    return {'ERR', 'NOT_FOUND', 'pin ' .. id .. ' expired: it no longer holds table ' .. t}
  end
  local _, _, old_expires = string.match(value, '^([^|]*)|([^|]*)|([^|]*)|(.*)$')
  if tonumber(old_expires) <= now then
    drop_pin(id)
    return {'ERR', 'NOT_FOUND', 'pin ' .. id .. ' expired before it was renewed'}
  end
end
refused = over_quota(caller, id, lease, 0, tonumber(ARGV[6]))
if refused then return refused end
for _, t in ipairs(tables) do
  local value = redis.call('HGET', k_pins(t), id)
  local snapshot, created, _, owner = string.match(value, '^([^|]*)|([^|]*)|([^|]*)|(.*)$')
  redis.call('HSET', k_pins(t), id, snapshot .. '|' .. created .. '|' .. expires .. '|' .. owner)
end
index_pin(id, tables, info.o, expires)
return {'OK', expires}
"""
)

RELEASE = (
    LUA_KEYS
    + _OWNED
    + """
-- ARGV[2] pin id, ARGV[3] caller
local info = pin_info(ARGV[2])
if not info then return {'OK', '0'} end
local refused = not_owner(ARGV[2], info, ARGV[3])
if refused then return refused end
drop_pin(ARGV[2])
return {'OK', '1'}
"""
)

LIST = (
    LUA_KEYS
    + _NOW
    + _OWNED
    + """
-- ARGV[2..] tables: every pin entry of them, expired ones dropped, and Redis's clock
local out = {'OK', string.format('%.0f', now)}
for i = 2, #ARGV do
  local t = ARGV[i]
  local entries = redis.call('HGETALL', k_pins(t))
  for j = 1, #entries, 2 do
    local expires = string.match(entries[j + 1], '^[^|]*|[^|]*|([^|]*)|')
    if tonumber(expires) <= now then
      drop_pin(entries[j], t, nil)
    else
      out[#out + 1] = t
      out[#out + 1] = entries[j]
      out[#out + 1] = entries[j + 1]
    end
  end
end
return out
"""
)


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
