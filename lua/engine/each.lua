-- Runs one script once per call, for calls that concurrent tasks issued
-- together: one EVALSHA instead of one per call. The script's own text is
-- put in place of the BODY line, so each call runs exactly as it would alone.
-- KEYS every call's keys, in call order
-- ARGV[1] number of calls, ARGV[2] keys per call, ARGV[3] arguments per
--   call; then every call's arguments, in call order
-- Reply: two entries per call, {1, reply}, {2, 0} for a nil reply, or
-- {0, message} when it raised an error (its writes before the error stay,
-- as when run alone).
local function body(KEYS, ARGV)
--BODY--
end
local n, nk, na = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local keys, argv, out = {}, {}, {}
local k, a = 0, 3
for i = 1, n do
    for j = 1, nk do keys[j] = KEYS[k + j] end
    for j = 1, na do argv[j] = ARGV[a + j] end
    k, a = k + nk, a + na
    local ok, r = pcall(body, keys, argv)
    if not ok then
        out[2 * i - 1], out[2 * i] = 0, type(r) == 'table' and r.err or tostring(r)
    elseif r == nil or r == false then
        out[2 * i - 1], out[2 * i] = 2, 0
    elseif type(r) == 'table' and r.err then
        out[2 * i - 1], out[2 * i] = 0, r.err
    elseif type(r) == 'table' and r.ok then
        out[2 * i - 1], out[2 * i] = 1, r.ok
    else
        out[2 * i - 1], out[2 * i] = 1, r
    end
end
return out
