-- ARGV[4] table, ARGV[5] chunk key, ARGV[6] modulus, ARGV[7] first number, ARGV[8] limit,
-- ARGV[9..] one residue per number wanted. Each number is the lowest free one congruent to its
-- residue modulo the modulus: first-generation numbers of key partition kp are kp mod K, so two
-- servers owning different key partitions never draw the same number, even after a failover
-- rolled this counter back (rule F4 of docs/design/contract/failover.md).
local t, modulus, limit = ARGV[4], tonumber(ARGV[6]), tonumber(ARGV[8])
local next_free = tonumber(redis.call('HGET', k_alloc(t), ARGV[5]) or ARGV[7])
local numbers = {}
for i = 9, #ARGV do
  local n = next_free + ((tonumber(ARGV[i]) - next_free) % modulus)
  if n >= limit then
    return {'ERR', 'RESOURCE_EXHAUSTED', 'only ' .. math.max(limit - next_free, 0) ..
            ' partition numbers are left for that time chunk and version, ' .. (#ARGV - 8) ..
            ' asked (key partitions draw every ' .. modulus .. 'th number)'}
  end
  numbers[#numbers + 1] = n
  next_free = n + 1
end
redis.call('HSET', k_alloc(t), ARGV[5], next_free)
return {'OK', numbers}
