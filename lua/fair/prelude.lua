-- Prepended to the fair-lock scripts that need it (Lua scripts cannot include
-- each other).

-- Waiters at the head of the queue whose deadline has passed leave it.
local function purge_expired(queue, deadlines, now)
    while true do
        local head = redis.call('lindex', queue, 0)
        if head == false then
            return
        end
        local deadline = tonumber(redis.call('zscore', deadlines, head))
        if deadline == nil or deadline > now then
            return
        end
        redis.call('zrem', deadlines, head)
        redis.call('lpop', queue)
    end
end

-- Takes the lock for `field` if it is free and nobody else is first in line
-- (every other waiter's deadline then shrinks by the `wait` budget this one
-- no longer needs). True if it did.
local function take(lock, queue, deadlines, field, lease, wait)
    if redis.call('exists', lock) == 0
        and (redis.call('exists', queue) == 0 or redis.call('lindex', queue, 0) == field) then
        redis.call('lpop', queue)
        redis.call('zrem', deadlines, field)
        for _, waiter in ipairs(redis.call('zrange', deadlines, 0, -1)) do
            redis.call('zincrby', deadlines, -tonumber(wait), waiter)
        end
        redis.call('hset', lock, field, 1)
        redis.call('pexpire', lock, lease)
        return true
    end
    return false
end

-- As `take`, or re-enters the lock if `field` holds it. True if it did.
local function take_or_reenter(lock, queue, deadlines, field, lease, wait)
    if take(lock, queue, deadlines, field, lease, wait) then
        return true
    end
    if redis.call('hexists', lock, field) == 1 then
        redis.call('hincrby', lock, field, 1)
        redis.call('pexpire', lock, lease)
        return true
    end
    return false
end

-- Keeps `field`'s place in the queue, or gives it one after the last waiter,
-- with a deadline `wait` after the previous waiter's. Returns how long to wait
-- (ms) before trying again: for a queued waiter the lock's PTTL (0 when it is
-- free but someone else is first in line), for a new one the time until the
-- waiter before it gives up.
local function wait_in_line(lock, queue, deadlines, field, wait, now)
    if redis.call('zscore', deadlines, field) ~= false then
        return math.max(0, redis.call('pttl', lock))
    end
    local ttl
    local last = redis.call('lindex', queue, -1)
    local last_deadline = false
    if last ~= false and last ~= field then
        last_deadline = redis.call('zscore', deadlines, last)
    end
    if last_deadline ~= false then
        ttl = tonumber(last_deadline) - now
    else
        ttl = redis.call('pttl', lock)
    end
    if redis.call('zadd', deadlines, ttl + tonumber(wait) + now, field) == 1 then
        redis.call('rpush', queue, field)
    end
    return ttl
end
