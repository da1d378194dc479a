"""The lock rules of :mod:`horizon_broker.locks.rules` as atomic Lua scripts over one hash per table.

``{p}:t:{table}:locks`` maps a lock id to ``acquired_ms|expires_ms|revoked_by|revoked_ms|request``
(the request as JSON, see :func:`horizon_broker.locks.client.request_json`). Times are Redis's clock
(``TIME``), so every job and broker agrees on which leases have run out. An entry stays until its
lease has run out, also when revoked, so its holder learns why it lost the lock.

:data:`LOCK_LUA` is shared with the announce script (:mod:`horizon_broker.watermark.scripts`), which checks in
the same atomic step that the publisher still holds the locks covering what it publishes.
"""

from __future__ import annotations

from horizon_broker._core.keys import LUA_KEYS

LOCK_LUA = """
local function lock_parse(value)
  local acquired, expires, revoked_by, revoked_ms, body =
    string.match(value, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$')
  return {acquired = tonumber(acquired), expires = tonumber(expires), revoked_by = revoked_by,
          revoked_ms = revoked_ms, req = cjson.decode(body), body = body}
end
local function lock_holds(lock, now)
  return lock.revoked_by == '' and now < lock.expires
end
local function lock_same_segments(a, b)
  if a.start ~= b.start or a['end'] ~= b['end'] or a.version ~= b.version then return false end
  local mine = {}
  for _, p in ipairs(a.partitions) do mine[p] = true end
  for _, p in ipairs(b.partitions) do if mine[p] then return true end end
  return false
end
local function lock_conflicts(a, b)
  if a.job == b.job or not (a.start < b['end'] and b.start < a['end']) then return false end
  if a.granularity ~= b.granularity then return true end
  local both_shared = a.mode == 'shared' and b.mode == 'shared'
  if a.granularity == 'time_chunk' then return not both_shared end
  return lock_same_segments(a, b) and not both_shared
end
local function lock_covers(r, s, e, version, partition)
  if r.granularity == 'time_chunk' then
    return r.start <= s and s < r['end'] and e <= r['end']
  end
  if r.start ~= s or r['end'] ~= e or r.version ~= version then return false end
  for _, p in ipairs(r.partitions) do if p == partition then return true end end
  return false
end
local function lock_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function lock_ms(value) return string.format('%.0f', value) end
"""

_PREAMBLE = LUA_KEYS + LOCK_LUA

ACQUIRE = (
    _PREAMBLE
    + """
-- ARGV[2] table, ARGV[3] lock id, ARGV[4] request JSON, ARGV[5] lease ms.
-- Reply {'OK', acquired, expires, revoked ids...} or {'CONFLICT', blocker entries...}.
local key, now = k_locks(ARGV[2]), lock_now()
local req = cjson.decode(ARGV[4])
local entries = redis.call('HGETALL', key)
local blockers, victims = {}, {}
for i = 1, #entries, 2 do
  local lock = lock_parse(entries[i + 1])
  if now >= lock.expires then
    redis.call('HDEL', key, entries[i])
  elseif entries[i] ~= ARGV[3] and lock_holds(lock, now) and lock_conflicts(lock.req, req) then
    if lock.req.priority >= req.priority then
      blockers[#blockers + 1] = entries[i]
      blockers[#blockers + 1] = entries[i + 1]
    else
      victims[#victims + 1] = {entries[i], lock}
    end
  end
end
if #blockers > 0 then
  local reply = {'CONFLICT', lock_ms(now)}
  for _, item in ipairs(blockers) do reply[#reply + 1] = item end
  return reply
end
local reply = {'OK', lock_ms(now), lock_ms(now + tonumber(ARGV[5]))}
for _, victim in ipairs(victims) do
  local id, lock = victim[1], victim[2]
  redis.call('HSET', key, id, lock_ms(lock.acquired) .. '|' .. lock_ms(lock.expires) .. '|' ..
             req.job .. '|' .. lock_ms(now) .. '|' .. lock.body)
  reply[#reply + 1] = id
end
redis.call('HSET', key, ARGV[3], reply[2] .. '|' .. reply[3] .. '||' .. '|' .. ARGV[4])
return reply
"""
)

