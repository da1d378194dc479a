-- ARGV[4] '1' when the server stops (it is parked, no longer live), then pairs: table, partition.
-- Each idle partition of this server is parked (its LWM follows the store's clock from now on);
-- the reply names the pairs that could not be (not idle: something is pending, or not ours).
local stops = ARGV[4] == '1'
local tables, skipped = {}, {}
local i = 5
while i <= #ARGV do
  local t, p = ARGV[i], ARGV[i + 1]
  local f = entry_of(redis.call('HGET', k_prog(t), p))
  if f[1] == SERVER and (f[6] == 'idle' or f[6] == 'parked') and static_lwm(f) ~= '' then
    if f[6] == 'idle' then
      local value = effective(f, NOW)
      f[2] = hlc_max(f[2], value)
      f[3] = hlc_max(f[3], value)
      f[6] = 'parked'
      f[7] = NOW
      store_entry(t, p, f)
    end
    tables[t] = tables[t] or {}
    tables[t][p] = {f[2], f[3], f[7]}
  else
    skipped[#skipped + 1] = t
    skipped[#skipped + 1] = p
  end
  i = i + 2
end
if stops then redis.call('HSET', K_SERVERS, SERVER, 'parked') end
emit('park', cjson.encode({tables = tables, stops = stops}))
return {'OK', skipped}
