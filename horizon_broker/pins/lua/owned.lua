-- A pin's index entry: {"t": tables, "o": owner} (a bare list of tables before owners).
local function pin_info(id)
  local listed = redis.call('HGET', K_PINS, id)
  if not listed then return nil end
  local info = cjson.decode(listed)
  if info.t == nil then
    local owner = ''
    local value = redis.call('HGET', k_pins(info[1]), id)
    if value then owner = string.match(value, '^[^|]*|[^|]*|[^|]*|(.*)$') or '' end
    info = {t = info, o = owner}
  end
  return info
end
-- Forget pin ``id`` everywhere it is stored: its tables' entries and expiry indexes, its owner's
-- index and the pin index. ``t`` / ``o``: an index it was found in (its entry may outlive the
-- pin's record, which the retention script and older versions dropped alone).
local function drop_pin(id, t, o)
  local info = pin_info(id)
  if info then
    for _, u in ipairs(info.t) do
      redis.call('HDEL', k_pins(u), id)
      redis.call('ZREM', k_pinexp(u), id)
    end
    redis.call('ZREM', k_pinowner(info.o), id)
    redis.call('HDEL', K_PINS, id)
  end
  if t then
    redis.call('HDEL', k_pins(t), id)
    redis.call('ZREM', k_pinexp(t), id)
  end
  if o then redis.call('ZREM', k_pinowner(o), id) end
end
-- Drop at most ``budget`` pins whose lease ran out from expiry index ``key`` (soonest first);
-- returns what is left of the budget.
local function sweep(key, budget, t, o)
  if budget <= 0 then return 0 end
  local expired = redis.call('ZRANGEBYSCORE', key, '-inf', string.format('%.0f', now),
                             'LIMIT', 0, budget)
  for _, id in ipairs(expired) do drop_pin(id, t, o) end
  return budget - #expired
end
local function index_pin(id, tables, owner, expires)
  for _, t in ipairs(tables) do redis.call('ZADD', k_pinexp(t), expires, id) end
  redis.call('ZADD', k_pinowner(owner), expires, id)
end
-- The live pins and the lease (ms from now) ``owner`` holds, leaving out pin ``except``, from
-- the owner's own index: the cost is what the owner holds, never every pin. The lease is only
-- summed (``with_lease``) once the count is within the quota, so at most ``max_pins`` entries.
local function holdings(owner, except, with_lease)
  local key = k_pinowner(owner)
  local after = '(' .. string.format('%.0f', now)
  local count = redis.call('ZCOUNT', key, after, '+inf')
  local mine = redis.call('ZSCORE', key, except)
  if mine and tonumber(mine) > now then count = count - 1 end
  local lease = 0
  if with_lease then
    local live = redis.call('ZRANGEBYSCORE', key, after, '+inf', 'WITHSCORES')
    for j = 1, #live, 2 do
      if live[j] ~= except then lease = lease + (tonumber(live[j + 1]) - now) end
    end
  end
  return count, lease
end
local function over_quota(owner, except, lease, max_pins, max_lease)
  if max_pins <= 0 and max_lease <= 0 then return nil end
  local count = holdings(owner, except, false)
  if max_pins > 0 and count + 1 > max_pins then
    return {'ERR', 'RESOURCE_EXHAUSTED', owner .. ' already holds ' .. count ..
            ' live pins, the limit of [reads].max_pins_per_identity (' .. max_pins ..
            '): release one first'}
  end
  if max_lease <= 0 then return nil end
  local _, held = holdings(owner, except, true)
  if held + lease > max_lease then
    return {'ERR', 'RESOURCE_EXHAUSTED', owner .. ' would hold ' ..
            string.format('%.0f', (held + lease) / 1000) .. ' s of pin leases, over ' ..
            '[reads].max_pin_lease_total_s (' .. string.format('%.0f', max_lease / 1000) ..
            ' s): release a pin or ask for a shorter lease'}
  end
  return nil
end
local function not_owner(id, info, owner)
  if info.o ~= owner then
    return {'ERR', 'PERMISSION_DENIED', 'pin ' .. id .. ' was taken by another identity: ' ..
            'only its owner may renew or release it'}
  end
  return nil
end
