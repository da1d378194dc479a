-- The whole state and the log position it corresponds to, in one atomic read.
local ms = store_now()
local tables = redis.call('HGETALL', K_TABLES)
local per_table = {}
for i = 1, #tables, 2 do
  local name = tables[i]
  per_table[#per_table + 1] = {name, redis.call('HVALS', k_segs(name)),
                               redis.call('HGETALL', k_prog(name)),
                               redis.call('HGETALL', k_ret(name))}
end
return {redis.call('GET', K_EPOCH) or '', redis.call('GET', K_SEQ) or '0', ms, tables,
        redis.call('HGETALL', K_SERVERS), redis.call('HGETALL', K_HB), per_table,
        redis.call('HGETALL', K_HBCLOCK)}
