-- job.lua: where one job is, read only (luakiq job / GET .../jobs/ID).
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:". ARGV[1] = id, [2] (optional) the
-- time before which a finished record is not answered (now - keep_done).
-- Returns {state, ...} (strings), the first state that holds, in this order:
--   "in_flight", perform_in, retry_count, error or "", holder token or "",
--       fetched_at or "", priority, windows or "", npayloads, payload, score,
--       ...   (the fetched payloads)
--   "queued", perform_in, retry_count, error or "", priority, windows or "",
--       npayloads, payload, score, ...
--   "waiting", attempt, "waiting" | "replied", since, deadline, heartbeat
--       deadline or "", key or "", perform_in, retry_count, priority,
--       windows or "", npayloads, payload, score, ... (the waiting job), then
--       nheld, payload, score, ... (payloads pushed meanwhile, P held)
--   "dead", updated_at, error or "", npayloads, payload, score, ...
--   "finished", record (keep_done: the JSON record lib/done.lua keeps of a
--       job done or cancelled: state, finished_at, attempts[, result])
--   "" (the id is nowhere)
-- (A waiting job's reply or timeout call is in flight: "in_flight".)
-- An id can be in flight and queued at once (payloads pushed while its batch
-- runs wait behind it): then "in_flight", with nqueued payloads after the
-- in-flight ones: ..., npayloads, payloads..., nqueued, payload, score, ...
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include shard
WAITS_WANTED = redis.call("EXISTS", KEYS[1] .. WAITS_SEQ) == 1 -- (lib/waits.lua: a shard that awaited)
-- luakiq:include waits
-- luakiq:include listing
-- luakiq:include done
local P, id = KEYS[1], ARGV[1]
local K = shard_keys(P)
if W then W.keys(K, P) end -- (lib/waits.lua)
if type(id) ~= "string" then error("BADARG luakiq job: ARGV must be the id", 0) end

local entry = redis.call("HGET", K.busy, id)
local m, _, place, qpin, qpl = find_job(K, id)
local bpin, rc, bprio, win, bpl
if entry then bpin, rc, bprio, win, bpl = busy_decode(entry) end
if bpl then
  local out = { "in_flight", bpin, rc, redis.call("HGET", K.busy_errors, id) or "",
                redis.call("GET", K.lease) or redis.call("GET", K.holder) or "",
                redis.call("GET", K.busy_fetched_at) or "", bprio or "100", win or "" }
  put_payloads(out, bpl)
  if place then put_payloads(out, qpl) end
  return out
end
if place then
  local prio = place == "p" and redis.call("HGET", K.prio, id) or nil
  local out = { "queued", score_str(qpin), redis.call("ZSCORE", K.retries, id) or "-1",
                redis.call("HGET", K.errors, id) or "",
                prio or "100", has_windows(K) and redis.call("HGET", K.windows, id) or "" }
  put_payloads(out, qpl)
  return out
end
local w = W and W.active(K, P) and W.get(K, id)
if w and w.state ~= "handling" then
  local pin, wrc, prio, wwin, pl = busy_decode(w.job or "")
  local out = { "waiting", tostring(w.attempt), w.state, score_str(w.since), score_str(w.deadline),
                w.beat and score_str(w.beat) or "", w.key or "", pin or "", wrc or "-1", prio or "100", wwin or "" }
  put_payloads(out, pl or {})
  local E = esc(id)
  local h = find_member(K.held, E)
  put_payloads(out, h and select(3, job_decode(h, E)) or {})
  return out
end
local dead = redis.call("ZSCORE", K.morgue, id)
if dead then
  local E = esc(id)
  local dm = find_member(K.morgue_jobs, E)
  local out = { "dead", dead, redis.call("HGET", K.morgue_errors, id) or "" }
  put_payloads(out, dm and morgue_decode(dm, E) or {})
  return out
end
local fin = done_get(P, id, tonumber(ARGV[2]))
if fin then return { "finished", fin } end
return { "" }
