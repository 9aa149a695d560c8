-- Removes waiters from a fair lock's line whose deadline is past by the
-- caller's clock, or who have no deadline at all, re-checked here so that a
-- waiter that queued again meanwhile keeps its place. Any fair-lock script
-- removes overdue waiters at the head of the line the same way.
-- KEYS: queue, deadlines. ARGV: now (ms), fields...
local removed = 0
for i = 2, #ARGV do
  local field = ARGV[i]
  local deadline = redis.call('zscore', KEYS[2], field)
  if (not deadline) or tonumber(deadline) <= tonumber(ARGV[1]) then
    local gone = redis.call('zrem', KEYS[2], field) + redis.call('lrem', KEYS[1], 0, field)
    if gone > 0 then
      removed = removed + 1
    end
  end
end
return removed
