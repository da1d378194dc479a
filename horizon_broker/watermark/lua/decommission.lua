-- The reply lists what was released (table, partition pairs)
local released = {}
for _, t in ipairs(redis.call('HKEYS', K_TABLES)) do
  local entries = redis.call('HGETALL', k_prog(t))
  for j = 1, #entries, 2 do
    local f = entry_of(entries[j + 1])
    if f[1] == SERVER then
      f[1] = ''
      f[6] = ''
      f[7] = ''
      store_entry(t, entries[j], f)
      released[#released + 1] = t
      released[#released + 1] = entries[j]
    end
  end
end
redis.call('HSET', K_SERVERS, SERVER, 'decommissioned')
redis.call('HDEL', K_HB, SERVER)
emit('decommission', '{}')
return {'OK', released}
