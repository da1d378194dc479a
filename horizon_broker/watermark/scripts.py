"""The Lua scripts that make every server call one atomic step in Redis.

Each script checks the caller's epoch (``ARGV[2]``), changes the state and appends its event to the
log stream in the same step, so the log order is the order in which calls took effect. Replies are
arrays: ``{'OK', ...}``, ``{'EPOCH', current}`` (the data set changed: re-publish first) or
``{'ERR', code, message}``. HLCs stay strings (they do not fit a Lua double). Every event carries
the state store's clock (``NOW``, see :mod:`horizon_broker.watermark.partition_lua`); events that change
partitions carry their resulting progress, so a follower never recomputes what a script decided.
"""

from __future__ import annotations

from horizon_broker._core.keys import LUA_KEYS
from horizon_broker.locks.scripts import LOCK_LUA, PUBLISH_GUARD
from horizon_broker.watermark.partition_lua import PARTITION_LUA, STORE_CLOCK_LUA, TABLE_LWM_LUA

LOG_MAXLEN = 100_000
"""Approximate length the log stream is trimmed to; a follower further behind does a full sync."""

_COMMON = (
    LUA_KEYS
    + STORE_CLOCK_LUA
    + PARTITION_LUA
    + """
local EPOCH = ARGV[2]
local SERVER = ARGV[3]
local NOW = store_now()
local function now_ms()
  return NOW
end
local function emit(kind, data)
  local seq = redis.call('INCR', K_SEQ)
  redis.call('SET', K_CLOCK, NOW)
  redis.call('XADD', K_LOG, 'MAXLEN', '~', '"""
    + str(LOG_MAXLEN)
    + """', tostring(seq) .. '-0',
             'k', kind, 'd', data, 't', NOW, 'e', EPOCH, 's', SERVER)
  return seq
end
local function split(s)
  local out = {}
  for piece in string.gmatch(s .. '|', '([^|]*)|') do out[#out + 1] = piece end
  return out
end
if redis.call('GET', K_EPOCH) ~= EPOCH then
  return {'EPOCH', redis.call('GET', K_EPOCH) or ''}
end
"""
)


def _script(body: str) -> str:
    return _COMMON + body


ADOPT_EPOCH = (
    LUA_KEYS
    + """
redis.call('SET', K_EPOCH, ARGV[2], 'NX')
return {'OK', redis.call('GET', K_EPOCH)}
"""
)
"""Create the epoch if the data set has none (ARGV[2] is a fresh candidate) and return it."""

REGISTER = _script(
    """
redis.call('HSET', K_SERVERS, SERVER, 'live')
redis.call('HSET', K_HB, SERVER, now_ms())
emit('register', ARGV[4])
return {'OK'}
"""
)

HEARTBEAT = _script(
    """
-- ARGV[4] the server's clock (an HLC; '' = none): the LWM of its idle partitions
local status = redis.call('HGET', K_SERVERS, SERVER)
if status == 'decommissioned' or status == 'parked' then
  return {'ERR', 'FAILED_PRECONDITION', 'server ' .. SERVER .. ' is ' .. status ..
          ': register it again'}
end
if not status then
  return {'ERR', 'FAILED_PRECONDITION', 'server ' .. SERVER .. ' is not registered'}
end
redis.call('HSET', K_HB, SERVER, now_ms())
local event = {}
if ARGV[4] ~= '' then
  local clock = hlc_max(redis.call('HGET', K_HBCLOCK, SERVER) or '', ARGV[4])
  redis.call('HSET', K_HBCLOCK, SERVER, clock)
  event['clock'] = clock
end
emit('heartbeat', cjson.encode(event))
return {'OK'}
"""
)

REGISTER_TABLE = _script(
    """
-- ARGV[4] table, ARGV[5] descriptor JSON
local existing = redis.call('HGET', K_TABLES, ARGV[4])
if existing then return {'OK', 'EXISTS', existing} end
redis.call('HSET', K_TABLES, ARGV[4], ARGV[5])
emit('table', ARGV[5])
return {'OK'}
"""
)

