-- reshard_out.lua: the first step of moving jobs to their shard under a new
-- shards_count (luakiq.ops.reshard; docs/redis.md, "Reshard"). Each given id's
-- queued job, dead job, tags and expiries leave the shard's keys and are
-- staged, as one record, in P reshard:out (same slot, one atomic step), so a
-- reshard killed at any point loses nothing: its next run imports what is
-- staged (reshard_in.lua on the new shard) before it drops it here
-- (reshard_shard.lua "drop"). Importing twice is harmless (the merge is
-- idempotent).
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:". ARGV[1] = the reshard's token,
-- then ids. The shard must be frozen and leased by that token, with nothing
-- in flight (else an error, nothing changed).
-- An id already staged keeps its record (the caller imports it first); an
-- id with nothing here stages nothing.
-- Layout 2 (docs/redis.md): the queued job leaves P jobs and its place (a
-- P ready entry becomes stale, P later or its level loses it); the dead job
-- leaves P morgue:jobs.
-- Record (cmsgpack): {q = false or {pin, rc, error, priority, windows, pl =
-- {payload, score, ...}, ex = {payload, expires_at, ...}}, d = false or
-- {updated_at, error, pl = {...}}, t = tags, w = false or {wait record,
-- pending record, due score, held payloads, held perform_in, held
-- priority, secret pads}} ("" = none; pin, rc, updated_at, expires_at Redis
-- score strings, payload scores numbers; in w, false = none). w: a job that
-- waits for a reply (lib/waits.lua) moves with its wait, its pending wait,
-- its held job and the queue's secret (tokens stay valid: per queue).
-- Returns {id, record, ...} of every given id that is staged.
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include tags
-- luakiq:include shard
WAITS_WANTED = redis.call("EXISTS", KEYS[1] .. WAITS_SEQ) == 1 -- (lib/waits.lua: a shard that awaited)
-- luakiq:include waits
local P = KEYS[1]
local K = shard_keys(P)
if W then W.keys(K, P) end -- (lib/waits.lua)
local token = ARGV[1]
if not token or token == "" then error("BADARG luakiq reshard_out: token is empty", 0) end
if redis.call("GET", K.reshard) ~= token or redis.call("GET", K.lease) ~= token then
  error("FENCED luakiq reshard_out: the shard is not frozen and leased by this reshard", 0)
end
if redis.call("EXISTS", K.busy) == 1 then error("INFLIGHT luakiq reshard_out: jobs are in flight", 0) end
local out = {}
local expiring = redis.call("EXISTS", K.expiring) == 1
for i = 2, #ARGV do
  local id = ARGV[i]
  local rec = redis.call("HGET", K.reshard_out, id)
  if not rec then
    local r, any = { q = false, d = false, t = "" }, false
    local m, E, place, pin, pl = find_job(K, id)
    if m then
      -- (a junk record is dropped with the id's queued fields)
      redis.call("ZREM", K.jobs, m)
      if place then
        local prio = place == "p" and redis.call("HGET", K.prio, id) or nil
        r.q = { score_str(pin), redis.call("ZSCORE", K.retries, id) or "-1", redis.call("HGET", K.errors, id) or "",
                prio or "", has_windows(K) and redis.call("HGET", K.windows, id) or "",
                pl = pl, ex = expiring and redis.call("HGETALL", expires_key(P, id)) or {} }
        any = true
        leave_place(P, K, id, place, prio)
      end
      if has_windows(K) then redis.call("HDEL", K.windows, id) end
      redis.call("ZREM", K.retries, id)
      redis.call("HDEL", K.errors, id)
      if expiring then
        redis.call("DEL", expires_key(P, id))
        redis.call("SREM", K.expiring, id)
      end
    end
    if W and W.active(K, P) then
      local wr, pr, hm = redis.call("HGET", K.waits, id), redis.call("HGET", K.waits_new, id), find_member(K.held, E)
      if wr or pr or hm then
        local hp, hpin, hpl
        if hm then hp, hpin, hpl = job_decode(hm, E) end
        r.w = { wr or false, pr or false, redis.call("ZSCORE", K.waits_due, id) or false, hpl or false,
                hp and score_str(hpin) or false, hp == "p" and redis.call("HGET", K.prio, id) or false,
                redis.call("GET", K.waits_key) or false }
        any = true
        redis.call("HDEL", K.waits, id)
        redis.call("HDEL", K.waits_new, id)
        redis.call("ZREM", K.waits_due, id)
        if hm then redis.call("ZREM", K.held, hm) end
        if hp == "p" then redis.call("HDEL", K.prio, id) end
      end
    end
    local upd = redis.call("ZSCORE", K.morgue, id)
    local dm = find_member(K.morgue_jobs, E)
    if upd then
      local dpl = dm and morgue_decode(dm, E)
      if dpl then
        r.d = { upd, redis.call("HGET", K.morgue_errors, id) or "", pl = dpl }
        any = true
      end
      redis.call("ZREM", K.morgue, id)
      redis.call("HDEL", K.morgue_errors, id)
    end
    if dm then redis.call("ZREM", K.morgue_jobs, dm) end
    local text = has_tags(K) and redis.call("HGET", K.tags, id)
    if text then
      if any then r.t = text end
      forget_tags(P, K, id, text)
    end
    if any then
      rec = cmsgpack.pack(r)
      redis.call("HSET", K.reshard_out, id, rec)
    end
  end
  if rec then
    out[#out + 1] = id
    out[#out + 1] = rec
  end
end
return out
