-- Writes this client's registry entry (who it is: host, process, service)
-- and its TTL. Idempotent: sent at connect and on every watchdog cycle, so
-- an entry a failover or an eviction lost comes back within a cycle.
-- KEYS[1] the entry: redisson_lock__client:<client-id>
-- ARGV[1] TTL in ms; ARGV[2..] field, value, field, value, ...
-- Reply: 1.
redis.call('del', KEYS[1])
redis.call('hset', KEYS[1], unpack(ARGV, 2))
redis.call('pexpire', KEYS[1], ARGV[1])
return 1
