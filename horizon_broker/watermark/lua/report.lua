-- ARGV[4] table, then per partition: partition, ingested, applied, idle ('1' or '').
-- A parked partition, or an idle one reported busy, is resumed first (its floor is the reply:
-- the server's clock must move above it); values are raised to the partition's floor.
local t = ARGV[4]
if redis.call('HEXISTS', K_TABLES, t) == 0 then
  return {'ERR', 'FAILED_PRECONDITION', 'table ' .. t .. ' is not registered'}
end
local i = 5
while i <= #ARGV do
  local owner = entry_of(redis.call('HGET', k_prog(t), ARGV[i]))[1]
  if owner ~= '' and owner ~= SERVER then
    return {'ERR', 'FAILED_PRECONDITION', 'partition ' .. ARGV[i] .. ' of table ' .. t ..
            ' is owned by server ' .. owner .. ', not ' .. SERVER}
  end
  i = i + 4
end
local progress, idle, top = {}, {}, ''
i = 5
while i <= #ARGV do
  local p, quiet = ARGV[i], ARGV[i + 3] == '1'
  local f = entry_of(redis.call('HGET', k_prog(t), p))
  local was, since = f[6], ''
  if was == 'parked' or (was == 'idle' and not quiet) then top = hlc_max(top, resume(t, f, NOW)) end
  if quiet then
    since = NOW
    if was == 'idle' then since = f[7] end
    idle[#idle + 1] = p
  end
  f[1] = SERVER
  f[2] = hlc_max(ARGV[i + 1], f[8])
  f[3] = hlc_max(ARGV[i + 2], f[8])
  f[4] = NOW
  f[6] = quiet and 'idle' or ''
  f[7] = since
  store_entry(t, p, f)
  progress[p] = {f[2], f[3]}
  i = i + 4
end
emit('report', cjson.encode({table = t, progress = progress, idle = idle}))
return {'OK', top}
