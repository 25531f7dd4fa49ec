-- fail.lua: the whole failure path of a batch as one atomic step
-- (docs/redis.md, "fail.lua" and "Merge rules"): no crash can duplicate or
-- lose a payload.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".
-- ARGV[1] token, [2] lease_ms, [3] now, [4] batch id (from fetch.lua; "" =
--      whatever is in flight), [5] max_retry_count, [6] error (already dumped;
--      "" = none), then pairs: id, perform_in_if_retried (now + retry_in(rc))
--      or id, "done": that id was performed and succeeded (the host performs
--      a fetched batch in several perform calls when fetch_size > batch_size),
--      or id, "at:T": that id was not performed (a throttle or a window
--      said later): it goes back unchanged but for perform_in = T (not a
--      failure: retry_count and error stay).
-- Lease: refused with {"LEASE", pttl} unless this token holds the lease, or
-- holds nothing but was the last holder (its lease expired and nobody took
-- it: it re-acquires). A batch id that is not the one in flight (already
-- failed or restored: a re-sent call) changes nothing.
-- Per listed in-flight id, rc = stored retry_count + 1:
--   max_retry_count < 0 (delivery = "at_most_once"): every payload goes to
--     the morgue (morgued counts payloads then, one triple each);
--   rc >= max_retry_count: its lowest-score payload goes to the morgue
--     (updated_at = now, min score, error); the other payloads go back with
--     retry_count -1, perform_in now;
--   else all payloads go back with retry_count rc, the given perform_in.
-- "Go back" = "failed + queued" merge: perform_in, retry_count and error of
-- the failed job overwrite a queued same-id job's; payloads united, min score.
-- "done" ids are acked (their payloads deleted, counters.processed += 1 each).
-- In-flight ids not listed go back unchanged (never lost). The busy keys are
-- deleted; counters.failed += number of failed ids. With only "done" ids this
-- is a partial ack: the ids not performed yet go back to the queue.
-- Returns {"OK", failed, morgued, head or "", then per morgued job: id,
-- payload, score}.
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include shard
-- luakiq:include args
local P = KEYS[1]
local K = shard_keys(P)
local token, batch, err = ARGV[1], ARGV[4], ARGV[6]
local function finite(x) return x and x == x and x ~= math.huge and x ~= -math.huge end
local lease_ms = arg_lease("fail", token, ARGV[2])
local now = arg_finite("fail", "now", ARGV[3])
local max_rc = arg_finite("fail", "max_retry_count", ARGV[5])
if err == nil or #ARGV % 2 ~= 0 then
  error("luakiq fail: ARGV must be token, lease_ms, now, batch, max_retry_count, error, then id/perform_in pairs", 0)
end
local listed = {}
for i = 7, #ARGV, 2 do
  local at = ARGV[i + 1]:match("^at:(.*)$")
  local done, pin = ARGV[i + 1] == "done", tonumber(at or ARGV[i + 1])
  if not done and not finite(pin) then
    error("luakiq fail: perform_in of '" .. ARGV[i] .. "' must be a finite number, got '" .. ARGV[i + 1] .. "'", 0)
  end
  listed[#listed + 1] = { ARGV[i], not done and string.format("%.17g", pin), at ~= nil }
end
local now_s = string.format("%.17g", now)
local busy, berrs = K.busy, K.busy_errors

local refused = hold_lease(K, token, lease_ms)
if refused then return refused end

local function head() return queue_head(P, K) or "" end
if redis.call("EXISTS", busy) == 0 or (batch ~= "" and batch ~= redis.call("GET", K.batch)) then
  return { "OK", "0", "0", head() }
end

-- Moves the payload zset src of id back to the queue (failed + queued),
-- with its priority and windows (from its busy entry v).
local function back(id, pin, rc, e, src, v)
  if redis.call("EXISTS", src) == 0 then return end
  local _, _, prio, win = busy_entry(v, pin)
  queue_at(P, K, id, pin, merged_priority(P, K, id, prio))
  set_windows(K, id, win)
  set_retry(K, id, rc)
  redis.call("ZADD", K.ids, 0, id)
  merge_payloads(src, payloads_key(P, id))
  if e and e ~= "" then redis.call("HSET", K.errors, id, e) else redis.call("HDEL", K.errors, id) end
end

local out = { "OK", "0", "0", "" }
local failed, morgued, acked, seen = 0, 0, 0, {}
for _, l in ipairs(listed) do
  local id = l[1]
  local v = not seen[id] and redis.call("HGET", busy, id)
  if v and not l[2] then
    seen[id] = true
    if redis.call("DEL", busy_payloads_key(P, id)) == 1 then acked = acked + 1 end
  elseif v and l[3] then
    seen[id] = true
    local _, rc_s = busy_entry(v, now_s)
    back(id, l[2], rc_s, redis.call("HGET", berrs, id), busy_payloads_key(P, id), v)
  elseif v then
    seen[id] = true
    failed = failed + 1
    local _, rc_s = busy_entry(v, now_s)
    local rc = tonumber(rc_s) + 1
    local src = busy_payloads_key(P, id)
    if max_rc < 0 then
      -- at most once: every payload of the call to the morgue
      local moved = morgue_all(K, P, id, src, now_s, err)
      for k = 1, #moved, 2 do
        morgued = morgued + 1
        out[#out + 1] = id
        out[#out + 1] = moved[k]
        out[#out + 1] = moved[k + 1]
      end
    elseif rc >= max_rc then
      local first = redis.call("ZRANGE", src, 0, 0, "WITHSCORES")
      if first[1] then
        redis.call("ZREM", src, first[1])
        redis.call("ZADD", K.morgue, now_s, id)
        redis.call("ZADD", K.morgue_ids, 0, id)
        redis.call("ZADD", morgue_payloads_key(P, id), "LT", first[2], first[1])
        if err ~= "" then redis.call("HSET", K.morgue_errors, id, err)
        else redis.call("HDEL", K.morgue_errors, id) end
        morgued = morgued + 1
        out[#out + 1] = id
        out[#out + 1] = first[1]
        out[#out + 1] = first[2]
      end
      back(id, now_s, "-1", err, src, v)
    else
      back(id, l[2], string.format("%.17g", rc), err, src, v)
    end
  end
end
-- In-flight ids the caller did not list: back unchanged.
local flat = redis.call("HGETALL", busy)
for i = 1, #flat, 2 do
  local id = flat[i]
  if not seen[id] then
    local pin, rc = busy_entry(flat[i + 1], now_s)
    back(id, pin, rc, redis.call("HGET", berrs, id), busy_payloads_key(P, id), flat[i + 1])
  end
end
redis.call("DEL", busy, berrs, K.busy_fetched_at)
if failed > 0 then redis.call("HINCRBY", K.counters, "failed", failed) end
if acked > 0 then redis.call("HINCRBY", K.counters, "processed", acked) end
out[2], out[3], out[4] = tostring(failed), tostring(morgued), head()
return out
