-- ARGV[4] the server's clock (an HLC; '' = none): the LWM of its idle partitions
local status = redis.call('HGET', K_SERVERS, SERVER)
if status == 'decommissioned' or status == 'parked' then
  return {'ERR', 'FAILED_PRECONDITION', 'server ' .. SERVER .. ' is ' .. status ..
          ': register it again'}
end
if not status then
  return {'ERR', 'FAILED_PRECONDITION', 'server ' .. SERVER .. ' is not registered'}
end
redis.call('HSET', K_HB, SERVER, now_ms())
local event = {}
if ARGV[4] ~= '' then
  local clock = hlc_max(redis.call('HGET', K_HBCLOCK, SERVER) or '', ARGV[4])
  redis.call('HSET', K_HBCLOCK, SERVER, clock)
  event['clock'] = clock
end
emit('heartbeat', cjson.encode(event))
return {'OK'}
