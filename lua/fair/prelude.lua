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
-- no longer needs), or re-enters it if `field` holds it. True if it did.
local function take_or_reenter(lock, queue, deadlines, field, lease, wait)
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
    if redis.call('hexists', lock, field) == 1 then
        redis.call('hincrby', lock, field, 1)
        redis.call('pexpire', lock, lease)
        return true
    end
    return false
end
