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
