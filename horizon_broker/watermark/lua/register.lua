redis.call('HSET', K_SERVERS, SERVER, 'live')
redis.call('HSET', K_HB, SERVER, now_ms())
-- Registering is the last step of publishing everything again (rule F4): on this primary.
redis.call('HSET', K_PUBLISHED_ON, SERVER, primary_run_id())
emit('register', ARGV[4])
return {'OK'}
