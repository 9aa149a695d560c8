-- Runs one script once per call, for calls that concurrent tasks issued
-- together: one EVALSHA instead of one per call. The script's own text is
-- put in place of the BODY line, so each call runs exactly as it would alone.
-- KEYS every call's keys, in call order
-- ARGV[1] number of calls, ARGV[2] keys per call, ARGV[3] arguments per
--   call; then every call's arguments, in call order
-- Reply: two entries per call, {1, reply}, {2, 0} for a nil reply, {0,
-- message} when it raised an error (its writes before the error stay, as
-- when run alone), or {3, 0} when it was not run (below).
local function body(KEYS, ARGV)
--BODY--
end
-- A script whose work can grow with data on Redis (a fair lock's queue)
-- replaces the SMALL line with `small = function(KEYS) ... end`, true when
-- that data is absent for a call: only such calls run here, so the batch
-- costs what its calls send. The others are not run and go out on their own.
local small = nil
--SMALL--
local n, nk, na = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local keys, argv, out = {}, {}, {}
local k, a = 0, 3
for i = 1, n do
    for j = 1, nk do keys[j] = KEYS[k + j] end
    for j = 1, na do argv[j] = ARGV[a + j] end
    k, a = k + nk, a + na
    if small and not small(keys) then
        out[2 * i - 1], out[2 * i] = 3, 0
    else
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
end
return out
