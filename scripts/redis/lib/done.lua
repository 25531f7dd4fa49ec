-- Finished jobs ("luakiq:include done"; docs/redis.md, "Finished jobs"):
-- with the worker key keep_done (seconds, 0 = off) a job that is done or
-- cancelled leaves a record behind, so `luakiq job` / GET .../jobs/ID can
-- answer "done" or "cancelled" instead of "not found". Two keys a shard,
-- built here and not in shard_keys (a worker that keeps nothing pays for no
-- name):
--   P done     HASH id -> record, JSON: {"state":"done"|"cancelled",
--              "finished_at":T,"attempts":N[,"result":V]} (V: the JSON text
--              the host sent, from call:result; not decoded here)
--   P done:at  ZSET id -> finished_at (the order records leave in)
-- Bounded both ways: a record leaves keep_s seconds after finished_at, and
-- a shard keeps at most keep_max records (the oldest leave first).
local DONE, DONE_AT = "done", "done:at"

-- Records job `id` as finished in state `state` ("done" or "cancelled") at
-- `now`, after `attempts` attempts, with `result` (JSON text or nil). A
-- later record of the same id replaces the earlier one.
local function done_keep(P, id, state, now, attempts, result)
  local rec = '{"state":"' .. state .. '","finished_at":' .. string.format("%.17g", now) ..
    ',"attempts":' .. string.format("%d", attempts) .. (result and (',"result":' .. result) or "") .. "}"
  redis.call("HSET", P .. DONE, id, rec)
  redis.call("ZADD", P .. DONE_AT, now, id)
end

-- Drops the records older than keep_s seconds and the oldest beyond
-- keep_max. Once per script call, after its done_keep calls.
local function done_trim(P, now, keep_s, keep_max)
  local at = P .. DONE_AT
  local old = redis.call("ZRANGEBYSCORE", at, "-inf", "(" .. string.format("%.17g", now - keep_s), "LIMIT", 0, 1000)
  local n = redis.call("ZCARD", at) - #old
  if n > keep_max then
    local more = redis.call("ZRANGE", at, #old, #old + (n - keep_max) - 1)
    for i = 1, #more do old[#old + 1] = more[i] end
  end
  for i = 1, #old, 500 do
    local part = { unpack(old, i, math.min(i + 499, #old)) }
    redis.call("HDEL", P .. DONE, unpack(part))
    redis.call("ZREM", at, unpack(part))
  end
end

-- The record of job `id` (JSON text) or nil.
local function done_get(P, id)
  return redis.call("HGET", P .. DONE, id) or nil
end
