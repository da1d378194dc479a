-- The entries of stream KEYS[1] from ARGV[1] on (at most ARGV[2]) counted in Redis, and the
-- first one's id: a table's lag without sending the entries back.
local entries = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', ARGV[2])
if #entries == 0 then return {0, false} end
return {#entries, entries[1][1]}
