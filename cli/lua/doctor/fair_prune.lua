-- Removes waiters from a fair lock's line whose deadline is past by this
-- server's clock (TIME: the clock every check of the line is judged by,
-- not the clock of the host doctor runs on), or who have no deadline at
-- all, re-checked here so that a waiter that queued again meanwhile keeps
-- its place. Any fair-lock script removes overdue waiters at the head of the
-- line the same way.
-- KEYS: queue, deadlines. ARGV: fields...
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local removed = 0
for i = 1, #ARGV do
  local field = ARGV[i]
  local deadline = redis.call('zscore', KEYS[2], field)
  if (not deadline) or tonumber(deadline) <= now then
    local gone = redis.call('zrem', KEYS[2], field) + redis.call('lrem', KEYS[1], 0, field)
    if gone > 0 then
      removed = removed + 1
    end
  end
end
return removed
