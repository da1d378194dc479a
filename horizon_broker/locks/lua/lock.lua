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
