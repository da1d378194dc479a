local function store_now()
  local t = redis.call('TIME')
  local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local last = tonumber(redis.call('GET', K_CLOCK) or '0')
  if last > ms then ms = last end
  return string.format('%.0f', ms)
end
