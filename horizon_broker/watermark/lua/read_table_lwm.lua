-- ARGV[2] table. One round trip: the table's LWM (quiet partitions at their clocks), the
-- partition holding it, its owner, how many partitions count and its state; or, while an owned
-- partition has not reported, 'PENDING' and the lowest such partition.
local t = ARGV[2]
local pending = redis.call('SMEMBERS', k_pending(t))
local count = redis.call('ZCARD', k_lwm(t)) + redis.call('ZCARD', k_quiet(t))
if #pending > 0 then
  local lowest = tonumber(pending[1])
  for _, p in ipairs(pending) do lowest = math.min(lowest, tonumber(p)) end
  local entry = redis.call('HGET', k_prog(t), tostring(lowest)) or ''
  return {'PENDING', tostring(lowest), string.match(entry, '^([^|]*)|') or '', count, 'active'}
end
local found = table_lwm(t, store_now())
if found == nil then return {} end
return {found[1], found[2], found[3], count, found[4]}
