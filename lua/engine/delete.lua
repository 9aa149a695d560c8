-- Delete an object's keys whoever holds it, without a message (Redisson's
-- delete() of a fair lock: the lock, its queue and its deadlines; of a
-- fenced lock: the lock and its token). A script only so that it is sent
-- once, like every lock write.
-- KEYS the object's keys (one hash slot)
-- Reply: how many of them existed.
return redis.call('del', unpack(KEYS))
