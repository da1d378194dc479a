-- ARGV[2] pin id, ARGV[3] lease ms, ARGV[4] caller, ARGV[5] max pins, ARGV[6] max lease ms
local id, lease, caller = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local info = pin_info(id)
if not info then
  return {'ERR', 'NOT_FOUND', 'pin ' .. id .. ' does not exist (released, or never taken)'}
end
local refused = not_owner(id, info, caller)
if refused then return refused end
local tables = info.t
local expires = string.format('%.0f', now + lease)
for _, t in ipairs(tables) do
  local value = redis.call('HGET', k_pins(t), id)
  if not value then
    drop_pin(id)
    return {'ERR', 'NOT_FOUND', 'pin ' .. id .. ' expired: it no longer holds table ' .. t}
  end
  local _, _, old_expires = string.match(value, '^([^|]*)|([^|]*)|([^|]*)|(.*)$')
  if tonumber(old_expires) <= now then
    drop_pin(id)
    return {'ERR', 'NOT_FOUND', 'pin ' .. id .. ' expired before it was renewed'}
  end
end
refused = over_quota(caller, id, lease, 0, tonumber(ARGV[6]))
if refused then return refused end
for _, t in ipairs(tables) do
  local value = redis.call('HGET', k_pins(t), id)
  local snapshot, created, _, owner = string.match(value, '^([^|]*)|([^|]*)|([^|]*)|(.*)$')
  redis.call('HSET', k_pins(t), id, snapshot .. '|' .. created .. '|' .. expires .. '|' .. owner)
end
index_pin(id, tables, info.o, expires)
return {'OK', expires}