RENEW = (
    _PREAMBLE
    + """
-- ARGV[2] table, ARGV[3] job, ARGV[4] lease ms, then lock ids. Reply: now, then per id
-- 'OK|expires', 'REVOKED|by|at', 'EXPIRED' or 'MISSING'.
local key, now = k_locks(ARGV[2]), lock_now()
local reply = {lock_ms(now)}
for i = 5, #ARGV do
  local value = redis.call('HGET', key, ARGV[i])
  local status = 'MISSING'
  if value then
    local lock = lock_parse(value)
    if lock.req.job ~= ARGV[3] then
      status = 'MISSING'
    elseif lock.revoked_by ~= '' then
      status = 'REVOKED|' .. lock.revoked_by .. '|' .. lock.revoked_ms
    elseif now >= lock.expires then
      redis.call('HDEL', key, ARGV[i])
      status = 'EXPIRED'
    else
      local expires = lock_ms(now + tonumber(ARGV[4]))
      redis.call('HSET', key, ARGV[i], lock_ms(lock.acquired) .. '|' .. expires .. '||' .. '|' ..
                 lock.body)
      status = 'OK|' .. expires
    end
  end
  reply[#reply + 1] = status
end
return reply
"""
)

RELEASE = (
    _PREAMBLE
    + """
-- ARGV[2] table, ARGV[3] job, then lock ids: the job's own entries go (revoked ones too).
local key, released = k_locks(ARGV[2]), 0
for i = 4, #ARGV do
  local value = redis.call('HGET', key, ARGV[i])
  if value and lock_parse(value).req.job == ARGV[3] then
    redis.call('HDEL', key, ARGV[i])
    released = released + 1
  end
end
return released
"""
)

LIST = (
    _PREAMBLE
    + """
-- ARGV[2..] tables. Reply: now, then per table: table, its hash as a flat list.
local reply = {lock_ms(lock_now())}
for i = 2, #ARGV do
  reply[#reply + 1] = ARGV[i]
  reply[#reply + 1] = redis.call('HGETALL', k_locks(ARGV[i]))
end
return reply
"""
)

PUBLISH_GUARD = """
-- Checks a publish against ARGV[guard] (JSON {job, covers: [[table, start, end, version,
-- partition]...], owns: [[table, partition]...]}); returns nil or an error reply.
local function check_guard(text)
  if text == '' then return nil end
  local guard, now = cjson.decode(text), lock_now()
  local cache = {}
  for _, c in ipairs(guard.covers) do
    local t = c[1]
    if not cache[t] then
      local entries, locks = redis.call('HGETALL', k_locks(t)), {}
      for i = 1, #entries, 2 do
        local lock = lock_parse(entries[i + 1])
        if lock.req.job == guard.job then locks[#locks + 1] = {entries[i], lock} end
      end
      cache[t] = locks
    end
    local covered, lost = false, nil
    for _, item in ipairs(cache[t]) do
      local lock = item[2]
      if lock_covers(lock.req, c[2], c[3], c[4], c[5]) then
        if lock_holds(lock, now) then covered = true break end
        if lock.revoked_by ~= '' then
          lost = 'lock ' .. item[1] .. ' was revoked by job ' .. lock.revoked_by
        else
          lost = 'lock ' .. item[1] .. ' expired'
        end
      end
    end
    if not covered then
      local what = 'segment ' .. t .. ' [' .. lock_ms(c[2]) .. ', ' .. lock_ms(c[3]) .. ') version ' ..
                   c[4] .. ' partition ' .. lock_ms(c[5])
      return {'ERR', 'LOCK_LOST', 'job ' .. guard.job .. ' cannot publish: ' ..
              (lost or 'it holds no lock covering') .. ' (' .. what .. ')'}
    end
  end
  for _, o in ipairs(guard.owns) do
    local entry = redis.call('HGET', k_prog(o[1]), tostring(o[2]))
    local owner = entry and string.match(entry, '^([^|]*)|') or ''
    if owner ~= SERVER then
      return {'ERR', 'NOT_OWNER', 'server ' .. SERVER .. ' cannot publish segments of key partition ' ..
              tostring(o[2]) .. ' of table ' .. o[1] .. ': it is owned by ' ..
              (owner == '' and 'nobody' or ('server ' .. owner))}
    end
  end
  return nil
end
"""
"""Lua for the announce script (needs :data:`LOCK_LUA` and ``SERVER`` defined before it)."""
