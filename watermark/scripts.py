"""The Lua scripts that make every server call one atomic step in Redis.

Each script checks the caller's epoch (``ARGV[2]``), changes the state and appends its event to the
log stream in the same step, so the log order is the order in which calls took effect. Replies are
arrays: ``{'OK', ...}``, ``{'EPOCH', current}`` (the data set changed: re-publish first) or
``{'ERR', code, message}``. HLCs stay strings (they do not fit a Lua double).
"""

from __future__ import annotations

from locks.scripts import LOCK_LUA, PUBLISH_GUARD
from watermark.keys import LUA_KEYS

LOG_MAXLEN = 100_000
"""Approximate length the log stream is trimmed to; a follower further behind does a full sync."""

_COMMON = (
    LUA_KEYS
    + """
local EPOCH = ARGV[2]
local SERVER = ARGV[3]
local function now_ms()
  local t = redis.call('TIME')
  return string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
end
local function emit(kind, data)
  local seq = redis.call('INCR', K_SEQ)
  local ms = now_ms()
  redis.call('XADD', K_LOG, 'MAXLEN', '~', '"""
    + str(LOG_MAXLEN)
    + """', tostring(seq) .. '-0',
             'k', kind, 'd', data, 't', ms, 'e', EPOCH, 's', SERVER)
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
local status = redis.call('HGET', K_SERVERS, SERVER)
if status == 'decommissioned' then
  return {'ERR', 'FAILED_PRECONDITION', 'server ' .. SERVER .. ' is decommissioned'}
end
if not status then
  return {'ERR', 'FAILED_PRECONDITION', 'server ' .. SERVER .. ' is not registered'}
end
redis.call('HSET', K_HB, SERVER, now_ms())
emit('heartbeat', ARGV[4])
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
-- locks.scripts.PUBLISH_GUARD); adds: table, key, json, chunk key, partition, base, interval key,
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
-- ARGV[4] table, ARGV[5] event JSON, then per partition: partition, ingested, applied, lwm member
local t = ARGV[4]
if redis.call('HEXISTS', K_TABLES, t) == 0 then
  return {'ERR', 'FAILED_PRECONDITION', 'table ' .. t .. ' is not registered'}
end
local i = 6
while i <= #ARGV do
  local old = redis.call('HGET', k_prog(t), ARGV[i])
  if old then
    local owner = split(old)[1]
    if owner ~= '' and owner ~= SERVER then
      return {'ERR', 'FAILED_PRECONDITION', 'partition ' .. ARGV[i] .. ' of table ' .. t ..
              ' is owned by server ' .. owner .. ', not ' .. SERVER}
    end
  end
  i = i + 4
end
local ms = now_ms()
i = 6
while i <= #ARGV do
  local old = redis.call('HGET', k_prog(t), ARGV[i])
  if old then
    local member = split(old)[5]
    if member ~= '' then redis.call('ZREM', k_lwm(t), member) end
  end
  redis.call('HSET', k_prog(t), ARGV[i],
             SERVER .. '|' .. ARGV[i + 1] .. '|' .. ARGV[i + 2] .. '|' .. ms .. '|' .. ARGV[i + 3])
  redis.call('ZADD', k_lwm(t), 0, ARGV[i + 3])
  redis.call('SREM', k_pending(t), ARGV[i])
  i = i + 4
end
emit('report', ARGV[5])
return {'OK'}
"""
)

RETENTION = _script(
    """
-- ARGV[4] table, ARGV[5] horizon, ARGV[6] event JSON (its "horizon" is replaced by the one stored)
-- The horizon stored is the one asked for, capped by the oldest live snapshot pin of the table
-- (pins.rules.capped_horizon), never below this server's previous one.
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
-- ARGV[4] table, ARGV[5] heartbeat timeout ms, ARGV[6] event JSON, then partitions
local t, timeout = ARGV[4], tonumber(ARGV[5])
if redis.call('HEXISTS', K_TABLES, t) == 0 then
  return {'ERR', 'FAILED_PRECONDITION', 'table ' .. t .. ' is not registered'}
end
local now = tonumber(now_ms())
for i = 7, #ARGV do
  local old = redis.call('HGET', k_prog(t), ARGV[i])
  if old then
    local owner = split(old)[1]
    if owner ~= '' and owner ~= SERVER then
      local hb = tonumber(redis.call('HGET', K_HB, owner) or '-1')
      local live = redis.call('HGET', K_SERVERS, owner) == 'live' and hb >= 0 and now - hb <= timeout
      if live then
        return {'ERR', 'FAILED_PRECONDITION', 'partition ' .. ARGV[i] .. ' of table ' .. t ..
                ' is owned by live server ' .. owner .. '; it must hand it over'}
      end
    end
  end
end
for i = 7, #ARGV do
  local old = redis.call('HGET', k_prog(t), ARGV[i])
  local fields = split(old or '||||')
  if fields[1] ~= SERVER then
    fields[1] = SERVER
    if fields[5] ~= '' then
      redis.call('ZADD', k_lwm(t), 0, fields[5])
    else
      redis.call('SADD', k_pending(t), ARGV[i])
    end
    redis.call('HSET', k_prog(t), ARGV[i], table.concat(fields, '|'))
  end
end
emit('claim', ARGV[6])
return {'OK'}
"""
)

