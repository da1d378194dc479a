-- The store's clock with the log position it goes with: a follower that has applied every event
-- up to that position may let parked partitions follow the clock up to it.
return {redis.call('GET', K_EPOCH) or '', redis.call('GET', K_SEQ) or '0', store_now()}
