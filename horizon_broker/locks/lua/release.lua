-- ARGV[2] table, ARGV[3] job, then lock ids: the job's own entries go (revoked ones too).
local key, released = k_locks(ARGV[2]), 0
for i = 4, #ARGV do
  local value = redis.call('HGET', key, ARGV[i])
  if value and lock_parse(value).req.job == ARGV[3] then
    redis.call('HDEL', key, ARGV[i])
    released = released + 1
  end
end
return released
