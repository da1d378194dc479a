-- ARGV[4] table, ARGV[5] the descriptor JSON the change was computed from, ARGV[6] the new
-- descriptor JSON, ARGV[7] the new schema version's effective HLC (zero-padded).
-- Compare-and-set: another alter in between makes the caller compute again ('CHANGED').
-- The version must take effect above every snapshot a reader may already have read (the
-- table's LWM, and the highest snapshot a broker served): else 'STALE' and that bound.
local t = ARGV[4]
local existing = redis.call('HGET', K_TABLES, t)
if not existing then
  return {'ERR', 'NOT_FOUND', 'table ' .. t .. ' is not registered (an ingestion server registers it)'}
end
if existing ~= ARGV[5] then return {'OK', 'CHANGED', existing} end
local bound = ''
local found = table_lwm(t, NOW)
if found ~= nil then bound = found[1] end
local served = redis.call('HGET', K_FLOOR, t)
if served and served ~= '' and pad(served) > bound then bound = pad(served) end
if bound ~= '' and ARGV[7] <= bound then return {'OK', 'STALE', bound} end
redis.call('HSET', K_TABLES, t, ARGV[6])
emit('table', ARGV[6])
return {'OK', 'DONE'}
