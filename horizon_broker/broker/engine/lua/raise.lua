-- ARGV[2..] table, snapshot pairs: each stored snapshot only moves up
local key = P .. ':floor'
for i = 2, #ARGV, 2 do
  local old = redis.call('HGET', key, ARGV[i])
  if not old or pad(old) < pad(ARGV[i + 1]) then redis.call('HSET', key, ARGV[i], ARGV[i + 1]) end
end
return 'OK'
