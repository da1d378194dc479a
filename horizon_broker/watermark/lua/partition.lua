local function hlc_max(a, b)
  if a == '' then return b end
  if b == '' then return a end
  if pad(a) >= pad(b) then return a end
  return b
end
local function last_hlc_of_ms(ms)
  local n = tonumber(ms)
  local high = math.floor(n / 1000000)
  local hi = high * 65536
  local lo = (n - high * 1000000) * 65536 + 65535
  hi = hi + math.floor(lo / 1000000)
  lo = lo % 1000000
  if hi == 0 then return string.format('%.0f', lo) end
  return string.format('%.0f', hi) .. string.format('%06.0f', lo)
end
local function entry_of(value)
  local f = {}
  for piece in string.gmatch((value or '') .. '|', '([^|]*)|') do f[#f + 1] = piece end
  for i = 1, 8 do f[i] = f[i] or '' end
  return f
end
local function static_lwm(f)
  if f[2] == '' or f[3] == '' then return '' end
  if pad(f[3]) < pad(f[2]) then return f[3] end
  return f[2]
end
-- The partition's LWM now: an idle one follows its owner's heartbeat clock, a parked one the
-- store's clock at ms `now`.
local function effective(f, now)
  local lwm = static_lwm(f)
  if lwm == '' then return '' end
  if f[6] == 'idle' then return hlc_max(lwm, redis.call('HGET', K_HBCLOCK, f[1]) or '') end
  if f[6] == 'parked' then return hlc_max(lwm, last_hlc_of_ms(now)) end
  return lwm
end
-- Make an idle or parked partition of table t active at R: its effective LWM now, or the
-- brokers' highest served snapshot of the table if higher; its progress is raised to R.
-- Returns R ('' for a partition that was active).
local function resume(t, f, now)
  local was = f[6]
  f[6] = ''
  f[7] = ''
  if was ~= 'idle' and was ~= 'parked' then return '' end
  f[6] = was
  local r = effective(f, now)
  f[6] = ''
  if r == '' then return '' end
  r = hlc_max(r, redis.call('HGET', K_FLOOR, string.lower(t)) or '')
  f[2] = hlc_max(f[2], r)
  f[3] = hlc_max(f[3], r)
  f[8] = r
  return r
end
-- Write an entry back with its sorted-set member (active or quiet) and pending mark.
local function store_entry(t, p, f)
  if f[5] ~= '' then
    redis.call('ZREM', k_lwm(t), f[5])
    redis.call('ZREM', k_quiet(t), f[5])
  end
  f[5] = ''
  local lwm = static_lwm(f)
  if f[1] ~= '' and lwm ~= '' then
    f[5] = pad(lwm) .. ':' .. string.format('%05d', tonumber(p))
    if f[6] == '' then
      redis.call('ZADD', k_lwm(t), 0, f[5])
    else
      redis.call('ZADD', k_quiet(t), 0, f[5])
    end
  end
  if f[1] ~= '' and lwm == '' then
    redis.call('SADD', k_pending(t), p)
  else
    redis.call('SREM', k_pending(t), p)
  end
  redis.call('HSET', k_prog(t), p, table.concat(f, '|', 1, 8))
end
