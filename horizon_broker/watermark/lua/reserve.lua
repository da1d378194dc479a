-- ARGV[4] table, ARGV[5] chunk key, ARGV[6] next free number this server knows of
local current = tonumber(redis.call('HGET', k_alloc(ARGV[4]), ARGV[5]) or '0')
if tonumber(ARGV[6]) > current then redis.call('HSET', k_alloc(ARGV[4]), ARGV[5], ARGV[6]) end
return {'OK'}
