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
