-- ARGV[4] table, ARGV[5] chunk key, ARGV[6] count, ARGV[7] first number, ARGV[8] limit
local t, count, limit = ARGV[4], tonumber(ARGV[6]), tonumber(ARGV[8])
local next_free = tonumber(redis.call('HGET', k_alloc(t), ARGV[5]) or ARGV[7])
if next_free + count > limit then
  return {'ERR', 'RESOURCE_EXHAUSTED', 'only ' .. (limit - next_free) ..
          ' partition numbers are left for that time chunk and version, ' .. count .. ' asked'}
end
redis.call('HSET', k_alloc(t), ARGV[5], next_free + count)
return {'OK', next_free}
