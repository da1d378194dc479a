-- ARGV[2] pin id, ARGV[3] snapshot, ARGV[4] lease ms, ARGV[5] owner,
-- ARGV[6] max pins of one owner, ARGV[7] max total lease ms of one owner (0: no limit),
-- ARGV[8..] tables
local id, snapshot, lease, owner = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local max_pins, max_lease = tonumber(ARGV[6]), tonumber(ARGV[7])
local tables = {}
for i = 8, #ARGV do
  local t = ARGV[i]
  tables[#tables + 1] = t
  if redis.call('HEXISTS', K_TABLES, t) == 0 then
    return {'ERR', 'NOT_FOUND', 'table ' .. t .. ' is not registered'}
  end
  for _, horizon in ipairs(redis.call('HVALS', k_ret(t))) do
    if pad(horizon) > pad(snapshot) then
      return {'ERR', 'FAILED_PRECONDITION', 'table ' .. t .. ': snapshot ' .. snapshot ..
              ' is below the retention horizon ' .. horizon ..
              ' (history below it is already gone), pin a later snapshot'}
    end
  end
end
-- Taking a pin cleans up after the ones that ran out, a bounded number of them.
local budget = SWEEP
for _, t in ipairs(tables) do budget = sweep(k_pinexp(t), budget, t, nil) end
sweep(k_pinowner(owner), SWEEP, nil, owner)
local refused = over_quota(owner, id, lease, max_pins, max_lease)
if refused then return refused end
if redis.call('HEXISTS', K_PINS, id) == 1 then drop_pin(id) end
local created = string.format('%.0f', now)
local expires = string.format('%.0f', now + lease)
local value = snapshot .. '|' .. created .. '|' .. expires .. '|' .. owner
for _, t in ipairs(tables) do redis.call('HSET', k_pins(t), id, value) end
redis.call('HSET', K_PINS, id, cjson.encode({t = tables, o = owner}))
index_pin(id, tables, owner, expires)
return {'OK', created, expires}
