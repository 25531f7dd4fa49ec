-- job.lua: where one job is, read only (luakiq job / GET .../jobs/ID).
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:". ARGV[1] = id.
-- Returns {state, ...} (strings), the first state that holds, in this order:
--   "in_flight", perform_in, retry_count, error or "", holder token or "",
--       fetched_at or "", priority, windows or "", npayloads, payload, score,
--       ...   (the fetched payloads)
--   "queued", perform_in, retry_count, error or "", priority, windows or "",
--       npayloads, payload, score, ...
--   "dead", updated_at, error or "", npayloads, payload, score, ...
--   "" (the id is nowhere)
-- An id can be in flight and queued at once (payloads pushed while its batch
-- runs wait behind it): then "in_flight", with nqueued payloads after the
-- in-flight ones: ..., npayloads, payloads..., nqueued, payload, score, ...
-- luakiq:include keys
-- luakiq:include levels
local P, id = KEYS[1], ARGV[1]
local K = shard_keys(P)
if type(id) ~= "string" then error("luakiq job: ARGV must be the id", 0) end

local function payloads(key, out)
  local pl = redis.call("ZRANGE", key, 0, -1, "WITHSCORES")
  out[#out + 1] = tostring(#pl / 2)
  for i = 1, #pl do out[#out + 1] = pl[i] end
end

local entry = redis.call("HGET", K.busy, id)
local queued, prio = queued_at(P, K, id)
if entry then
  local pin, rc, bprio, win = busy_entry(entry, "0")
  local out = { "in_flight", pin, rc, redis.call("HGET", K.busy_errors, id) or "",
                redis.call("GET", K.lease) or redis.call("GET", K.holder) or "",
                redis.call("GET", K.busy_fetched_at) or "", bprio or "100", win or "" }
  payloads(busy_payloads_key(P, id), out)
  if queued then payloads(payloads_key(P, id), out) end
  return out
end
if queued then
  local out = { "queued", queued, redis.call("ZSCORE", K.retries, id) or "-1", redis.call("HGET", K.errors, id) or "",
                prio or "100", has_windows(K) and redis.call("HGET", K.windows, id) or "" }
  payloads(payloads_key(P, id), out)
  return out
end
local dead = redis.call("ZSCORE", K.morgue, id)
if dead then
  local out = { "dead", dead, redis.call("HGET", K.morgue_errors, id) or "" }
  payloads(morgue_payloads_key(P, id), out)
  return out
end
return { "" }
