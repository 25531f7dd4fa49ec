-- fetch.lua: the hot path. One call renews the shard lease, acks the batch in
-- flight and fetches the next one (one round trip per batch).
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".
-- ARGV[1] token (this holder), [2] lease_ms, [3] now, [4] limit (max jobs),
--      [5] ack: the batch id to ack ("" = no ack), [6] fetch: "1" or "0",
--      [7] (optional) "1": the worker's delivery is "at_most_once", then
--      optional sections: "mono", ttl (monotonic) and "done", keep_s,
--      keep_max, id/result pairs (keep_done), below and lib/done.lua.
-- Lease (fencing): if another token holds "lease" -> {"LEASE", pttl,
-- "holder", that token}, nothing done (the token says whose lease the
-- caller waits for, and lets a host on the holder's machine see that the
-- holder is gone: luakiq.runner.fetch's fast recovery). If nobody holds it
-- and "holder" is another token, this is a new
-- acquisition: every in-flight job of the shard returns to the queue with its
-- own perform_in/retry_count/error (the "failed + queued" merge, docs/redis.md),
-- then holder = token; with ARGV[7] = "1" (at most once) they go to the
-- morgue instead, every payload, with the error "interrupted" (the dead
-- holder may have run them). A holder whose lease merely expired re-acquires and
-- keeps its batch. Then lease = token for lease_ms.
-- Ack: only when ARGV[5] is the id of the batch in flight, so a call re-sent
-- after a lost reply never acks a batch its sender has not seen.
-- Fetch: if a batch is still in flight (not acked), it is delivered again
-- (same batch id): its sender lost the reply. Otherwise up to limit due ids
-- (perform_in <= now, lowest first, -inf included) move to the busy keys under
-- a new batch id, and busy:fetched_at = now (once per batch, not per job).
-- Payloads whose expires_at has passed never leave the queue for perform:
-- they go to the morgue ("expired"; counters.expired) as their id is fetched.
-- With "mono", payloads whose score is not above their id's highest score
-- performed are dropped as it is fetched (counters.stale), and the ack
-- remembers the scores it acked; with "done", the ack keeps a record of
-- each job done (lib/done.lua; docs/redis.md, "Finished jobs").
-- Reshard (P reshard holds another token): a new holder is refused, the
-- holder's ack is done, its lease given back when nothing is in flight, and
-- the reply is {"LEASE", "-2", "reshard", acked} (docs/redis.md, "Reshard").
-- Returns {"OK", batch, head, restored, acked, n, then one element per job,
-- then optional sections}; batch = id of the returned jobs ("" when n = 0),
-- head = lowest perform_in left in the queue (or ""). A job is one element,
-- which the host decodes (luakiq.runner.queue's parse_fetch): a fresh job
-- taken from P ready is its member of P jobs as it is (esc(id), "\0\0", its
-- queued record: no string made for the reply), any other esc(id) ..
-- "\0\0b" .. its busy record as stored in P busy (docs/redis.md, "Records").
-- The errors of the jobs that have one come in a section after them,
-- "errors" (each element of a reply costs Redis ~1.3k instructions, and few
-- jobs in flight carry an error). (No scores: perform does not see them;
-- busy.lua lists them.)
-- A fetched job's payload encodings are copied from its queued record into
-- the busy record without being decoded in Redis (docs/benchmarks.md: ~1.5
-- us of Redis CPU per job). A record whose payloads do not decode reaches
-- the host, which drops it; it leaves with the batch's ack.
-- Waits (lib/waits.lua; docs/redis.md, "Jobs that wait for a reply"), on a
-- shard that awaited (P waits:seq): the ack makes the batch's awaited jobs
-- wait (not counted as acked) and ends the waits of its reply calls; a
-- restore sends reply calls back to due; replies and lapsed deadlines due by
-- now join the batch after its jobs (up to half the limit first), flagged in
-- a last section "waits", count, then per call: job number, kind ("reply",
-- "timeout", "heartbeat"), attempt, the body or the seconds that lapsed.
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include tags
-- luakiq:include shard
-- luakiq:include args
local P = KEYS[1]
local K = shard_keys(P)
local token, ack, want, at_most_once = ARGV[1], ARGV[5], ARGV[6], ARGV[7] == "1"
local lease_ms = arg_lease("fetch", token, ARGV[2])
local now, limit = arg_finite("fetch", "now", ARGV[3]), arg_count("fetch", "limit", ARGV[4])
if ack == nil or (want ~= "0" and want ~= "1") then
  error("BADARG luakiq fetch: ARGV must be token, lease_ms, now, limit, ack batch id, fetch (0|1)", 0)
end
-- Optional sections after ARGV[7], found by their names (a worker that uses
-- neither sends none; other words are passed over):
-- "mono", ttl (monotonic: stale payloads dropped, the ack remembers the
-- highest scores, lib/done.lua); "done", keep_s, keep_max, then id/result
-- pairs to the end (keep_done: the ack keeps a record of each job).
local mono_ttl, keep_s, keep_max, results
if ARGV[8] then
  local i = 8
  while ARGV[i] do
    if ARGV[i] == "mono" then
      mono_ttl = arg_finite("fetch", "mono ttl", ARGV[i + 1])
      i = i + 2
    elseif ARGV[i] == "done" then
      keep_s, keep_max = arg_finite("fetch", "keep_done", ARGV[i + 1]), arg_count("fetch", "keep_done_max", ARGV[i + 2])
      results = {}
      for k = i + 3, #ARGV, 2 do results[ARGV[k]] = ARGV[k + 1] end
      break
    else
      i = i + 1 -- (another word: not one of these sections)
    end
  end
end
DONE_WANTED = keep_s ~= nil or mono_ttl ~= nil -- (lib/keys.lua)
-- luakiq:include done
local busy, berrs = K.busy, K.busy_errors

-- Lease.
-- (one MGET: the lease, whether a reshard froze the shard, the batch in
-- flight's id, for the ack, and whether the shard ever awaited: P waits:seq,
-- lib/waits.lua; a shard that never did pays nothing more for waits)
local lf = redis.call("MGET", K.lease, K.reshard, K.batch, P .. WAITS_SEQ)
local cur = lf[1]
if cur and cur ~= token then
  return { "LEASE", tostring(redis.call("PTTL", K.lease)), "holder", cur }
end
-- A shard that awaited (lib/waits.lua): whether this call has waits to
-- settle (a pending wait, a reply call in flight) or to hand over (due by
-- now): W, the wait operations, is made only then (each of its functions
-- costs every call that makes it). wdue: P waits:due's first entry, id
-- and score: whether one is due, else the head's (one entry: each score
-- of a reply is a %.17g formatted, ~2k Redis instructions).
local wdue
if lf[4] then
  wdue = redis.call("ZRANGE", P .. WAITS_DUE, "0", "0", "WITHSCORES")
  WAITS_WANTED = (wdue[2] and tonumber(wdue[2]) <= now) or redis.call("EXISTS", P .. WAITS_NEW, P .. WAITS_RUN) > 0
end
-- luakiq:include waits
if W then W.keys(K, P) end
-- A reshard froze the shard (P reshard = its token; luakiq.ops.reshard): no
-- holder but the reshard acquires it or fetches from it. Its holder may
-- still ack (below), then gives the lease back so the reshard takes it.
local frozen = lf[2]
frozen = frozen and frozen ~= token
local restored = 0
if not cur and redis.call("GET", K.holder) ~= token then
  if frozen then return { "LEASE", "-2", "reshard" } end
  local flat, now_s = redis.call("HGETALL", busy), score_str(now)
  local run = W and W.run_set(K) or {}
  for i = 1, #flat, 2 do
    local id = flat[i]
    local pin, rc, prio, win, pl = busy_decode(flat[i + 1], now_s)
    if W and not at_most_once and W.settle_back(K, id, run) then
      -- a reply or timeout call: due again, its reply kept (lib/waits.lua);
      -- a pending wait of a perform call stays for the job's re-run
    elseif not pl then
      -- junk: dropped
    elseif at_most_once then
      -- the dead holder may have run them: never again (their waits end)
      if W then W.settle_failed(P, K, id, run) end
      morgue_add(K, id, pl, now_s, "interrupted")
    else
      requeue(P, K, id, pin, rc, redis.call("HGET", berrs, id), pl, prio, win)
      restored = restored + 1
    end
  end
  redis.call("DEL", busy, berrs, K.busy_fetched_at)
  if W then redis.call("DEL", K.waits_run) end
  redis.call("SET", K.holder, token)
end
-- (the argument as sent when it is an integer's digits: Redis's Lua formats a
-- number argument with sprintf, ~1k instructions)
redis.call("SET", K.lease, token, "PX", ARGV[2]:match("^[1-9]%d*$") and ARGV[2] or lease_ms)

-- Ack: the busy records carry the payloads, so the batch is three keys
-- whatever its size. The batch id first (read with the lease: nothing
-- above changes it), so a call that acks nothing costs no HKEYS.
local acked = 0
local inflight
if ack ~= "" and ack == lf[3] then
  -- (the acked ids are read only when the shard has expiring payloads or
  -- tags to clean after them: else their count is enough)
  local exp_or_tags = redis.call("EXISTS", K.expiring, K.tags) > 0
  local ids = exp_or_tags and redis.call("HKEYS", busy) or nil
  local nids = ids and #ids or busy_count(K)
  if ids and nids > BUSY_FILL_MIN then
    for i = nids, 1, -1 do
      if ids[i] == "" then table.remove(ids, i) end -- (the filler, keys.lua)
    end
    nids = #ids
  end
  -- the batch's awaited jobs start waiting (not processed), its reply
  -- calls end their waits (lib/waits.lua)
  local waited = W and W.settle_batch(P, K, ack) or 0
  if nids > 0 then
    if keep_s or mono_ttl then done_batch(P, K, now, score_str(now), keep_s, keep_max, results, mono_ttl) end
    redis.call("DEL", busy, berrs, K.busy_fetched_at)
    if nids > waited then redis.call("HINCRBY", K.counters, "processed", nids - waited) end
    acked = nids - waited
    -- the expiry entries of acked ids with nothing queued behind them
    if exp_or_tags and redis.call("EXISTS", K.expiring) == 1 then
      for _, id in ipairs(ids) do
        if redis.call("SISMEMBER", K.expiring, id) == 1 and not find_job(K, id) and
            not (W and W.must_hold(K, id)) then
          redis.call("DEL", expires_key(P, id))
          redis.call("SREM", K.expiring, id)
        end
      end
    end
    -- and their tags, when nothing of the id is left (lib/tags.lua)
    if exp_or_tags and has_tags(K) then
      for _, id in ipairs(ids) do
        local text = redis.call("HGET", K.tags, id)
        if text and not job_state(P, K, id) then forget_tags(P, K, id, text) end
      end
    end
  end
  inflight = false
else
  inflight = redis.call("EXISTS", busy) == 1
end

if frozen then
  if redis.call("EXISTS", busy) == 0 then redis.call("DEL", K.lease) end
  return { "LEASE", "-2", "reshard", tostring(acked) }
end

-- Fetch.
local n, head = 0, nil -- jobs in the reply; the head when known on the way
local out = { "OK", "", "", restored == 0 and "0" or tostring(restored), tostring(acked), "0" }
-- (Redis's Lua formats every number argument with sprintf: the hot calls
-- below pass strings.)
-- A job's error, if any, goes to the "errors" section.
local job_errors -- {job number, error, ...} of the jobs that have one
-- Puts job k of the reply as id and busy record rec (out's first 6 are the
-- header: no #).
local function put_record(k, id, rec)
  out[6 + k] = esc(id) .. "\0\0b" .. rec
end
local function add_record(id, err, rec)
  put_record(n + 1, id, rec) -- (n jobs in out so far)
  if err then
    job_errors = job_errors or {}
    job_errors[#job_errors + 1] = tostring(n + 1)
    job_errors[#job_errors + 1] = err
  end
end
-- Variadic commands over a list of arguments (from list[from or 1]), at
-- most 1000 per call.
local function each_chunk(cmd, key, list, fn, from)
  for i = from or 1, #list, 1000 do
    local r = redis.call(cmd, key, unpack(list, i, math.min(i + 999, #list)))
    if fn then fn(r, i - 1) end
  end
end
-- Expired payloads of id (expires_at <= now) leave pl, its queued payloads
-- (a flat list, changed in place), for the morgue with the error "expired"
-- (counters.expired +1 each): they are never handed to perform. An entry of
-- P expires:ID whose payload is not queued is stale and goes (the id is not
-- in flight: a shard has one batch in flight, and this is the fetch of the
-- next).
local function expire(id, pl, now_s)
  local ek = expires_key(P, id)
  local flat = redis.call("HGETALL", ek)
  if #flat == 0 then
    redis.call("SREM", K.expiring, id)
    return pl
  end
  local at = {}
  for i = 1, #flat, 2 do at[flat[i]] = tonumber(flat[i + 1]) end
  local keep, gone = {}, {}
  for i = 1, #pl, 2 do
    local t = at[pl[i]]
    if t and t <= now then
      gone[#gone + 1], gone[#gone + 2] = pl[i], pl[i + 1]
    else
      keep[#keep + 1], keep[#keep + 2] = pl[i], pl[i + 1]
    end
    at[pl[i]] = nil
  end
  for i = 1, #gone, 2 do redis.call("HDEL", ek, gone[i]) end
  for p in pairs(at) do redis.call("HDEL", ek, p) end
  if #gone > 0 then
    morgue_add(K, id, gone, now_s, "expired")
    redis.call("HINCRBY", K.counters, "expired", #gone / 2)
  end
  if redis.call("EXISTS", ek) == 0 then redis.call("SREM", K.expiring, id) end
  return keep
end

-- Set before a fresh fetch when the shard has none of P stale, retries,
-- errors, expiring, levels and windows (none appears during the fetch).
local quiet = false

-- Score strings of the perform_in values met (jobs pushed together share one).
local pin_strs = {}
local function pin_str(x)
  local s = pin_strs[x]
  if not s then
    s = score_str(x)
    pin_strs[x] = s
  end
  return s
end

-- The due jobs of priority 100, up to max, in perform_in order (ties by
-- id), from two sorted sources (docs/redis.md, "The due order"): P ready from its
-- head (skipping stale entries; stopping at a job not due yet: producers'
-- clocks differ) and P later. Takes them out of both (not out of P jobs:
-- the caller's). Returns ids, pins (strings), members and payload offsets
-- (a ready job's record was read on the way; nil for a later job, not
-- looked up yet), and the head left when known.
-- Reads count entries of P ready from position pos, and their members of
-- P jobs in one range when few others lie between them (ids pushed in
-- runs, as sequential ones are; read_jobs): the ids, and the members as a
-- list (member k id k's unless run_member says not) or nil (then
-- K.known, or nil: each id looked up alone). Ids that do not ascend as a
-- whole, and whose lowest and highest span too many others for K.known,
-- may still ascend in long runs (a fetch across a push of "9992" then
-- "10016", which sort apart): then each run of SEG_MIN or more gets its
-- members in one range if it can, and the third value marks where each
-- such run starts (run[k] nil: looked up alone). The caller sets K.known =
-- nil after the entries.
local SEG_MIN = 8
local function read_ready(pos, count)
  local ids = redis.call("LRANGE", K.ready, pos == 0 and "0" or tostring(pos), tostring(pos + count - 1))
  local nids = #ids
  if nids < 2 then return ids end
  -- (ready holds the ids of a push in order, mostly: then the first and
  -- last are the lowest and highest, and without a byte 0 in them the
  -- range's members come as a list when it holds as many; else a table by
  -- id, whose range needs the ids' true lowest and highest: one comparison
  -- an id, a strcoll each, when they ascend)
  local c -- (the range's count, when read_jobs gave no list)
  local plain = not table.concat(ids):find("\0", 1, true)
  if plain and ids[1] < ids[nids] then
    local list
    list, c = read_jobs(K, nil, nids, ids[1], ids[nids], true)
    if list then return ids, list end
  end
  local up = true
  for k = 2, nids do
    if not (ids[k - 1] < ids[k]) then
      up = false
      break
    end
  end
  -- (ascending ids span the range counted above: over the bound, as ids
  -- spread over the id space are, each is looked up alone without a second
  -- count, which at 10M queued is four walks of P jobs' skiplist)
  if up and c and c > nids + 64 then return ids end
  local set = {}
  for k = 1, nids do set[ids[k]] = true end
  if up then
    read_jobs(K, set, nids, ids[1], ids[nids])
    return ids
  end
  read_jobs(K, set)
  -- (their lowest and highest span too many others: the runs, alone)
  if not K.known and plain then
    local run, firsts, starts, ns = nil, nil, { 1 }, 1 -- (where each ascending run starts)
    for k = 2, nids do
      if not (ids[k - 1] < ids[k]) then
        ns = ns + 1
        starts[ns] = k
      end
    end
    starts[ns + 1] = nids + 1
    for i = 1, ns do
      local a, b = starts[i], starts[i + 1] - 1
      if b - a + 1 >= SEG_MIN then
        local list = read_jobs(K, nil, b - a + 1, ids[a], ids[b], true)
        if list then
          run, firsts = run or {}, firsts or {}
          firsts[a] = true
          for j = a, b do run[j] = list[j - a + 1] end
        end
      end
    end
    if run then return ids, run, firsts end
  end
  return ids
end

-- The queued job of ready's entry id, whose member read_ready's run list
-- may hold (rm): member, place, pin (number), payload offset (job_peek);
-- place nil for a junk member, nothing when not queued. A run member's
-- "\0\0" and 10-byte head are read with one sub (that the member is the id's
-- and what its head decodes to), kept for the call by RUN_PLACE, RUN_PIN.
local RUN_PLACE, RUN_PIN = {}, {}
local function ready_job(rm, id)
  if rm then
    local n = #id
    local t = rm:sub(n + 1, n + 12)
    local place = RUN_PLACE[t]
    if place and #rm > n + 12 and rm:sub(1, n) == id then return rm, place, RUN_PIN[t], n + 12 end
    local m = run_member(rm, id)
    if m then
      local pin, nxt
      place, pin, nxt = job_peek(m, id)
      if place and nxt == n + 12 then RUN_PLACE[t], RUN_PIN[t] = place, pin end
      return m, place, pin, nxt
    end
  end
  local m, _, place, pin, nxt = peek_job(K, id)
  return m, place, pin, nxt
end

-- The head left when ready's walk stopped at the live entry of perform_in
-- rh (nil: ready ended) and nothing due is left in later but what L
-- holds from index j: the lowest of rh and later's next (a due one from
-- L, else the first after now, unless rh is due).
local function head_after(rh, L, j, now_s)
  local lh = L[2 * j] and tonumber(L[2 * j])
  if not lh and not (rh and rh <= now) then
    lh = tonumber(redis.call("ZRANGEBYSCORE", K.later, "(" .. now_s, "+inf", "WITHSCORES", "LIMIT", "0", "1")[2])
  end
  if lh and (not rh or lh < rh) then return lh end
  return rh
end

-- The due jobs of later, up to max + 1: id, perform_in (string), ...
local function later_due(max, now_s)
  return redis.call("ZRANGEBYSCORE", K.later, "-inf", now_s, "WITHSCORES", "LIMIT", "0", tostring(max + 1))
end

-- A member of P jobs whose head does not decode (junk), met in a walk of
-- ready: dropped (from K.known too, which is a copy).
local function drop_junk(m, id)
  redis.call("ZREM", K.jobs, m)
  if K.known then K.known[esc(id)] = nil end
end

local function take_default(max, now_s)
  local L = later_due(max, now_s)
  -- Walk ready: the live due entries, as lists by entry (no table an entry):
  -- id, pin number, member, position, payload offset.
  local Rid, Rpin, Rm, Rpos, Rnxt = {}, {}, {}, {}, {}
  local nR, pos, stop = 0, 0, nil -- stop: the perform_in of a live entry not due yet
  local stale = not quiet and redis.call("EXISTS", K.stale) == 1
  local left, skips = {}, {} -- id -> stale count left; {position, id} of the stale entries passed
  local step = max + 1
  while nR <= max and not stop do
    local ids, run = read_ready(pos, step)
    local nids = #ids
    for k = 1, nids do
      local id = ids[k]
      local c = 0
      if stale then
        c = left[id]
        if c == nil then c = tonumber(redis.call("HGET", K.stale, id)) or 0 end
        left[id] = c > 0 and c - 1 or 0
      end
      if c > 0 then
        skips[#skips + 1] = { pos, id }
      else
        local m, place, pin, nxt = ready_job(run and run[k], id)
        if place == "r" then
          if pin > now then
            stop = pin
            break
          end
          nR = nR + 1
          Rid[nR], Rpin[nR], Rm[nR], Rpos[nR], Rnxt[nR] = id, pin, m, pos, nxt
          if nR > max then break end
        end
        -- (an entry without a live record is junk: passed, and popped; a
        -- member of the id whose head does not decode goes with it)
        if m and not place then drop_junk(m, id) end
      end
      pos = pos + 1
    end
    K.known = nil
    if nids < step then break end
  end
  -- Merge by (perform_in, id).
  local ids, pins, mems, nxts, nt = {}, {}, {}, {}, 0
  local i, j = 1, 1
  local drop = {} -- later ids taken
  while nt < max do
    local rpin, lpin = Rpin[i], L[2 * j] and tonumber(L[2 * j])
    if not rpin and not lpin then break end
    nt = nt + 1
    if rpin and (not lpin or rpin < lpin or (rpin == lpin and Rid[i] < L[2 * j - 1])) then
      ids[nt], pins[nt], mems[nt], nxts[nt] = Rid[i], pin_str(rpin), Rm[i], Rnxt[i]
      i = i + 1
    else
      ids[nt], pins[nt] = L[2 * j - 1], L[2 * j]
      drop[#drop + 1] = L[2 * j - 1]
      j = j + 1
    end
  end
  -- The head left: ready's next live entry (due or not) and later's next.
  local h = head_after(Rpin[i] or stop, L, j, now_s)
  -- Pop what was consumed from ready: every entry before the first live
  -- entry not taken (stale and junk ones included).
  local consumed = Rpos[i] or pos
  if consumed > 0 then
    redis.call("LTRIM", K.ready, tostring(consumed), "-1")
    for _, s in ipairs(skips) do
      if s[1] < consumed then
        if redis.call("HINCRBY", K.stale, s[2], -1) <= 0 then redis.call("HDEL", K.stale, s[2]) end
      end
    end
  end
  if #drop > 0 then each_chunk("ZREM", K.later, drop) end
  return ids, pins, mems, nxts, h and score_str(h)
end
-- The fetched jobs' members out of P jobs (rem), and the n jobs' busy
-- records (fields from 3: id, record, ...) into P busy, with its filler
-- first (fields 1 and 2, keys.lua) when they are BUSY_FILL_MIN or more.
local function store_batch(n, rem, fields)
  if #rem > 0 then each_chunk("ZREM", K.jobs, rem) end
  if n >= BUSY_FILL_MIN then
    fields[1], fields[2] = "", BUSY_FILL
    each_chunk("HSET", busy, fields)
  elseif n > 0 then
    each_chunk("HSET", busy, fields, nil, 3)
  end
end

-- The usual fetch, in one pass: a plain shard (none of P levels, windows,
-- stale and expiring). Then every job taken is
-- of priority 100 and without windows, and a ready job also without an
-- error (a job gets one only where it is put back, in later or a level:
-- shard.lua requeue) and fresh unless pushed with a retry_count (retried:
-- P retries exists). Takes the due jobs as take_default does, ready's live
-- entries merged by (perform_in, id) with later's due ones (L), straight
-- into the reply, P busy's fields (from 3, as below) and the members to
-- remove from P jobs; returns their count, the members, the fields and the
-- head left. (take_default and the loop after it do this in three passes
-- over lists of the jobs: ~9k Redis instructions a job more at 100,
-- docs/benchmarks.md.) A fresh job's busy record is the head BUSY_HEAD[pin]
-- and the member's payload encodings, as busy_record_of makes it. A
-- later job is looked up as it is taken; its retry count (one ZMSCORE with
-- the ready jobs') and error (one HMGET, when P errors exists) are set in
-- its record after the walk. (It walks ready only to the first live entry
-- it does not take; take_default walks up to limit + 1 due ones whatever
-- later gives, so a junk member it meets past that point goes one fetch
-- sooner there.)
local BUSY_HEAD = {}
local function take_quiet(max, now_s, retried)
  local L = later_due(max, now_s)
  local nL, Lj = #L / 2, 1 -- (L: id, score, ...; Lj the next one)
  local rem, fields, nf, nt, nr = {}, { false, false }, 2, 0, 0
  local took = 0 -- jobs taken, delivered or not (a later id without a record is not)
  -- (for the retry counts and errors, the jobs delivered: id, pin string,
  -- the length of their record's head; and which came from later)
  local track = retried or nL > 0
  local Tid, Tps, Th, Tlater = track and {}, track and {}, track and {}, track and {}
  local drop = {} -- later ids taken
  -- Takes later's next due job (the caller checks took < max).
  local function take_later()
    local lid, lps = L[2 * Lj - 1], L[2 * Lj]
    Lj = Lj + 1
    took = took + 1
    drop[#drop + 1] = lid
    local kn = K.known -- (a copy of this chunk's members only)
    K.known = nil
    local m, _, place, _, nxt = peek_job(K, lid)
    K.known = kn
    if m then
      nr = nr + 1
      rem[nr] = m
    end
    if not place then return end
    local h = BUSY_HEAD[lps] -- (a string key: ready's are numbers)
    if not h then
      h = cmsgpack.pack(lps, "-1", false, false)
      BUSY_HEAD[lps] = h
    end
    local rec = h .. m:sub(nxt + 1)
    nt = nt + 1
    fields[nf + 1], fields[nf + 2] = lid, rec
    nf = nf + 2
    put_record(nt, lid, rec)
    Tid[nt], Tps[nt], Th[nt], Tlater[nt] = lid, lps, #h, true
  end
  local lp = nL > 0 and tonumber(L[2]) -- (the perform_in of later's next)
  local pos, rh = 0, nil -- rh: the perform_in of the first live entry not taken (at pos)
  local step = max + 1
  local spans = {} -- ranges of P jobs taken whole: first id, last member, ...
  -- The members run[from..span] of a run read in one range, all taken:
  -- the run is all the range from ids[from] holds, in order, so they are
  -- all it holds up to the last of them, member and all: one
  -- ZREMRANGEBYLEX takes them out of P jobs, one walk of its skiplist for
  -- them all instead of one a member.
  local function take_span(ids, run, from, span)
    if span == from then
      nr = nr + 1
      rem[nr] = run[from]
    elseif span > from then
      spans[#spans + 1], spans[#spans + 2] = ids[from], run[span]
    end
  end
  while not rh do
    local ids, run, firsts = read_ready(pos, step)
    local nids = #ids
    -- (span: the last of the run's first members taken, every one, from
    -- sfrom: 1, or where read_ready's next run read in one range starts)
    local span, sfrom = 0, 1
    for k = 1, nids do
      if firsts and firsts[k] and k > 1 then
        take_span(ids, run, sfrom, span)
        span, sfrom = k - 1, k
      end
      local id = ids[k]
      local rm, m, place, pin, nxt = run and run[k], nil, nil, nil, nil
      if rm then
        -- (ready_job's kept head, inline: a call a job costs ~0.5k Redis
        -- instructions at 100)
        local n = #id
        local t = rm:sub(n + 1, n + 12)
        place = RUN_PLACE[t]
        if place and #rm > n + 12 and rm:sub(1, n) == id then m, pin, nxt = rm, RUN_PIN[t], n + 12 end
      end
      if not m then m, place, pin, nxt = ready_job(rm, id) end
      if place == "r" then
        if pin > now then
          rh = pin
          break
        end
        -- later's jobs before this one first (ties: the lower id)
        while lp and took < max and (lp < pin or (lp == pin and not (id < L[2 * Lj - 1]))) do
          take_later()
          lp = Lj <= nL and tonumber(L[2 * Lj])
        end
        if took == max then
          rh = pin
          break
        end
        local h = BUSY_HEAD[pin]
        if not h then
          h = cmsgpack.pack(pin_str(pin), "-1", false, false)
          BUSY_HEAD[pin] = h
        end
        local rec = h .. m:sub(nxt + 1)
        took, nt = took + 1, nt + 1
        if span == k - 1 and m == rm then
          span = k
        else
          nr = nr + 1
          rem[nr] = m
        end
        fields[nf + 1], fields[nf + 2] = id, rec
        nf = nf + 2
        out[6 + nt] = m -- (its member: the host reads a fresh job from it)
        if retried then Tid[nt], Tps[nt], Th[nt] = id, pin_str(pin), #h end
      elseif m and not place then
        drop_junk(m, id) -- (as in take_default)
      end
      pos = pos + 1
    end
    K.known = nil
    if run then take_span(ids, run, sfrom, span) end
    if nids < step then break end
  end
  -- later's due jobs after ready's
  while lp and took < max do
    take_later()
    lp = Lj <= nL and tonumber(L[2 * Lj])
  end
  -- (ready's entries before pos were consumed: taken, junk, or no job's)
  if pos > 0 then redis.call("LTRIM", K.ready, tostring(pos), "-1") end
  -- (ids in a run have no byte 0: esc(id) is the id)
  for i = 1, #spans, 2 do
    redis.call("ZREMRANGEBYLEX", K.jobs, "[" .. spans[i] .. "\0\0", "[" .. spans[i + 1])
  end
  if #drop > 0 then each_chunk("ZREM", K.later, drop) end
  -- retry counts (of later jobs, and of ready jobs pushed with one) and errors
  -- (of later jobs), out of P retries and P errors
  if retried and nt > 0 then
    local gone = {}
    each_chunk("ZMSCORE", K.retries, Tid, function(r, off)
      for j = 1, #r do
        if r[j] then
          local k = off + j
          -- (its fresh record's payload encodings follow the head, Th[k] bytes)
          local rec = busy_record_of(Tps[k], r[j], nil, nil, fields[2 + 2 * k], Th[k])
          fields[2 + 2 * k] = rec
          put_record(k, Tid[k], rec)
          gone[#gone + 1] = Tid[k]
        end
      end
    end)
    if #gone > 0 then each_chunk("ZREM", K.retries, gone) end
  end
  if #drop > 0 and redis.call("EXISTS", K.errors) == 1 then
    local lids, lk = {}, {}
    for k = 1, nt do
      if Tlater[k] then
        lids[#lids + 1] = Tid[k]
        lk[#lk + 1] = k
      end
    end
    if #lids > 0 then
      each_chunk("HMGET", K.errors, lids, function(r, off)
        for j = 1, #r do
          if r[j] then
            local k = lk[off + j]
            redis.call("HSET", berrs, Tid[k], r[j])
            job_errors = job_errors or {}
            job_errors[#job_errors + 1] = tostring(k)
            job_errors[#job_errors + 1] = r[j]
          end
        end
      end)
    end
    each_chunk("HDEL", K.errors, drop)
  end
  local h = head_after(rh, L, Lj, now_s)
  return nt, rem, fields, h and pin_str(h)
end
-- Reply and timeout calls (lib/waits.lua): {job number, kind, attempt,
-- value, ...} for the "waits" section; value = the reply's body, or the
-- seconds of the timeout or heartbeat that lapsed.
-- (made only with W)
local wait_calls, note_wait, take_waits
if W then
  function note_wait(k, w)
    wait_calls = wait_calls or {}
    local c = #wait_calls
    wait_calls[c + 1], wait_calls[c + 2], wait_calls[c + 3] = tostring(k), w.kind, tostring(w.attempt)
    if w.kind == "reply" then
      wait_calls[c + 4] = w.reply
    elseif w.kind == "heartbeat" then
      wait_calls[c + 4] = W.num_str(w.hb)
    else
      wait_calls[c + 4] = W.num_str(w.deadline - w.since)
    end
  end
  -- Takes up to max of the due waits (ids of P waits:due, due at now) into the
  -- batch after its jobs, as calls of their own: a reply, or a lapsed
  -- deadline. Each one's job (its busy record, kept in the wait) joins P busy,
  -- its id P waits:run, its record state "handling" until the batch settles.
  function take_waits(due, max, now_s)
    local fields, n0 = {}, n
    for _, id in ipairs(due) do
      if n - n0 >= max then break end
      local w = W.get(K, id)
      local lapsed = w and w.state == "waiting" and W.due(w) -- (a waiting one's deadline)
      if not w or not w.job then
        W.finish(P, K, id) -- (junk: dropped, its held job released)
      elseif w.state ~= "replied" and not lapsed then
        redis.call("ZREM", K.waits_due, id) -- (handling: not due)
      elseif lapsed and lapsed > now then
        redis.call("ZADD", K.waits_due, score_str(lapsed), id) -- (the score follows the record)
      else
        if n == 0 then
          out[2] = tostring(redis.call("INCR", K.batch))
          redis.call("SET", K.busy_fetched_at, now_s)
        end
        w.kind = "reply"
        if lapsed then w.kind = (w.beat and w.beat < w.deadline) and "heartbeat" or "timeout" end
        w.state, w.batch = "handling", out[2]
        redis.call("HSET", K.waits, id, W.pack(w))
        redis.call("ZREM", K.waits_due, id)
        redis.call("SADD", K.waits_run, id)
        fields[#fields + 1], fields[#fields + 2] = id, w.job
        add_record(id, nil, w.job)
        n = n + 1
        note_wait(n, w)
      end
    end
    -- (P busy's filler when the batch reaches BUSY_FILL_MIN jobs, keys.lua)
    if n0 < BUSY_FILL_MIN and n >= BUSY_FILL_MIN then
      fields[#fields + 1], fields[#fields + 2] = "", BUSY_FILL
    end
    if #fields > 0 then each_chunk("HSET", busy, fields) end
  end
end
if want == "1" and limit > 0 then
  if inflight then
    -- Deliver the unacked batch again, in perform_in order. A record that
    -- does not decode (junk) is dropped, not delivered.
    local flat, jobs, dropped = redis.call("HGETALL", busy), {}, false
    for i = 1, #flat, 2 do
      local pin, rc, prio, win, pl = busy_decode(flat[i + 1], score_str(now))
      if pl then
        jobs[#jobs + 1] = { flat[i], pin, rc, tonumber(pin), win, pl, prio }
      elseif flat[i] ~= "" then -- (not the filler, keys.lua)
        redis.call("HDEL", busy, flat[i])
        redis.call("HDEL", berrs, flat[i])
        dropped = true
      end
    end
    if dropped then busy_settle(K) end
    table.sort(jobs, function(a, b)
      if a[4] ~= b[4] then return a[4] < b[4] end
      return a[1] < b[1]
    end)
    for _, j in ipairs(jobs) do
      local err = redis.call("HGET", berrs, j[1])
      add_record(j[1], err, busy_record(j[2], j[3], j[7], j[5], j[6]))
      n = n + 1
      if W and redis.call("SISMEMBER", K.waits_run, j[1]) == 1 then
        local w = W.get(K, j[1])
        if w and w.kind then note_wait(n, w) end
      end
    end
    out[2] = lf[3] or ""
  else
    local now_s = ARGV[3]
    if not now_s:match("^%-?%d+%.?%d*$") then now_s = score_str(now) end
    -- replies and lapsed deadlines due (lib/waits.lua): up to half the
    -- limit is kept for them, the jobs take the rest first
    local due, total = nil, limit
    if W then
      -- (read again: the ack or a restore above may have made some due)
      due = redis.call("ZRANGEBYSCORE", K.waits_due, "-inf", now_s, "LIMIT", "0", tostring(limit))
      if #due > 0 then limit = limit - math.min(#due, math.ceil(limit / 2)) else due = nil end
    end
    local ids, pins, mems, nxts, prios, m = {}, {}, {}, {}, nil, 0
    -- (one EXISTS for the keys of what a shard rarely has: when none is
    -- there, as in most fetches, the checks below read no key)
    local rare = redis.call("EXISTS", K.levels, K.windows, K.stale, K.retries, K.errors, K.expiring)
    if rare == 0 then
      K.has_levels, K.has_windows, quiet = false, false, true
    end
    -- (plain: none of levels, windows, stale and expiring; retried: P
    -- retries exists. take_quiet's conditions, with quiet's EXISTS first:
    -- a shard where some jobs wait for a retry or carry an error costs one
    -- or two more. On a plain shard rare counts P retries and P errors
    -- alone: 2 is both, as a failed job waiting in later leaves them.)
    -- (a monotonic fetch looks at each job's scores: take_default's way)
    local plain, retried = quiet and not mono_ttl, false
    if not quiet and not mono_ttl and redis.call("EXISTS", K.levels, K.windows, K.stale, K.expiring) == 0 then
      K.has_levels, K.has_windows, plain = false, false, true
      retried = rare == 2 or redis.call("EXISTS", K.retries) == 1
    end
    local qn, qrem, qfields, qhead
    if plain then qn, qrem, qfields, qhead = take_quiet(limit, now_s, retried) end
    if qn then
      -- (take_quiet did it all: the batch written, as below)
      n, head = qn, qhead
      if n > 0 then
        out[2] = tostring(redis.call("INCR", K.batch))
        redis.call("SET", K.busy_fetched_at, now_s)
      end
      store_batch(n, qrem, qfields) -- (also a later id's junk member when none is delivered)
    elseif not has_levels(K) then
      ids, pins, mems, nxts, head = take_default(limit, now_s)
      m = #ids
    else
      -- Priorities (lib/levels.lua): the due jobs level by level, lowest
      -- priority number first.
      prios = {}
      for _, q in ipairs(queue_keys(P, K)) do
        if m >= limit then break end
        if not q[1] then
          local di, dp, dm, dn = take_default(limit - m, now_s)
          for k = 1, #di do
            m = m + 1
            ids[m], pins[m], mems[m], nxts[m] = di[k], dp[k], dm[k], dn[k]
          end
        else
          local due = redis.call("ZRANGEBYSCORE", q[1], "-inf", now_s, "WITHSCORES", "LIMIT", "0", tostring(limit - m))
          local took = {}
          for i = 1, #due, 2 do
            m = m + 1
            ids[m], pins[m] = due[i], due[i + 1]
            prios[m] = q[2]
            took[#took + 1] = due[i]
          end
          if #took > 0 then
            each_chunk("ZREM", q[1], took)
            each_chunk("HDEL", K.prio, took)
            if redis.call("EXISTS", q[1]) == 0 then redis.call("ZREM", K.levels, q[2]) end
          end
        end
      end
      if redis.call("EXISTS", K.levels) == 0 then K.has_levels = false end
    end
    if m > 0 then
      -- retry_count: from the retries index, -1 when absent (a fresh job)
      local rcs = {}
      if not quiet and redis.call("EXISTS", K.retries) == 1 then
        local retried = {}
        each_chunk("ZMSCORE", K.retries, ids, function(r, off)
          for j = 1, #r do
            rcs[off + j] = r[j]
            if r[j] then retried[#retried + 1] = ids[off + j] end
          end
        end)
        if #retried > 0 then each_chunk("ZREM", K.retries, retried) end
      end
      local errs = {}
      if not quiet and redis.call("EXISTS", K.errors) == 1 then
        each_chunk("HMGET", K.errors, ids, function(r, off) for j = 1, #r do errs[off + j] = r[j] end end)
        each_chunk("HDEL", K.errors, ids)
      end
      local wins = {}
      if has_windows(K) then
        each_chunk("HMGET", K.windows, ids, function(r, off) for j = 1, #r do wins[off + j] = r[j] or nil end end)
        each_chunk("HDEL", K.windows, ids)
      end
      -- (fields from 3: 1 and 2 are for P busy's filler, keys.lua)
      local fields, rem, nf, nr, heads = { false, false }, {}, 2, 0, {}
      local expiring = not quiet and redis.call("EXISTS", K.expiring) == 1
      -- monotonic: each id's highest score performed (lib/done.lua); its
      -- payloads not above it are dropped (counters.stale), an id left
      -- with none is not delivered (its record leaves)
      local tops, stale, gone = mono_ttl and mono_get(P, ids, m), 0, nil
      for i = 1, m do
        local id, pin = ids[i], pins[i]
        local rc, err = rcs[i] or "-1", errs[i] or nil
        -- each taken job's record, looked up once (a ready job's on the way)
        local mem, nxt = mems[i], nxts[i]
        if not mem then
          local _, place, p, o
          mem, _, place, p, o = peek_job(K, id)
          if place then nxt = o end
        end
        if mem then nr = nr + 1 rem[nr] = mem end
        -- Its busy record, the payload bytes copied; an id without a record
        -- (junk, or every payload expired) is dropped.
        -- (decoded only to drop expired payloads)
        local prio, win, rec = prios and prios[i], wins[i], nil
        if nxt then
          local expires = expiring and redis.call("SISMEMBER", K.expiring, id) == 1
          local top = tops and tops[i]
          if expires or top then
            local pl = select(3, job_decode(mem, esc(id)))
            if pl and expires then pl = expire(id, pl, now_s) end
            if pl and top then
              local c
              pl, c = mono_drop(pl, top)
              stale = stale + c
              if #pl == 0 then
                gone = gone or {}
                gone[#gone + 1] = id
              end
            end
            if pl and #pl > 0 then rec = busy_record(pin, rc, prio, win, pl) end
          else
            rec = busy_record_of(pin, rc, prio, win, mem, nxt, heads)
          end
        end
        if rec then
          if n == 0 then
            out[2] = tostring(redis.call("INCR", K.batch))
            redis.call("SET", K.busy_fetched_at, now_s) -- once per batch: busy.lua's fetched_at
          end
          if err then redis.call("HSET", berrs, id, err) end
          fields[nf + 1], fields[nf + 2] = id, rec
          nf = nf + 2
          add_record(id, err, rec)
          n = n + 1
        end
      end
      store_batch(n, rem, fields)
      if stale > 0 then redis.call("HINCRBY", K.counters, "stale", stale) end
      -- (an id whose payloads were all stale: its expiry entries and tags go)
      for _, id in ipairs(gone or {}) do
        if not job_state(P, K, id) then
          if expiring then
            redis.call("DEL", expires_key(P, id))
            redis.call("SREM", K.expiring, id)
          end
          local text = has_tags(K) and redis.call("HGET", K.tags, id)
          if text then forget_tags(P, K, id, text) end
        end
      end
    end
    if due then take_waits(due, total - n, now_s) end
  end
end
out[3] = head or queue_head(P, K) or ""
-- (the first due time of a wait, when earlier: read again when W took some)
if W then
  out[3] = W.head(K, out[3]) or ""
elseif wdue and wdue[2] and (out[3] == "" or tonumber(wdue[2]) < tonumber(out[3])) then
  out[3] = score_str(tonumber(wdue[2]))
end
out[6] = tostring(n)
-- Optional sections after the jobs: "errors", count, then job number, error
-- per job that has one; "best", the priority of the best due job left ("" =
-- none) when the shard has priorities.
if job_errors then
  out[#out + 1] = "errors"
  out[#out + 1] = tostring(#job_errors / 2)
  for _, v in ipairs(job_errors) do out[#out + 1] = v end
end
if has_levels(K) then
  out[#out + 1] = "best"
  out[#out + 1] = best_due(P, K, now)
end
-- "waits" (last: a reader that does not know it stops before it), count,
-- then per reply or timeout call of the batch: job number, kind ("reply",
-- "timeout", "heartbeat"), attempt, value (the reply's body, or the seconds
-- that lapsed). lib/waits.lua.
if wait_calls then
  out[#out + 1] = "waits"
  out[#out + 1] = tostring(#wait_calls / 4)
  for _, v in ipairs(wait_calls) do out[#out + 1] = v end
end
return out
