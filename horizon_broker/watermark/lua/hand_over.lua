-- ARGV[4] table, ARGV[5] partition, ARGV[6] receiving server (an idle partition is resumed)
local t, p = ARGV[4], ARGV[5]
local f = entry_of(redis.call('HGET', k_prog(t), p))
if f[1] == ARGV[6] then return {'OK', 'ALREADY'} end
if f[1] ~= SERVER then
  local owner = f[1] == '' and 'nobody' or ('server ' .. f[1])
  return {'ERR', 'FAILED_PRECONDITION', 'partition ' .. p .. ' of table ' .. t ..
          ' is owned by ' .. owner .. ', not ' .. SERVER .. ': cannot hand it over'}
end
resume(t, f, NOW)
f[1] = ARGV[6]
store_entry(t, p, f)
local event = {table = t, partition = tonumber(p), to = ARGV[6], progress = {}}
if f[2] ~= '' and f[3] ~= '' then event['progress'][p] = {f[2], f[3]} end
emit('handover', cjson.encode(event))
return {'OK'}
