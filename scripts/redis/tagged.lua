-- tagged.lua: the jobs of one shard tagged T (luakiq jobs DIR --tag T,
-- GET /api/v1/tags/T/jobs), read in bounded steps, and the stale entries
-- met on the way dropped (docs/redis.md, "Tags").
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:". ARGV = tag, cursor ("0" to
-- start), count (SSCAN COUNT, 1..1000).
-- Returns {next cursor ("0": done), then per id still queued, in flight or
-- dead: id, state ("in_flight" | "queued" | "dead"), its tags ("\n"-joined)}.
-- An id that is gone loses its tags here (every tag's set and P tags).
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include tags
local P = KEYS[1]
local K = shard_keys(P)
K.waits = P .. WAITS -- (job_state's "waiting": jobs that wait for a reply, lib/waits.lua)
local tag, cursor, count = ARGV[1], ARGV[2], tonumber(ARGV[3])
if type(tag) ~= "string" or tag == "" then error("BADARG luakiq tagged: ARGV must be tag, cursor, count", 0) end
if not (cursor and cursor:match("^%d+$")) then error("BADARG luakiq tagged: cursor must be an integer >= 0", 0) end
if not count or count % 1 ~= 0 or count < 1 or count > 1000 then
  error("BADARG luakiq tagged: count must be an integer from 1 to 1000", 0)
end
local key = tag_key(P, tag)
local r = redis.call("SSCAN", key, cursor, "COUNT", count)
local out = { r[1] }
for _, id in ipairs(r[2]) do
  local state = job_state(P, K, id)
  local text = redis.call("HGET", K.tags, id)
  if state and text then
    out[#out + 1], out[#out + 2], out[#out + 3] = id, state, text
  elseif text then
    forget_tags(P, K, id, text)
  else
    redis.call("SREM", key, id) -- (no entry: junk)
  end
end
return out
