redis.call('SET', K_EPOCH, ARGV[2], 'NX')
return {'OK', redis.call('GET', K_EPOCH)}
