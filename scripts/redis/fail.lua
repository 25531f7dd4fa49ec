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
--      failure: retry_count and error stay),
--      or id, "snooze:T": a snooze (luakiq.snooze, call:snooze): as "at:T",
--      and counters.snoozed += 1 (a reply call's reply is kept, due at T),
--      or id, "fail:T:M:ERR": that id failed with an error of its own (ERR,
--      already dumped) under max_retry_count M (call:fail), perform_in T if
--      retried.
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
-- "done" ids are acked (their payloads deleted, counters.processed += 1 each;
-- with pairs whose id is "", "done:KEEP_S:KEEP_MAX" / "mono:TTL" and
-- "result" then id, JSON: recorded as fetch.lua's ack does, lib/done.lua).
-- In-flight ids not listed go back unchanged (never lost). The busy keys are
-- deleted; counters.failed += number of failed ids (snoozed ones are not
-- failed: counters.snoozed += their number). With only "done" ids this
-- is a partial ack: the ids not performed yet go back to the queue.
-- Waits (lib/waits.lua): a "done" id whose call awaited it starts waiting
-- (not processed); a "done" reply call ends its wait; a failed id's pending
-- wait is dropped and a failed reply call's wait ends (the reply consumed:
-- the retry path performs the job again, a new attempt); a reply or timeout
-- call "at:T" or not listed goes back to due, its reply kept.
-- Returns {"OK", failed, morgued, head or "", then per morgued job: id,
-- payload, score}.
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include shard
WAITS_WANTED = redis.call("EXISTS", KEYS[1] .. WAITS_SEQ) == 1 -- (lib/waits.lua: a shard that awaited)
-- luakiq:include waits
-- luakiq:include args
-- luakiq:include done
local P = KEYS[1]
local K = shard_keys(P)
if W then W.keys(K, P) end -- (lib/waits.lua)
local token, batch, err = ARGV[1], ARGV[4], ARGV[6]
local function finite(x) return x and x == x and x ~= math.huge and x ~= -math.huge end
local lease_ms = arg_lease("fail", token, ARGV[2])
local now = arg_finite("fail", "now", ARGV[3])
local max_rc = arg_finite("fail", "max_retry_count", ARGV[5])
if err == nil or #ARGV % 2 ~= 0 then
  error("BADARG luakiq fail: ARGV must be token, lease_ms, now, batch, max_retry_count, error, then id/perform_in pairs", 0)
end
-- per pair: {id, perform_in string or false ("done"), kind ("at", "snooze",
-- or nil: failed), max_retry_count, error}
local listed = {}
-- (finished jobs, lib/done.lua: pairs whose id is "" carry the worker's
-- options for the "done" ids, "done:KEEP_S:KEEP_MAX" and "mono:TTL", and
-- "result" says the next pair is an id and its result's JSON)
local keep_s, keep_max, mono_ttl, results
local i = 7
while i < #ARGV do
  if ARGV[i] == "" then
    local v = ARGV[i + 1]
    local k, m = v:match("^done:([^:]+):([^:]+)$")
    if k then keep_s, keep_max = arg_finite("fail", "keep_done", k), arg_count("fail", "keep_done_max", m) end
    if v:match("^mono:") then mono_ttl = arg_finite("fail", "mono ttl", v:sub(6)) end
    if v == "result" then
      results = results or {}
      results[ARGV[i + 2] or ""] = ARGV[i + 3]
      i = i + 2
    end
  else
    local v = ARGV[i + 1]
    local kind, t = v:match("^(%a+):(.*)$")
    local m, e = max_rc, err
    if kind == "fail" then
      local ms
      t, ms, e = t:match("^([^:]*):([^:]*):(.*)$")
      m = finite(tonumber(ms)) and tonumber(ms)
      if not m then
        error("BADARG luakiq fail: '" .. ARGV[i] .. "' must be fail:T:MAX_RETRY_COUNT:ERROR, got '" .. v:sub(1, 80) .. "'", 0)
      end
      kind = nil
    elseif kind and kind ~= "at" and kind ~= "snooze" then
      error("BADARG luakiq fail: unknown kind '" .. kind .. "' for '" .. ARGV[i] .. "'", 0)
    end
    local done, pin = v == "done", tonumber(t or v)
    if not done and not finite(pin) then
      error("BADARG luakiq fail: perform_in of '" .. ARGV[i] .. "' must be a finite number, got '" .. v:sub(1, 80) .. "'", 0)
    end
    listed[#listed + 1] = { ARGV[i], not done and string.format("%.17g", pin), kind, m, e }
  end
  i = i + 2
end
local now_s = score_str(now)
local busy, berrs = K.busy, K.busy_errors

local refused = hold_lease(K, token, lease_ms)
if refused then return refused end

local function head()
  local h = queue_head(P, K)
  if W and W.active(K, P) then h = W.head(K, h) end
  return h or ""
end
if redis.call("EXISTS", busy) == 0 or (batch ~= "" and batch ~= redis.call("GET", K.batch)) then
  return { "OK", "0", "0", head() }
end

local out = { "OK", "0", "0", "" }
local failed, morgued, acked, snoozed, seen, fin = 0, 0, 0, 0, {}, {}
-- (a batch with awaited jobs or reply calls: lib/waits.lua)
local aw = W and W.active(K, P) and redis.call("EXISTS", K.waits_new, K.waits_run) > 0
local run = aw and W.run_set(K) or {}
for _, l in ipairs(listed) do
  local id = l[1]
  local v = not seen[id] and redis.call("HGET", busy, id)
  local pin_b, rc_s, prio, win, pl
  if v then pin_b, rc_s, prio, win, pl = busy_decode(v, now_s) end
  if v then seen[id] = true end
  if not pl then
    -- not in flight (or junk: dropped with the busy keys below)
  elseif not l[2] then
    if not aw or W.settle_done(P, K, id, batch ~= "" and batch or redis.call("GET", K.batch), run) == "done" then
      acked = acked + 1
      if keep_s or mono_ttl then fin[#fin + 1], fin[#fin + 2], fin[#fin + 3] = id, rc_s, pl end
    end
  elseif l[3] then
    local snooze = l[3] == "snooze"
    if snooze then
      snoozed = snoozed + 1
      if aw and not run[id] then W.drop_pending(P, K, id) end -- (a wait its call made is dropped)
    end
    if not (aw and W.settle_back(K, id, run, snooze and l[2] or nil)) then
      requeue(P, K, id, l[2], rc_s, redis.call("HGET", berrs, id), pl, prio, win)
    end
  else
    if aw then W.settle_failed(P, K, id, run) end
    failed = failed + 1
    local rc, max_rc, err = tonumber(rc_s) + 1, l[4], l[5]
    if max_rc < 0 then
      -- at most once: every payload of the call to the morgue
      morgue_add(K, id, pl, now_s, err)
      for k = 1, #pl, 2 do
        morgued = morgued + 1
        out[#out + 1] = id
        out[#out + 1] = pl[k]
        out[#out + 1] = score_str(pl[k + 1])
      end
    elseif rc >= max_rc then
      -- the lowest (score, bytes) payload dies; the rest go back fresh
      morgue_add(K, id, { pl[1], pl[2] }, now_s, err)
      morgued = morgued + 1
      out[#out + 1] = id
      out[#out + 1] = pl[1]
      out[#out + 1] = score_str(pl[2])
      local rest = {}
      for k = 3, #pl do rest[k - 2] = pl[k] end
      requeue(P, K, id, now_s, "-1", err, rest, prio, win)
    else
      requeue(P, K, id, l[2], score_str(rc), err, pl, prio, win)
    end
  end
end
-- In-flight ids the caller did not list: back unchanged.
local flat = redis.call("HGETALL", busy)
for i = 1, #flat, 2 do
  local id = flat[i]
  if not seen[id] and not (aw and W.settle_back(K, id, run)) then
    local pin, rc, prio, win, pl = busy_decode(flat[i + 1], now_s)
    if pl then requeue(P, K, id, pin, rc, redis.call("HGET", berrs, id), pl, prio, win) end
  end
end
redis.call("DEL", busy, berrs, K.busy_fetched_at)
if aw then redis.call("DEL", K.waits_run) end
if failed > 0 then redis.call("HINCRBY", K.counters, "failed", failed) end
if acked > 0 then redis.call("HINCRBY", K.counters, "processed", acked) end
if snoozed > 0 then redis.call("HINCRBY", K.counters, "snoozed", snoozed) end
if #fin > 0 then done_jobs(P, now, now_s, fin, keep_s, keep_max, results, mono_ttl) end
out[2], out[3], out[4] = tostring(failed), tostring(morgued), head()
return out
