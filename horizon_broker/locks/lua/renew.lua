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
