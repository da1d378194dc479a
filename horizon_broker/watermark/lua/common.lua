local EPOCH = ARGV[2]
local SERVER = ARGV[3]
local NOW = store_now()
local function now_ms()
  return NOW
end
local function emit(kind, data)
  local seq = redis.call('INCR', K_SEQ)
  redis.call('SET', K_CLOCK, NOW)
  local previous = redis.call('GET', K_LAST) or ''
  redis.call('SET', K_LAST, NOW .. '|' .. SERVER)
  redis.call('XADD', K_LOG, 'MAXLEN', '~', LOG_MAXLEN, tostring(seq) .. '-0',
             'k', kind, 'd', data, 't', NOW, 'e', EPOCH, 's', SERVER, 'p', previous)
  return seq
end
local function primary_run_id()
  return string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
end
local function split(s)
  local out = {}
  for piece in string.gmatch(s .. '|', '([^|]*)|') do out[#out + 1] = piece end
  return out
end
if redis.call('GET', K_EPOCH) ~= EPOCH then
  return {'EPOCH', redis.call('GET', K_EPOCH) or ''}
end
