-- ARGV[2..] tables. Reply: now, then per table: table, its hash as a flat list.
local reply = {lock_ms(lock_now())}
for i = 2, #ARGV do
  reply[#reply + 1] = ARGV[i]
  reply[#reply + 1] = redis.call('HGETALL', k_locks(ARGV[i]))
end
return reply
