-- ARGV[4] table, ARGV[5] chunk key, ARGV[6] modulus, ARGV[7] first number, ARGV[8] limit,
-- ARGV[9] heartbeat timeout ms, ARGV[10..] one residue per number wanted. Each number is the
-- lowest free one congruent to its residue modulo the modulus: first-generation numbers of key partition kp are kp mod K, so two
-- servers owning different key partitions never draw the same number, even after a failover
-- rolled this counter back (rule F4 of docs/design/contract/failover.md).
local t, modulus, limit = ARGV[4], tonumber(ARGV[6]), tonumber(ARGV[8])
-- After a change of primary the counter may be behind numbers a live server still holds: no
-- number is handed out until every live server has published its state (and its reservations)
-- again on this primary (rule F4).
local here, timeout = primary_run_id(), tonumber(ARGV[9])
local servers = redis.call('HGETALL', K_SERVERS)
for j = 1, #servers, 2 do
  local name = servers[j]
  if name ~= SERVER and servers[j + 1] == 'live' then
    local hb = tonumber(redis.call('HGET', K_HB, name) or '-1')
    if hb >= 0 and NOW - hb <= timeout and redis.call('HGET', K_PUBLISHED_ON, name) ~= here then
      return {'ERR', 'REPUBLISH_PENDING', 'server ' .. name .. ' has not published its state ' ..
              'again since the state store changed primary'}
    end
  end
end
local next_free = tonumber(redis.call('HGET', k_alloc(t), ARGV[5]) or ARGV[7])
local numbers = {}
for i = 10, #ARGV do
  local n = next_free + ((tonumber(ARGV[i]) - next_free) % modulus)
  if n >= limit then
    return {'ERR', 'RESOURCE_EXHAUSTED', 'only ' .. math.max(limit - next_free, 0) ..
            ' partition numbers are left for that time chunk and version, ' .. (#ARGV - 9) ..
            ' asked (key partitions draw every ' .. modulus .. 'th number)'}
  end
  numbers[#numbers + 1] = n
  next_free = n + 1
end
redis.call('HSET', k_alloc(t), ARGV[5], next_free)
return {'OK', numbers}
