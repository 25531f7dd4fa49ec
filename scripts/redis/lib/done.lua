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
-- Bounded both ways: a record leaves keep_s seconds after finished_at (at
-- the next trim; job.lua answers none older; both keys expire keep_s + 1 s
-- after the last trim), and a shard keeps at most keep_max records (the
-- oldest leave first).
local DONE, DONE_AT = "done", "done:at"
local MONO, MONO_AT = "mono", "mono:at" -- (Stale payloads, below)
-- (made only while DONE_WANTED, lib/keys.lua: a fetch of a worker that uses
-- none of this defines no function)
local expire_in, put_indexed, done_keep, done_trim, done_get, mono_get, mono_drop, done_jobs, done_batch
if DONE_WANTED then
  -- Keys that vanish ttl seconds after their last write (a shard whose jobs
  -- stopped: the trims of acks no longer come).
  function expire_in(ttl, ...)
    local ms = string.format("%d", math.ceil(ttl * 1000))
    for _, k in ipairs({ ... }) do redis.call("PEXPIRE", k, ms) end
  end

  -- HSET hash fields (id, value, ...) and ZADD zset at (score, id, ...), in
  -- commands of at most 500 pairs (Lua's unpack has a limit).
  function put_indexed(hash, fields, zset, at)
    for i = 1, #fields, 1000 do
      redis.call("HSET", hash, unpack(fields, i, math.min(i + 999, #fields)))
      redis.call("ZADD", zset, unpack(at, i, math.min(i + 999, #at)))
    end
  end

  -- Records job `id` as finished in state `state` ("done" or "cancelled") at
  -- `now`, after `attempts` attempts, with `result` (JSON text or nil). A
  -- later record of the same id replaces the earlier one.
  function done_keep(P, id, state, now, attempts, result)
    local rec = '{"state":"' .. state .. '","finished_at":' .. string.format("%.17g", now) ..
      ',"attempts":' .. string.format("%d", attempts) .. (result and (',"result":' .. result) or "") .. "}"
    redis.call("HSET", P .. DONE, id, rec)
    redis.call("ZADD", P .. DONE_AT, now, id)
  end

  -- Drops the records older than keep_s seconds and the oldest beyond
  -- keep_max. Once per script call, after its done_keep calls.
  function done_trim(P, now, keep_s, keep_max)
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
    expire_in(keep_s + 1, P .. DONE, at)
  end

  -- The record of job `id` (JSON text) or nil; since (a number or nil): nil
  -- too when it finished before since (its keep_done ran out, the trim of
  -- the next ack has not come).
  function done_get(P, id, since)
    local rec = redis.call("HGET", P .. DONE, id)
    if not rec then return nil end
    if since and (tonumber(redis.call("ZSCORE", P .. DONE_AT, id)) or since) < since then return nil end
    return rec
  end


  -- Stale payloads (the worker key monotonic; docs/redis.md, "Stale
  -- payloads"): per id the highest score performed, remembered for mono_ttl
  -- seconds after the id's last ack. Two keys a shard, built here too:
  --   P mono     HASH id -> the highest score acked done (%.17g)
  --   P mono:at  ZSET id -> when that id was last acked (the order entries
  --              leave in: each ack of a monotonic worker drops those older
  --              than mono_ttl, 1000 at most)
  -- fetch.lua reads P mono only on a fetch told "mono" (ARGV).

  -- The remembered scores of ids[1..n] (numbers, or false), or nil when the
  -- shard remembers none.
  function mono_get(P, ids, n)
    if n == 0 or redis.call("EXISTS", P .. MONO) == 0 then return nil end
    local top = {}
    for i = 1, n, 1000 do
      local r = redis.call("HMGET", P .. MONO, unpack(ids, i, math.min(i + 999, n)))
      for j = 1, #r do top[i + j - 1] = r[j] and tonumber(r[j]) or false end
    end
    return top
  end

  -- pl (payload, score, ... as job_decode gives) without the payloads whose
  -- score is not above top, and how many went.
  function mono_drop(pl, top)
    local keep, gone = {}, 0
    for i = 1, #pl, 2 do
      if pl[i + 1] > top then
        keep[#keep + 1], keep[#keep + 2] = pl[i], pl[i + 1]
      else
        gone = gone + 1
      end
    end
    return keep, gone
  end

  -- Jobs acked done (fetch.lua's ack, fail.lua's "done" ids): list = {id,
  -- rc, pl, ...} (each job's retry_count string and, with mono_ttl, its
  -- payloads as busy_decode gives them). keep_s: a record each, as done_keep
  -- writes it (attempts = the performs of its payloads, this one included =
  -- retry_count + 2; result = results[id], the JSON text call:result gave,
  -- or nil), in variadic calls; mono_ttl: each id's highest score in P mono.
  -- Then the trims. now_s: now as a score string.
  function done_jobs(P, now, now_s, list, keep_s, keep_max, results, mono_ttl)
    if keep_s then
      local head = '{"state":"done","finished_at":' .. now_s .. ',"attempts":'
      local recs, at = {}, {}
      for i = 1, #list, 3 do
        local id = list[i]
        local res = results and results[id]
        recs[#recs + 1], recs[#recs + 2] = id, head .. (tonumber(list[i + 1]) + 2) ..
          (res and (',"result":' .. res) or "") .. "}"
        at[#at + 1], at[#at + 2] = now_s, id
      end
      put_indexed(P .. DONE, recs, P .. DONE_AT, at)
      done_trim(P, now, keep_s, keep_max)
    end
    if not mono_ttl then return end
    local ids, tops = {}, {}
    for i = 1, #list, 3 do
      local pl = list[i + 2]
      local top = pl[2]
      for k = 4, #pl, 2 do if pl[k] > top then top = pl[k] end end
      ids[#ids + 1], tops[#tops + 1] = list[i], top
    end
    local old = mono_get(P, ids, #ids)
    local fields, at = {}, {}
    for i, id in ipairs(ids) do
      local top = tops[i]
      if old and old[i] and old[i] > top then top = old[i] end
      fields[#fields + 1], fields[#fields + 2] = id, score_str(top)
      at[#at + 1], at[#at + 2] = now_s, id
    end
    put_indexed(P .. MONO, fields, P .. MONO_AT, at)
    local gone = redis.call("ZRANGEBYSCORE", P .. MONO_AT, "-inf", "(" .. score_str(now - mono_ttl), "LIMIT", 0, 1000)
    if #gone > 0 then
      redis.call("HDEL", P .. MONO, unpack(gone))
      redis.call("ZREM", P .. MONO_AT, unpack(gone))
    end
    expire_in(mono_ttl + 1, P .. MONO, P .. MONO_AT)
  end

  -- The ack of a batch (fetch.lua told "done" and/or "mono"): every job of P
  -- busy (K.busy) but the filler and those that now wait for a reply (P
  -- waits) is done: done_jobs.
  function done_batch(P, K, now, now_s, keep_s, keep_max, results, mono_ttl)
    local flat = redis.call("HGETALL", K.busy)
    local wk = P .. WAITS
    local waits = redis.call("EXISTS", wk) == 1
    local list = {}
    for i = 1, #flat, 2 do
      local id = flat[i]
      if id ~= "" and not (waits and redis.call("HEXISTS", wk, id) == 1) then
        local rc, pl, _
        if mono_ttl then
          _, rc, _, _, pl = busy_decode(flat[i + 1])
        else -- (only the retry count: the record's second value)
          local ok, _, _, r = pcall(cmsgpack.unpack_limit, flat[i + 1], 2)
          rc, pl = ok and type(r) == "string" and r:match("^%-?%d+$") and r or (ok and "-1"), false
        end
        if rc then list[#list + 1], list[#list + 2], list[#list + 3] = id, rc, pl end
      end
    end
    done_jobs(P, now, now_s, list, keep_s, keep_max, results, mono_ttl)
  end
end
