-- jobs.lua: one page of a shard's queued or dead jobs, full records.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".
-- ARGV[1] what: "queue" | "morgue"
--     [2] order: "id" | "perform_in" | "retry_count" (queue) | "updated_at" (morgue)
--     [3] dir: "asc" | "desc"
--     [4] min, [5] max: Redis range syntax, lex for id ("-", "+", "[x", "(x"),
--         scores otherwise ("-inf", "+inf", "1.5", "(1.5"); min <= max for
--         both directions (swapped here for ZREV*)
--     [6] offset, [7] limit
-- Returns {n, records...} (strings), records flattened:
--   queue:  id, perform_in, retry_count, error or "", npayloads, payload, score, ...
--   morgue: id, updated_at, error or "", npayloads, payload, score, ...
-- Payloads in ascending score order. Jobs in flight are not listed (busy.lua).
local P = KEYS[1]
local what, order, dir, min, max = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local offset, limit = tonumber(ARGV[6]), tonumber(ARGV[7])
local sources = {
  queue = { id = "ids", perform_in = "queue", retry_count = "retries" },
  morgue = { id = "morgue:ids", updated_at = "morgue" },
}
local src = sources[what] and sources[what][order]
if not src then
  error("luakiq jobs: bad what/order '" .. tostring(what) .. "'/'" .. tostring(order) ..
        "' (queue: id, perform_in, retry_count; morgue: id, updated_at)", 0)
end
if dir ~= "asc" and dir ~= "desc" then error("luakiq jobs: dir must be asc or desc", 0) end
if not min or not max then error("luakiq jobs: min and max are required", 0) end
for _, v in ipairs({ offset or -1, limit or -1 }) do
  if v ~= math.floor(v) or v < 0 or v > 1e9 then
    error("luakiq jobs: offset and limit must be integers >= 0", 0)
  end
end
if limit == 0 then return { "0" } end
local cmd
if order == "id" then cmd = dir == "asc" and "ZRANGEBYLEX" or "ZREVRANGEBYLEX"
else cmd = dir == "asc" and "ZRANGEBYSCORE" or "ZREVRANGEBYSCORE" end
local lo, hi = min, max
if dir == "desc" then lo, hi = max, min end
local ids = redis.call(cmd, P .. src, lo, hi, "LIMIT", offset, limit)
local out, n = { "0" }, 0
local pre = what == "morgue" and "morgue:" or ""
for _, id in ipairs(ids) do
  local first = redis.call("ZSCORE", P .. (what == "morgue" and "morgue" or "queue"), id)
  if first then
    n = n + 1
    out[#out + 1] = id
    out[#out + 1] = first
    if what == "queue" then out[#out + 1] = redis.call("ZSCORE", P .. "retries", id) or "-1" end
    out[#out + 1] = redis.call("HGET", P .. pre .. "errors", id) or ""
    local pl = redis.call("ZRANGE", P .. pre .. "payloads:" .. id, 0, -1, "WITHSCORES")
    out[#out + 1] = tostring(#pl / 2)
    for k = 1, #pl do out[#out + 1] = pl[k] end
  end
end
out[1] = tostring(n)
return out
