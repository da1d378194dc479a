-- ARGV[4] table, ARGV[5] horizon, ARGV[6] event JSON (its "horizon" is replaced by the one stored)
-- The horizon stored is the one asked for, capped by the oldest live snapshot pin of the table
-- (horizon_broker.pins.rules.capped_horizon), never below this server's previous one.
local t = ARGV[4]
if redis.call('HEXISTS', K_TABLES, t) == 0 then
  return {'ERR', 'FAILED_PRECONDITION', 'table ' .. t .. ' is not registered'}
end
local horizon = ARGV[5]
local now = tonumber(now_ms())
local pins = redis.call('HGETALL', k_pins(t))
for i = 1, #pins, 2 do
  local snapshot, _, expires = string.match(pins[i + 1], '^([^|]*)|([^|]*)|([^|]*)|')
  if tonumber(expires) <= now then
    redis.call('HDEL', k_pins(t), pins[i])
  elseif pad(snapshot) < pad(horizon) then
    horizon = snapshot
  end
end
local previous = redis.call('HGET', k_ret(t), SERVER)
if previous and pad(previous) > pad(horizon) then
  horizon = previous
end
redis.call('HSET', k_ret(t), SERVER, horizon)
local event = cjson.decode(ARGV[6])
event['horizon'] = horizon
emit('retention', cjson.encode(event))
return {'OK', horizon}
