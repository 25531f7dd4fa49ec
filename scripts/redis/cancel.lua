-- cancel.lua: cancel jobs by id (docs/redis.md, "cancel.lua"; luakiq cancel,
-- POST .../jobs/ID/cancel), and the end of a running call that was
-- cancelled (the host's side).
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".
-- ARGV[1] op:
--   "cancel", [2] now, [3] wake channel (as push.lua's: "" none, "!"
--     SPUBLISH on P .. "wake", else PUBLISH there), [4] keep_s, [5] keep_max
--     (the worker's keep_done, keep_done_max: lib/done.lua), then ids.
--     Per id: a queued job goes (every payload, with its place, retry
--     count, error, windows, priority: lib/shard.lua unqueue_job); a wait
--     for a reply goes (lib/waits.lua: its token then answers STALE) with
--     the payloads held behind it; each counted in P counters "cancelled"
--     and kept as "cancelled" per keep_done. A job in flight is marked (P
--     cancel id -> now) and its hosts are told: P .. "\0" .. id on the wake
--     channel (a host that knows no cancel takes it for a wake-up of P);
--     the host ends it ("end" below). Replies per id, in order, one of
--     "running", "waiting", "queued", "not_found" (running also when a
--     queued job of the id was removed with it).
--   "end", [2] now, [3] token, [4] batch, [5] keep_s, [6] keep_max, then
--     the ids of a call the host stopped because of a cancel: each marked
--     id leaves P busy as cancelled (counted, kept per keep_done, its
--     pending wait dropped, its reply call's wait ended); the others go
--     back to the queue unchanged (they were interrupted, not failed).
--     Replies {"OK", cancelled}, or {"LEASE"} (nothing changed) unless
--     token holds the lease and batch is the one in flight.
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include shard
WAITS_WANTED = redis.call("EXISTS", KEYS[1] .. WAITS_SEQ) == 1 -- (lib/waits.lua: a shard that awaited)
-- luakiq:include waits
-- luakiq:include tags
-- luakiq:include done
-- luakiq:include args
local P = KEYS[1]
local K = shard_keys(P)
if W then W.keys(K, P) end
local CANCEL = P .. CANCEL -- (lib/keys.lua)
local op = ARGV[1]
local now = arg_finite("cancel", "now", ARGV[2])
local kept = false

-- Records id as cancelled after `attempts` attempts.
local function cancelled(id, attempts, keep_s)
  redis.call("HINCRBY", K.counters, "cancelled", 1)
  if keep_s > 0 then
    done_keep(P, id, "cancelled", now, attempts, nil)
    kept = true
  end
end

-- What is left of an id that is gone from the shard: its expiry hash and tags.
local function forget(id)
  if job_state(P, K, id) then return end
  if redis.call("SREM", K.expiring, id) == 1 then redis.call("DEL", expires_key(P, id)) end
  local text = has_tags(K) and redis.call("HGET", K.tags, id)
  if text then forget_tags(P, K, id, text) end
end

if op == "cancel" then
  local channel = ARGV[3]
  local keep_s, keep_max = arg_finite("cancel", "keep_s", ARGV[4]), arg_finite("cancel", "keep_max", ARGV[5])
  if not channel then error("BADARG luakiq cancel: ARGV must be cancel, now, channel, keep_s, keep_max, then ids", 0) end
  local out = {}
  for i = 6, #ARGV do
    local id = ARGV[i]
    local rc = tonumber(redis.call("ZSCORE", K.retries, id) or "-1")
    local queued = unqueue_job(P, K, id) == 1
    local state = queued and "queued" or "not_found"
    if redis.call("HEXISTS", K.busy, id) == 1 then
      state = "running"
      redis.call("HSET", CANCEL, id, score_str(now))
      wake_cancel(channel, P, id)
    else
      local w = W and W.get(K, id)
      if w then
        state = "waiting"
        local _, wrc = busy_decode(w.job or "")
        rc = tonumber(wrc or "-1") + 1
        redis.call("HDEL", K.waits, id)
        redis.call("ZREM", K.waits_due, id)
        redis.call("SREM", K.waits_run, id)
        redis.call("HDEL", K.waits_new, id)
        local h = find_member(K.held, esc(id))
        if h then redis.call("ZREM", K.held, h) end
        redis.call("HDEL", K.prio, id)
      end
      if state ~= "not_found" then
        cancelled(id, rc + 1, keep_s)
        forget(id)
      end
    end
    out[#out + 1] = state
  end
  -- marks of jobs that finished before their host saw them
  for _, id in ipairs(redis.call("HKEYS", CANCEL)) do
    if redis.call("HEXISTS", K.busy, id) == 0 then redis.call("HDEL", CANCEL, id) end
  end
  if kept then done_trim(P, now, keep_s, keep_max) end
  return out
end

if op ~= "end" or #ARGV < 7 then
  error("BADARG luakiq cancel: ARGV must be cancel, now, channel, keep_s, keep_max, ids... or end, now, token, " ..
    "batch, keep_s, keep_max, ids...", 0)
end
local token, batch = ARGV[3], ARGV[4]
local keep_s, keep_max = arg_finite("cancel", "keep_s", ARGV[5]), arg_finite("cancel", "keep_max", ARGV[6])
local lf = redis.call("MGET", K.lease, K.batch)
if lf[1] ~= token or lf[2] ~= batch then return { "LEASE" } end
local run = W and W.run_set(K) or {}
local n = 0
for i = 7, #ARGV do
  local id = ARGV[i]
  local rec = redis.call("HGET", K.busy, id)
  if rec then
    local pin, rc, prio, win, pl = busy_decode(rec, score_str(now))
    if redis.call("HDEL", CANCEL, id) == 1 then
      if W then
        local h = find_member(K.held, esc(id)) -- (the payloads held behind its wait go with it)
        if h then redis.call("ZREM", K.held, h) end
        W.settle_failed(P, K, id, run)
      end
      redis.call("HDEL", K.busy, id)
      redis.call("HDEL", K.busy_errors, id)
      cancelled(id, tonumber(rc or "-1") + 2, keep_s)
      forget(id)
      n = n + 1
    else
      if not (W and W.settle_back(K, id, run)) then
        if W then W.drop_pending(P, K, id) end
        if pl then requeue(P, K, id, pin, rc, redis.call("HGET", K.busy_errors, id), pl, prio, win) end
      end
      redis.call("HDEL", K.busy, id)
      redis.call("HDEL", K.busy_errors, id)
    end
  end
end
busy_settle(K)
if kept then done_trim(P, now, keep_s, keep_max) end
return { "OK", tostring(n) }