HAND_OVER = _script(
    """
-- ARGV[4] table, ARGV[5] partition, ARGV[6] receiving server, ARGV[7] event JSON
local t = ARGV[4]
local old = redis.call('HGET', k_prog(t), ARGV[5])
local fields = split(old or '||||')
if fields[1] == ARGV[6] then return {'OK', 'ALREADY'} end
if fields[1] ~= SERVER then
  local owner = fields[1] == '' and 'nobody' or ('server ' .. fields[1])
  return {'ERR', 'FAILED_PRECONDITION', 'partition ' .. ARGV[5] .. ' of table ' .. t ..
          ' is owned by ' .. owner .. ', not ' .. SERVER .. ': cannot hand it over'}
end
fields[1] = ARGV[6]
redis.call('HSET', k_prog(t), ARGV[5], table.concat(fields, '|'))
emit('handover', ARGV[7])
return {'OK'}
"""
)

DECOMMISSION = _script(
    """
-- ARGV[4] event JSON template; the reply lists what was released
local released = {}
for _, t in ipairs(redis.call('HKEYS', K_TABLES)) do
  local entries = redis.call('HGETALL', k_prog(t))
  for j = 1, #entries, 2 do
    local fields = split(entries[j + 1])
    if fields[1] == SERVER then
      fields[1] = ''
      if fields[5] ~= '' then redis.call('ZREM', k_lwm(t), fields[5]) end
      redis.call('SREM', k_pending(t), entries[j])
      redis.call('HSET', k_prog(t), entries[j], table.concat(fields, '|'))
      released[#released + 1] = t
      released[#released + 1] = entries[j]
    end
  end
end
redis.call('HSET', K_SERVERS, SERVER, 'decommissioned')
redis.call('HDEL', K_HB, SERVER)
emit('decommission', ARGV[4])
return {'OK', released}
"""
)

SNAPSHOT = (
    LUA_KEYS
    + """
-- The whole state and the log position it corresponds to, in one atomic read.
local t = redis.call('TIME')
local ms = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local tables = redis.call('HGETALL', K_TABLES)
local per_table = {}
for i = 1, #tables, 2 do
  local name = tables[i]
  per_table[#per_table + 1] = {name, redis.call('HVALS', k_segs(name)),
                               redis.call('HGETALL', k_prog(name)),
                               redis.call('HGETALL', k_ret(name))}
end
return {redis.call('GET', K_EPOCH) or '', redis.call('GET', K_SEQ) or '0', ms, tables,
        redis.call('HGETALL', K_SERVERS), redis.call('HGETALL', K_HB), per_table}
"""
)

READ_TABLE_LWM = (
    LUA_KEYS
    + """
-- ARGV[2] table. One round trip: the first member of the LWM zset, its owner and the count;
-- or, while an owned partition has not reported, 'PENDING' and the lowest such partition.
local pending = redis.call('SMEMBERS', k_pending(ARGV[2]))
if #pending > 0 then
  local lowest = tonumber(pending[1])
  for _, p in ipairs(pending) do lowest = math.min(lowest, tonumber(p)) end
  local entry = redis.call('HGET', k_prog(ARGV[2]), tostring(lowest)) or ''
  return {'PENDING', tostring(lowest), string.match(entry, '^([^|]*)|') or '',
          redis.call('ZCARD', k_lwm(ARGV[2]))}
end
local first = redis.call('ZRANGE', k_lwm(ARGV[2]), 0, 0)
if #first == 0 then return {} end
local lwm, partition = string.match(first[1], '^(%d+):(%d+)$')
local owner = ''
local entry = redis.call('HGET', k_prog(ARGV[2]), tostring(tonumber(partition)))
if entry then owner = string.match(entry, '^([^|]*)|') end
return {lwm, partition, owner, redis.call('ZCARD', k_lwm(ARGV[2]))}
"""
)
