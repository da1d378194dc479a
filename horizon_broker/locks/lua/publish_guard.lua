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
