-- One try at a fair lock without joining its queue (Redisson FairLock tryLock()).
-- KEYS[1] lock hash, KEYS[2] waiting queue (list), KEYS[3] waiter deadlines (sorted set)
-- ARGV[1] lease in ms, ARGV[2] owner field, ARGV[3] now (wall clock, ms),
-- ARGV[4] the wait budget (ms) the queue's deadlines are counted with
-- Reply: nil acquired (or re-entered); 1 not acquired (not queued either).
-- (prelude.lua is prepended.)
purge_expired(KEYS[2], KEYS[3], tonumber(ARGV[3]))
if take_or_reenter(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[1], ARGV[4]) then
    return nil
end
return 1