SEGMENTS = _script(
    LOCK_LUA
    + PUBLISH_GUARD
    + """
-- ARGV[4] event JSON, ARGV[5] number of adds, ARGV[6] publish guard JSON ('' = none; see
-- horizon_broker.locks.scripts.PUBLISH_GUARD); adds: table, key, json, chunk key, partition, base, interval key,
-- version, first-generation chunk key, root end; then removes: table, key
local STRIDE = 10
local n_add = tonumber(ARGV[5])
local i = 7
for _ = 1, n_add do
  if redis.call('HEXISTS', K_TABLES, ARGV[i]) == 0 then
    return {'ERR', 'FAILED_PRECONDITION', 'table ' .. ARGV[i] .. ' is not registered'}
  end
  i = i + STRIDE
end
if ARGV[6] ~= '' then
  i = 7
  for _ = 1, n_add do
    local major = redis.call('HGET', k_majors(ARGV[i]), ARGV[i + 6])
    if major and major > ARGV[i + 7] then
      return {'ERR', 'SUPERSEDED', 'cannot publish version ' .. ARGV[i + 7] .. ' of time chunk ' ..
              ARGV[i + 6] .. ' of table ' .. ARGV[i] .. ': a major compaction replaced the chunk ' ..
              'with version ' .. major .. ' meanwhile; the batch must be written again'}
    end
    i = i + STRIDE
  end
end
local refused = check_guard(ARGV[6])
if refused then return refused end
i = 7
for _ = 1, n_add do
  local t, partition = ARGV[i], tonumber(ARGV[i + 4])
  redis.call('HSET', k_segs(t), ARGV[i + 1], ARGV[i + 2])
  local next_free = tonumber(redis.call('HGET', k_alloc(t), ARGV[i + 3]) or ARGV[i + 5])
  if partition >= next_free then redis.call('HSET', k_alloc(t), ARGV[i + 3], partition + 1) end
  -- Appends after a major compaction number their root partitions past its root ranges.
  local root_end = tonumber(ARGV[i + 9])
  local first_free = tonumber(redis.call('HGET', k_alloc(t), ARGV[i + 8]) or '0')
  if root_end > first_free then redis.call('HSET', k_alloc(t), ARGV[i + 8], root_end) end
  local major = redis.call('HGET', k_majors(t), ARGV[i + 6])
  if not major or ARGV[i + 7] > major then redis.call('HSET', k_majors(t), ARGV[i + 6], ARGV[i + 7]) end
  i = i + STRIDE
end
while i < #ARGV do
  redis.call('HDEL', k_segs(ARGV[i]), ARGV[i + 1])
  i = i + 2
end
emit('segments', ARGV[4])
return {'OK'}
"""
)

REPORT = _script(
    """
-- ARGV[4] table, then per partition: partition, ingested, applied, idle ('1' or '').
-- A parked partition, or an idle one reported busy, is resumed first (its floor is the reply:
-- the server's clock must move above it); values are raised to the partition's floor.
local t = ARGV[4]
if redis.call('HEXISTS', K_TABLES, t) == 0 then
  return {'ERR', 'FAILED_PRECONDITION', 'table ' .. t .. ' is not registered'}
end
local i = 5
while i <= #ARGV do
  local owner = entry_of(redis.call('HGET', k_prog(t), ARGV[i]))[1]
  if owner ~= '' and owner ~= SERVER then
    return {'ERR', 'FAILED_PRECONDITION', 'partition ' .. ARGV[i] .. ' of table ' .. t ..
            ' is owned by server ' .. owner .. ', not ' .. SERVER}
  end
  i = i + 4
end
local progress, idle, top = {}, {}, ''
i = 5
while i <= #ARGV do
  local p, quiet = ARGV[i], ARGV[i + 3] == '1'
  local f = entry_of(redis.call('HGET', k_prog(t), p))
  local was, since = f[6], ''
  if was == 'parked' or (was == 'idle' and not quiet) then top = hlc_max(top, resume(t, f, NOW)) end
  if quiet then
    since = NOW
    if was == 'idle' then since = f[7] end
    idle[#idle + 1] = p
  end
  f[1] = SERVER
  f[2] = hlc_max(ARGV[i + 1], f[8])
  f[3] = hlc_max(ARGV[i + 2], f[8])
  f[4] = NOW
  f[6] = quiet and 'idle' or ''
  f[7] = since
  store_entry(t, p, f)
  progress[p] = {f[2], f[3]}
  i = i + 4
end
emit('report', cjson.encode({table = t, progress = progress, idle = idle}))
return {'OK', top}
"""
)

