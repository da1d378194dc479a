-- ARGV[4] event JSON, ARGV[5] number of adds, ARGV[6] publish guard JSON ('' = none; see
-- horizon_broker.locks.scripts.PUBLISH_GUARD); adds: table, key, json, chunk key, partition, base, interval key,
-- version, first-generation chunk key, root end; then removes: table, key
local STRIDE = 10
local n_add = tonumber(ARGV[5])
local i = 7
for _ = 1, n_add do
  if redis.call('HEXISTS', K_TABLES, ARGV[i]) == 0 then
    return {'ERR', 'FAILED_PRECONDITION', 'table ' .. ARGV[i] .. ' is not registered'}
  end
  i = i + STRIDE
end
if ARGV[6] ~= '' then
  i = 7
  for _ = 1, n_add do
    local major = redis.call('HGET', k_majors(ARGV[i]), ARGV[i + 6])
    if major and major > ARGV[i + 7] then
      return {'ERR', 'SUPERSEDED', 'cannot publish version ' .. ARGV[i + 7] .. ' of time chunk ' ..
              ARGV[i + 6] .. ' of table ' .. ARGV[i] .. ': a major compaction replaced the chunk ' ..
              'with version ' .. major .. ' meanwhile; the batch must be written again'}
    end
    i = i + STRIDE
  end
end
local refused = check_guard(ARGV[6])
if refused then return refused end
-- One id names one segment: an add whose id the store already gives to other files is refused,
-- never written over (a failover that rolled a partition counter back could hand out a number
-- twice; overwriting would drop the other segment's rows without a trace, rule F4).
i = 7
for _ = 1, n_add do
  local stored = redis.call('HGET', k_segs(ARGV[i]), ARGV[i + 1])
  if stored then
    local old, new = cjson.decode(stored), cjson.decode(ARGV[i + 2])
    if cjson.encode(old.location or {}) ~= cjson.encode(new.location or {}) then
      return {'ERR', 'ID_REUSED', 'segment ' .. ARGV[i + 1] .. ' of table ' .. ARGV[i] ..
              ' is already announced by server ' .. tostring(old.server) .. ' with other files ' ..
              '(stored ' .. cjson.encode(old.location or {}) .. ', given ' ..
              cjson.encode(new.location or {}) .. '): one id cannot name two segments'}
    end
  end
  i = i + STRIDE
end
i = 7
for _ = 1, n_add do
  local t, partition = ARGV[i], tonumber(ARGV[i + 4])
  redis.call('HSET', k_segs(t), ARGV[i + 1], ARGV[i + 2])
  local next_free = tonumber(redis.call('HGET', k_alloc(t), ARGV[i + 3]) or ARGV[i + 5])
  if partition >= next_free then redis.call('HSET', k_alloc(t), ARGV[i + 3], partition + 1) end
  -- Appends after a major compaction number their root partitions past its root ranges.
  local root_end = tonumber(ARGV[i + 9])
  local first_free = tonumber(redis.call('HGET', k_alloc(t), ARGV[i + 8]) or '0')
  if root_end > first_free then redis.call('HSET', k_alloc(t), ARGV[i + 8], root_end) end
  local major = redis.call('HGET', k_majors(t), ARGV[i + 6])
  if not major or ARGV[i + 7] > major then redis.call('HSET', k_majors(t), ARGV[i + 6], ARGV[i + 7]) end
  i = i + STRIDE
end
while i < #ARGV do
  redis.call('HDEL', k_segs(ARGV[i]), ARGV[i + 1])
  i = i + 2
end
emit('segments', ARGV[4])
return {'OK'}
