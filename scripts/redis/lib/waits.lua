-- Jobs that wait for a reply ("luakiq:include waits", after "keys",
-- "levels" and "shard"; docs/redis.md, "Waits"). An awaited job leaves its
-- batch for a wait record of its shard, keyed by its id, that holds the job
-- itself (its busy record); payloads pushed for the id meanwhile wait in
-- P held (W.must_hold, W.hold_job; lib/shard.lua requeue). A reply or a
-- lapsed deadline makes the id due in P waits:due, and the shard's fetch
-- hands it back in a batch as a call of its own (P waits:run), so its
-- outcome takes the usual ack, failure and restore paths (W.settle_*).
-- States: "pending" (P waits:new: await was called in a batch not settled
-- yet), then in P waits "waiting", "replied", "handling" (in flight).
--
-- W is made only when the script set WAITS_WANTED (lib/keys.lua) before
-- this include: W.keys(K, P) adds the names of the wait keys to K
-- (shard_keys(P)) and W itself as K.W (what lib/shard.lua's requeue and
-- lib/tags.lua's job_state look at: no upvalue of theirs, which would cost
-- every script), and every other operation takes K after it. A script that
-- has W calls W.keys(K, P) before anything else.
if WAITS_WANTED then
  W = {}

  -- Adds the names of the shard's wait keys to K (their suffixes:
  -- lib/keys.lua), and K.W = W. Returns K.
  function W.keys(K, P)
    if not K.waits then
      K.W = W
      K.waits, K.waits_due, K.waits_new, K.waits_run = P .. WAITS, P .. WAITS_DUE, P .. WAITS_NEW, P .. WAITS_RUN
      K.waits_seq, K.waits_key, K.waits_late, K.held = P .. WAITS_SEQ, P .. WAITS_KEY, P .. WAITS_LATE, P .. HELD
    end
    return K
  end
  -- Whether the shard has waits, pending waits or held jobs (cached in K).
  function W.active(K, P)
    if K.has_waits == nil then
      W.keys(K, P)
      K.has_waits = redis.call("EXISTS", K.waits, K.waits_new, K.held) > 0
    end
    return K.has_waits
  end

  -- The wait record (cmsgpack; false for none, as in busy records): state,
  -- attempt (integer), since, deadline, hb (heartbeat interval, 0 = none),
  -- beat (the heartbeat deadline, false = none), key, rule ("status": a
  -- worker without on_reply, rickover's body rule), job (the busy record;
  -- false while pending: the job is in P busy), reply (the body),
  -- replied_at, batch (pending, handling: the batch of the call), kind
  -- (handling: "reply", "timeout" or "heartbeat"; a waiting one whose
  -- timeout call was restored keeps "timeout" or "heartbeat": it is over).
  -- (Written out field by field: a loop over a list of the names, with a
  -- table of the values, cost a reply.lua call 24k Redis instructions to
  -- unpack a record and 27k to pack one, 15k and 16k so: callgrind,
  -- docs/benchmarks.md, "Jobs that wait for a reply".)
  local function as_false(x) if x == nil then return false end return x end
  local function as_nil(x) if x ~= false then return x end end
  function W.pack(w)
    return cmsgpack.pack(as_false(w.state), as_false(w.attempt), as_false(w.since), as_false(w.deadline),
      as_false(w.hb), as_false(w.beat), as_false(w.key), as_false(w.rule), as_false(w.job), as_false(w.reply),
      as_false(w.replied_at), as_false(w.batch), as_false(w.kind))
  end
  -- The record s as a table (false fields as nil); nil when it does not
  -- decode (junk: the caller drops it).
  function W.unpack(s)
    if not s then return nil end
    local ok, state, attempt, since, deadline, hb, beat, key, rule, job, reply, replied_at, batch, kind =
      pcall(cmsgpack.unpack, s)
    if not ok or type(state) ~= "string" or type(attempt) ~= "number" or kind == nil then return nil end
    return { state = state, attempt = attempt, since = as_nil(since), deadline = as_nil(deadline), hb = as_nil(hb),
             beat = as_nil(beat), key = as_nil(key), rule = as_nil(rule), job = as_nil(job), reply = as_nil(reply),
             replied_at = as_nil(replied_at), batch = as_nil(batch), kind = as_nil(kind) }
  end
  function W.get(K, id) return W.unpack(redis.call("HGET", K.waits, id)) end
  function W.get_pending(K, id) return W.unpack(redis.call("HGET", K.waits_new, id)) end

  -- The score of a waiting record in P waits:due: the earlier of its
  -- deadline and its heartbeat deadline.
  function W.due(w)
    if w.beat and w.beat < w.deadline then return w.beat end
    return w.deadline
  end

  -- A number as the scripts print seconds: an integer without a point.
  function W.num_str(x)
    if x == math.floor(x) and math.abs(x) < 1e15 then return string.format("%d", x) end
    return score_str(x)
  end

  -- Whether new payloads of id must wait in P held (push.lua, schedule.lua):
  -- the id waits for a reply, or awaited in the batch in flight (pending,
  -- and in busy: its ack makes it wait). The caller checked W.active.
  function W.must_hold(K, id)
    if redis.call("HEXISTS", K.waits, id) == 1 then return true end
    return redis.call("HEXISTS", K.waits_new, id) == 1 and redis.call("HEXISTS", K.busy, id) == 1
  end

  -- Merges the payloads pl (flat, scores numbers) of id, perform_in pin (a
  -- number), priority n (nil = 100), into the id's held job (P held: the id
  -- waits for a reply), which keeps its own perform_in and the lower
  -- priority (P prio, as a level's jobs; no level holds it).
  function W.hold_job(K, id, pin, pl, n)
    local E = esc(id)
    local map = unite({}, pl)
    local h = find_member(K.held, E)
    if h then
      local hp, hpin, hpl = job_decode(h, E)
      if hp then
        unite(map, hpl)
        pin = hpin
      end
      n = lower_priority(n, redis.call("HGET", K.prio, id))
      redis.call("ZREM", K.held, h)
    end
    if n == "100" then n = nil end
    if n then redis.call("HSET", K.prio, id, n) end
    redis.call("ZADD", K.held, "0", E .. "\0\0" .. job_record(n and "p" or "l", pin, sort_payloads(map)))
    K.has_waits = true
  end

  -- The held job of id (P held), once its wait ended (the caller deleted
  -- the wait first), joins the queue: into `later` or its level, merged
  -- with a queued job of the id, its retry_count, error and windows kept
  -- (requeue).
  function W.release_held(P, K, id)
    local E = esc(id)
    local h = find_member(K.held, E)
    if not h then return end
    redis.call("ZREM", K.held, h)
    local place, pin, pl = job_decode(h, E)
    if not place then return end -- (junk: dropped)
    requeue(P, K, id, score_str(pin), redis.call("ZSCORE", K.retries, id) or "-1", redis.call("HGET", K.errors, id),
      pl, place == "p" and redis.call("HGET", K.prio, id) or nil, nil)
  end

  -- A wait ends (its reply handled, failed or timed out): the record goes,
  -- and the id's held job joins the queue (after the wait, per-id order).
  function W.finish(P, K, id)
    redis.call("HDEL", K.waits, id)
    redis.call("ZREM", K.waits_due, id)
    redis.call("SREM", K.waits_run, id)
    W.release_held(P, K, id)
  end

  -- An operator removes the wait of id (delete.lua, kill.lua): only one no
  -- call holds (state "waiting" or "replied", not in P waits:run; a job in
  -- flight is never touched, as in P busy), with the job held behind it (P
  -- held). Its token is then STALE (reply.lua: an attempt that was issued
  -- and has no wait), as for a finished wait. Returns the waiting job's
  -- payloads and the held job's (flat, scores numbers; {} for none), or nil
  -- when id has no such wait. The caller called W.keys.
  function W.remove(P, K, id)
    if not W.active(K, P) or redis.call("SISMEMBER", K.waits_run, id) == 1 then return nil end
    local w = W.get(K, id)
    if not w and redis.call("HEXISTS", K.waits, id) == 0 then return nil end
    redis.call("HDEL", K.waits, id)
    redis.call("ZREM", K.waits_due, id)
    local pl, held = {}, {}
    if w and w.job then pl = select(5, busy_decode(w.job)) or {} end
    local E = esc(id)
    local h = find_member(K.held, E)
    if h then
      redis.call("ZREM", K.held, h)
      local place, _, hpl = job_decode(h, E)
      if place == "p" then redis.call("HDEL", K.prio, id) end
      held = hpl or {}
    end
    return pl, held
  end

  -- A pending wait dropped (the call failed, or its re-run did not await):
  -- with it go the payloads held behind it (they join the queue).
  function W.drop_pending(P, K, id)
    if redis.call("HDEL", K.waits_new, id) == 1 and redis.call("HEXISTS", K.waits, id) == 0 then
      W.release_held(P, K, id)
    end
  end

  -- The pending wait p of id becomes a wait: its job (the busy record of
  -- the batch being settled) kept in it; due at its deadline, or at once
  -- when a reply came while it was pending. Replaces the wait on_reply was
  -- handling.
  local function commit(P, K, id, p)
    p.job = redis.call("HGET", K.busy, id)
    if not p.job then
      W.drop_pending(P, K, id)
      return false
    end
    p.batch, p.kind = nil, nil
    if p.reply then
      p.state = "replied"
      redis.call("ZADD", K.waits_due, score_str(p.replied_at), id)
    else
      p.state = "waiting"
      redis.call("ZADD", K.waits_due, score_str(W.due(p)), id)
    end
    redis.call("HSET", K.waits, id, W.pack(p))
    redis.call("HDEL", K.waits_new, id)
    redis.call("SREM", K.waits_run, id)
    return true
  end

  -- P waits:run as a set (id -> true).
  function W.run_set(K)
    local run = {}
    for _, id in ipairs(redis.call("SMEMBERS", K.waits_run)) do run[id] = true end
    return run
  end

  -- A call that is not settled (a dead holder's batch restored, "at:T",
  -- not listed by fail.lua) and was a reply or timeout call goes back to
  -- its due state: the reply (or the lapsed deadline) is delivered again.
  -- A timeout's wait keeps its kind: it stays over for replies and
  -- heartbeats (reply.lua: STALE, as while its call ran), so a reply
  -- answered STALE is never followed by one accepted for that attempt.
  -- Returns true when id was one (the caller does not requeue it). at: a
  -- snoozed reply call's time (fail.lua "snooze:T"): its reply is delivered
  -- again then, not at once.
  function W.settle_back(K, id, run, at)
    if not run[id] then return false end
    local w = W.get(K, id)
    redis.call("SREM", K.waits_run, id)
    if not w then return false end
    w.batch = nil
    if w.kind == "reply" then
      w.state = "replied"
      redis.call("ZADD", K.waits_due, at or score_str(w.replied_at or 0), id)
      w.kind = nil
    else
      w.state = "waiting" -- (its deadline passed: the next fetch takes it again)
      redis.call("ZADD", K.waits_due, score_str(W.due(w)), id)
    end
    redis.call("HSET", K.waits, id, W.pack(w))
    return true
  end

  -- An id of batch settled as done (fetch.lua's ack, fail.lua's "done"):
  -- "waiting" when its call awaited it (the pending wait commits: not
  -- processed), else "done" (a reply call's wait ends; a pending wait of an
  -- older run that did not await again is dropped).
  function W.settle_done(P, K, id, batch, run)
    local p = W.get_pending(K, id)
    if p and p.batch == batch then
      if commit(P, K, id, p) then return "waiting" end
    elseif p then
      W.drop_pending(P, K, id)
    end
    if run[id] then W.finish(P, K, id) end
    return "done"
  end

  -- An id of the batch that failed (fail.lua; the retry path or the morgue
  -- follow): its pending wait is dropped and a reply call's wait ends (the
  -- reply was consumed: the job is performed again, a new attempt).
  function W.settle_failed(P, K, id, run)
    W.drop_pending(P, K, id)
    if run[id] then W.finish(P, K, id) end
  end

  -- The ack of batch (fetch.lua), before P busy goes: each of its jobs with
  -- a pending wait or a reply call settles as done. A reply call no longer
  -- in busy (its payloads buried: bury.lua) ends its wait. A pending wait of
  -- a job not in it (a restored run not performed again yet) stays, unless
  -- its job is gone from the queue (deleted meanwhile): then it is dropped.
  -- Returns how many jobs of the batch now wait (they are not processed).
  function W.settle_batch(P, K, batch)
    local run = W.run_set(K)
    local ids = {}
    for id in pairs(run) do ids[#ids + 1] = id end
    for _, id in ipairs(redis.call("HKEYS", K.waits_new)) do
      if not run[id] then ids[#ids + 1] = id end
    end
    local waited = 0
    for _, id in ipairs(ids) do
      if redis.call("HEXISTS", K.busy, id) == 1 then
        if W.settle_done(P, K, id, batch, run) == "waiting" then waited = waited + 1 end
      elseif run[id] then
        W.settle_failed(P, K, id, run)
      elseif not find_member(K.jobs, esc(id)) then
        W.drop_pending(P, K, id)
      end
    end
    redis.call("DEL", K.waits_run)
    return waited
  end

  -- The lower of a head (a score string, "" or nil) and the first score of
  -- P waits:due (a reply to hand over, or a deadline), as a string or nil:
  -- when the shard must be fetched again.
  function W.head(K, head)
    local s = redis.call("ZRANGE", K.waits_due, 0, 0, "WITHSCORES")[2]
    local wh = s and tonumber(s)
    if wh and (not head or head == "" or wh < tonumber(head)) then return score_str(wh) end
    if head == "" then return nil end
    return head
  end

end