PARK = _script(
    """
-- ARGV[4] '1' when the server stops (it is parked, no longer live), then pairs: table, partition.
-- Each idle partition of this server is parked (its LWM follows the store's clock from now on);
-- the reply names the pairs that could not be (not idle: something is pending, or not ours).
local stops = ARGV[4] == '1'
local tables, skipped = {}, {}
local i = 5
while i <= #ARGV do
  local t, p = ARGV[i], ARGV[i + 1]
  local f = entry_of(redis.call('HGET', k_prog(t), p))
  if f[1] == SERVER and (f[6] == 'idle' or f[6] == 'parked') and static_lwm(f) ~= '' then
    if f[6] == 'idle' then
      local value = effective(f, NOW)
      f[2] = hlc_max(f[2], value)
      f[3] = hlc_max(f[3], value)
      f[6] = 'parked'
      f[7] = NOW
      store_entry(t, p, f)
    end
    tables[t] = tables[t] or {}
    tables[t][p] = {f[2], f[3], f[7]}
  else
    skipped[#skipped + 1] = t
    skipped[#skipped + 1] = p
  end
  i = i + 2
end
if stops then redis.call('HSET', K_SERVERS, SERVER, 'parked') end
emit('park', cjson.encode({tables = tables, stops = stops}))
return {'OK', skipped}
"""
)

RETENTION = _script(
    """
-- ARGV[4] table, ARGV[5] horizon, ARGV[6] event JSON (its "horizon" is replaced by the one stored)
-- The horizon stored is the one asked for, capped by the oldest live snapshot pin of the table
-- (horizon_broker.pins.rules.capped_horizon), never below this server's previous one.
local t = ARGV[4]
if redis.call('HEXISTS', K_TABLES, t) == 0 then
  return {'ERR', 'FAILED_PRECONDITION', 'table ' .. t .. ' is not registered'}
end
local horizon = ARGV[5]
local now = tonumber(now_ms())
local pins = redis.call('HGETALL', k_pins(t))
for i = 1, #pins, 2 do
  local snapshot, _, expires = string.match(pins[i + 1], '^([^|]*)|([^|]*)|([^|]*)|')
  if tonumber(expires) <= now then
    redis.call('HDEL', k_pins(t), pins[i])
  elseif pad(snapshot) < pad(horizon) then
    horizon = snapshot
  end
end
local previous = redis.call('HGET', k_ret(t), SERVER)
if previous and pad(previous) > pad(horizon) then
  horizon = previous
end
redis.call('HSET', k_ret(t), SERVER, horizon)
local event = cjson.decode(ARGV[6])
event['horizon'] = horizon
emit('retention', cjson.encode(event))
return {'OK', horizon}
"""
)

ALLOCATE = _script(
    """
-- ARGV[4] table, ARGV[5] chunk key, ARGV[6] count, ARGV[7] first number, ARGV[8] limit
local t, count, limit = ARGV[4], tonumber(ARGV[6]), tonumber(ARGV[8])
local next_free = tonumber(redis.call('HGET', k_alloc(t), ARGV[5]) or ARGV[7])
if next_free + count > limit then
  return {'ERR', 'RESOURCE_EXHAUSTED', 'only ' .. (limit - next_free) ..
          ' partition numbers are left for that time chunk and version, ' .. count .. ' asked'}
end
redis.call('HSET', k_alloc(t), ARGV[5], next_free + count)
return {'OK', next_free}
"""
)

RESERVE = _script(
    """
-- ARGV[4] table, ARGV[5] chunk key, ARGV[6] next free number this server knows of
local current = tonumber(redis.call('HGET', k_alloc(ARGV[4]), ARGV[5]) or '0')
if tonumber(ARGV[6]) > current then redis.call('HSET', k_alloc(ARGV[4]), ARGV[5], ARGV[6]) end
return {'OK'}
"""
)

CLAIM = _script(
    """
-- ARGV[4] table, ARGV[5] heartbeat timeout ms, then partitions. Idle or parked ones are resumed
-- (the reply is the highest floor: the claimer's clock must move above it).
local t, timeout = ARGV[4], tonumber(ARGV[5])
if redis.call('HEXISTS', K_TABLES, t) == 0 then
  return {'ERR', 'FAILED_PRECONDITION', 'table ' .. t .. ' is not registered'}
end
local now = tonumber(NOW)
for i = 6, #ARGV do
  local owner = entry_of(redis.call('HGET', k_prog(t), ARGV[i]))[1]
  if owner ~= '' and owner ~= SERVER then
    local hb = tonumber(redis.call('HGET', K_HB, owner) or '-1')
    local live = redis.call('HGET', K_SERVERS, owner) == 'live' and hb >= 0 and now - hb <= timeout
    if live then
      return {'ERR', 'FAILED_PRECONDITION', 'partition ' .. ARGV[i] .. ' of table ' .. t ..
              ' is owned by live server ' .. owner .. '; it must hand it over'}
    end
  end
end
local partitions, progress, top = {}, {}, ''
for i = 6, #ARGV do
  local p = ARGV[i]
  local f = entry_of(redis.call('HGET', k_prog(t), p))
  local r = resume(t, f, NOW)
  top = hlc_max(top, r)
  f[1] = SERVER
  store_entry(t, p, f)
  partitions[#partitions + 1] = tonumber(p)
  if f[2] ~= '' and f[3] ~= '' then progress[p] = {f[2], f[3]} end
end
emit('claim', cjson.encode({table = t, partitions = partitions, progress = progress}))
return {'OK', top}
"""
)

