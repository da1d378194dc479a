redis.call('HSET', K_SERVERS, SERVER, 'live')
redis.call('HSET', K_HB, SERVER, now_ms())
emit('register', ARGV[4])
return {'OK'}
