-- ARGV[4] table, ARGV[5] descriptor JSON
local existing = redis.call('HGET', K_TABLES, ARGV[4])
if existing then return {'OK', 'EXISTS', existing} end
redis.call('HSET', K_TABLES, ARGV[4], ARGV[5])
emit('table', ARGV[5])
return {'OK'}