HAND_OVER = _script(
    """
-- ARGV[4] table, ARGV[5] partition, ARGV[6] receiving server (an idle partition is resumed)
local t, p = ARGV[4], ARGV[5]
local f = entry_of(redis.call('HGET', k_prog(t), p))
if f[1] == ARGV[6] then return {'OK', 'ALREADY'} end
if f[1] ~= SERVER then
  local owner = f[1] == '' and 'nobody' or ('server ' .. f[1])
  return {'ERR', 'FAILED_PRECONDITION', 'partition ' .. p .. ' of table ' .. t ..
          ' is owned by ' .. owner .. ', not ' .. SERVER .. ': cannot hand it over'}
end
resume(t, f, NOW)
f[1] = ARGV[6]
store_entry(t, p, f)
local event = {table = t, partition = tonumber(p), to = ARGV[6], progress = {}}
if f[2] ~= '' and f[3] ~= '' then event['progress'][p] = {f[2], f[3]} end
emit('handover', cjson.encode(event))
return {'OK'}
"""
)

DECOMMISSION = _script(
    """
-- The reply lists what was released (table, partition pairs)
local released = {}
for _, t in ipairs(redis.call('HKEYS', K_TABLES)) do
  local entries = redis.call('HGETALL', k_prog(t))
  for j = 1, #entries, 2 do
    local f = entry_of(entries[j + 1])
    if f[1] == SERVER then
      f[1] = ''
      f[6] = ''
      f[7] = ''
      store_entry(t, entries[j], f)
      released[#released + 1] = t
      released[#released + 1] = entries[j]
    end
  end
end
redis.call('HSET', K_SERVERS, SERVER, 'decommissioned')
redis.call('HDEL', K_HB, SERVER)
emit('decommission', '{}')
return {'OK', released}
"""
)

SNAPSHOT = (
    LUA_KEYS
    + STORE_CLOCK_LUA
    + """
-- The whole state and the log position it corresponds to, in one atomic read.
local ms = store_now()
local tables = redis.call('HGETALL', K_TABLES)
local per_table = {}
for i = 1, #tables, 2 do
  local name = tables[i]
  per_table[#per_table + 1] = {name, redis.call('HVALS', k_segs(name)),
                               redis.call('HGETALL', k_prog(name)),
                               redis.call('HGETALL', k_ret(name))}
end
return {redis.call('GET', K_EPOCH) or '', redis.call('GET', K_SEQ) or '0', ms, tables,
        redis.call('HGETALL', K_SERVERS), redis.call('HGETALL', K_HB), per_table,
        redis.call('HGETALL', K_HBCLOCK)}
"""
)

CLOCK = (
    LUA_KEYS
    + STORE_CLOCK_LUA
    + """
-- The store's clock with the log position it goes with: a follower that has applied every event
-- up to that position may let parked partitions follow the clock up to it.
return {redis.call('GET', K_EPOCH) or '', redis.call('GET', K_SEQ) or '0', store_now()}
"""
)

READ_TABLE_LWM = (
    LUA_KEYS
    + STORE_CLOCK_LUA
    + PARTITION_LUA
    + TABLE_LWM_LUA
    + """
-- ARGV[2] table. One round trip: the table's LWM (quiet partitions at their clocks), the
-- partition holding it, its owner, how many partitions count and its state; or, while an owned
-- partition has not reported, 'PENDING' and the lowest such partition.
local t = ARGV[2]
local pending = redis.call('SMEMBERS', k_pending(t))
local count = redis.call('ZCARD', k_lwm(t)) + redis.call('ZCARD', k_quiet(t))
if #pending > 0 then
  local lowest = tonumber(pending[1])
  for _, p in ipairs(pending) do lowest = math.min(lowest, tonumber(p)) end
  local entry = redis.call('HGET', k_prog(t), tostring(lowest)) or ''
  return {'PENDING', tostring(lowest), string.match(entry, '^([^|]*)|') or '', count, 'active'}
end
local found = table_lwm(t, store_now())
if found == nil then return {} end
return {found[1], found[2], found[3], count, found[4]}
"""
)
