-- luakiq.runner.fetch: one fetch of a shard and its acks, in a worker
-- thread's VM. process() runs one fetch of a shard:
--   fetch.lua (acks the previous batch in the same call) -> per batch_size
--   ids one perform call (luakiq.runner.call) -> all done: the ack pending;
--   a call failed: fail.lua (one atomic step).
-- A successful batch is acked by its shard's next fetch when that comes
-- within poll_interval / 10, else by the next Redis call this thread makes
-- (another shard's fetch, or the flush before it waits), so the steady state
-- costs one round trip and one script call per batch. Leases
-- (docs/guarantees.md) fence every shard. The size of an adapting worker's
-- fetch (fetch_auto) is worked out here too.
-- (luakiq.runner: init -> tasks -> fetch -> call.)
local core = require "luakiq.core"
local log = require "luakiq.lib.log"
local queue = require "luakiq.runner.queue"
local timing = require "luakiq.ops.timing"
local flow = require "luakiq.runner.flow"
local call = require "luakiq.runner.call"

local perform, fail, in_flight = call.perform, call.fail, call.in_flight

local M = {}

-- How long a finished batch's ack may wait for its shard's next fetch to
-- carry it (a fraction of poll_interval): a thread that serves several
-- shards goes round them, and an ack sent on its own is one more script
-- call (fetch.lua, limit 0) for Redis, ~220k instructions, where riding
-- with the fetch costs nothing. A fetch that took longer than that is acked
-- by the thread's next call, as always; a shorter one's finished work waits
-- until poll_interval / ACK_WAIT_PART after it was fetched at most
-- (docs/guarantees.md).
local ACK_WAIT_PART = 10

-- The ack calls of the pending handlers but `except` (one fetch.lua call
-- each, limit 0) whose ack is due (t.pending[h], a core.mono time: a batch
-- fetched more than poll_interval / ACK_WAIT_PART ago; force: all), and
-- the handlers they are for. The others stay pending: their shard's next
-- fetch acks them in the same call, or this thread's next call after they
-- are due, or flush before it sleeps.
-- Pending unit releases (concurrency) ride after the acks, one
-- units_release.lua call per queue: their replies come after the acks'.
-- The thread's timing observations (luakiq.ops.timing) ride last, at most once a
-- second (force, unless timing_due: now, when there are any); the third
-- result is the index of the first of them (nil: none).
local function pending_acks(t, except, force, timing_due)
  local cmds, hs = {}, {}
  local now = not force and next(t.pending) and core.mono()
  for h, due in pairs(t.pending) do
    if h ~= except and (force or due <= now) then
      hs[#hs + 1] = h
      cmds[#cmds + 1] = queue.fetch_cmd(h.prefix, t.token, t.lease_ms, 0, h.batch, h.def.delivery == "at_most_once",
                                        nil, h.fin)
    end
  end
  for q, members in pairs(t.releases) do cmds[#cmds + 1] = flow.release_cmd(t, q, members) end
  t.releases = {}
  local tcmds, tfrom = timing.cmds(t.timing, t.cfg.namespace, force and not timing_due), nil
  if tcmds then
    tfrom = #cmds + 1
    for _, c in ipairs(tcmds) do cmds[#cmds + 1] = c end
  end
  return cmds, hs, tfrom
end

-- Fast recovery (docs/operations.md, "Recovery"): when holder, the token
-- of a refused lease (HOST:PID:..., cli.lua), names this machine's
-- hostname exactly and a pid that is gone here (core.pid_gone: no such
-- process in this pid namespace), its lease is given back now (release.lua:
-- only while it still holds that very token), so the next fetch of h
-- acquires the shard and restores the dead holder's in-flight jobs
-- (fetch.lua's new acquisition) instead of waiting out lease_ttl. Off with
-- fast_recovery = false (hosts of one hostname in separate pid namespaces).
-- Returns true when the lease was given back.
local function take_dead(t, h, holder)
  if not holder or not t.cfg.fast_recovery then return false end
  local name, pid = holder:match("^([^:]*):(%d+):")
  t.hostname = t.hostname or core.hostname()
  if name ~= t.hostname or not core.pid_gone(tonumber(pid)) then return false end
  if t.conn:script("release", h.prefix, holder) ~= 1 then return false end
  log.warn("took over the shard lease of a process of this machine that is gone", { worker = h.worker,
    shard = h.shard, holder = holder })
  return true
end

-- Takes in h's fetch.lua reply: h.batch (the id of its batch in flight) and
-- t.refused (shards another holder leases -> its token, to log each
-- holder once). Returns queue.parse_fetch's result, or nil when the lease
-- is held elsewhere (and true when that holder was a dead process of this
-- machine whose lease take_dead gave back: fetch again).
local function took(t, h, r)
  local res = queue.parse_fetch(r, h)
  if res.leased then
    h.batch = nil
    if t.el then t.el.held[h] = nil end
    if take_dead(t, h, res.holder) then return nil, true end
    local seen = res.holder or true
    if t.refused[h.prefix] ~= seen then
      -- whose lease, and until when (it may be renewed: then it is logged
      -- again only when the holder changes)
      local f = { worker = h.worker, shard = h.shard, holder = res.holder }
      if res.holder and res.pttl and res.pttl >= 0 then
        f["until"] = os.date("!%Y-%m-%dT%H:%M:%SZ", math.floor(core.now() + res.pttl / 1000 + 0.5))
      end
      if res.reshard then
        log.info("shard frozen by a reshard of its queue; waiting for it", f)
      elseif t.el then
        -- a hand-over in progress: the previous holder finishes its call first
        log.info("shard is still held by its previous holder; waiting for it", f)
      else
        log.warn("shard is leased by another host; skipping it", f)
      end
      t.refused[h.prefix] = seen
    end
    return nil
  end
  if t.el then t.el.held[h] = true end
  if t.refused[h.prefix] then
    log.info("shard lease acquired", { worker = h.worker, shard = h.shard })
    t.refused[h.prefix] = nil
  end
  h.batch = res.batch
  return res
end

-- Sends the pending acks (if any) alone; used before sleeping and at stop.
-- An ack Redis refused (an error reply: out of memory, say) stays pending,
-- to be sent again; the first such error is raised after the others were
-- taken in. The timing observations go too, but before sleeping
-- (sleeping) only once their second is up: a thread woken for every reply
-- to a job that waits sleeps after each, and a timing.lua and history.lua
-- call per sleep cost Redis as much as a fetch (docs/benchmarks.md, "What a
-- reply costs"); an idle thread wakes at least every poll_interval, so
-- they wait at most that much more.
local function flush(t, sleeping)
  if not next(t.pending) and not next(t.releases) and not t.timing.any then return end
  local cmds, hs, tfrom = pending_acks(t, nil, true, sleeping)
  if #cmds == 0 then return end
  local r = t.conn:pipeline(cmds)
  local failed
  for i, h in ipairs(hs) do
    local ok, err = pcall(took, t, h, r[i])
    if ok then t.pending[h] = nil else failed = failed or err end
  end
  if failed then error(failed, 0) end
  timing.check(cmds, r, tfrom)
end

-- The queues paused on this host (docs/operations.md, "Pause"): a set
-- queue -> true, as the main thread last handed them over (host/pause.c,
-- luakiq.ops.hosts.sync_pause); read again only when their generation
-- changed (else core.paused is one atomic load and no string). Checked
-- after each fetch, before each call: once the host acknowledged a pause,
-- no call of the queue starts here. Before each call, the generation comes
-- with core.between_calls (one C call for the stop, the reload and the
-- pause: the runner's loop runs in the interpreter, where each C call, and
-- an FFI call more, costs; docs/benchmarks.md), and this is called only
-- when it changed.
local function paused(t)
  local gen, text = core.paused(t.paused_gen)
  if text then
    local set = {}
    for q in text:gmatch("[^\n]+") do set[q] = true end
    t.paused, t.paused_gen = set, gen
  end
  return t.paused
end

-- How many jobs h's next fetch takes: the worker's fetch_size, or, when it
-- adapts (config.lua, fetch_auto), what h's jobs performed in about
-- fetch_time (h.fetch_n, from fetch_adapt), starting at fetch_start.
local function fetch_limit(h)
  local w = h.def
  if not w.fetch_auto then return w.fetch_size end
  -- (clamped again: a reload may have changed the worker's bounds)
  return math.max(w.batch_size, math.min(h.fetch_n or w.fetch_start, w.fetch_size))
end

-- The moving average an adapting fetch is sized by: so one slow call does
-- not shrink the fetch at once, nor one fast call grow it.
local function moving(avg, x) return avg and (0.7 * avg + 0.3 * x) or x end

-- After a fetch of an adapting worker: n jobs performed in `took` seconds
-- (wall time, parked waits included) set the size of h's next fetch, also
-- bounded by the bytes its jobs' records weigh (h.job_bytes, fetched_bytes).
local function fetch_adapt(h, n, took)
  local w = h.def
  if not w.fetch_auto or n <= 0 then return end
  h.per_job = moving(h.per_job, math.max(took, 0) / n)
  local want = h.per_job > 0 and math.floor(w.fetch_time / h.per_job) or w.fetch_size
  local jb = h.job_bytes
  if jb and jb > 0 then want = math.min(want, math.floor(w.fetch_bytes / jb)) end
  h.fetch_n = math.max(w.batch_size, math.min(w.fetch_size, want))
end

-- A fetch of an adapting worker brought n jobs whose busy records weigh
-- bytes: the moving average of a job's bytes, which bounds h's next fetch
-- to about the worker's fetch_bytes (a fetch of jobs with large payloads
-- is held whole in the thread's memory, and in Redis's reply).
local function fetched_bytes(h, n, bytes)
  if not h.def.fetch_auto or n <= 0 then return end
  h.job_bytes = moving(h.job_bytes, bytes / n)
end

-- The jobs of a fetch the "waits" section flagged (job.wait) apart from
-- the others: jobs to perform, wait calls.
local function split_waits(all)
  local jobs, waits = {}, {}
  for _, job in ipairs(all) do
    if job.wait then waits[#waits + 1] = job else jobs[#jobs + 1] = job end
  end
  return jobs, waits
end

-- The calls of a fetch's jobs that waited (wjobs: replies and lapsed
-- deadlines, process's), before its jobs to perform, each a call of its
-- own (call.wait_call); ran, done, fetched: process's. Returns true and
-- process's results when the fetch ends here (a call failed, the lease was
-- lost, or, before a call but the first, the thread stops or
-- poll_interval passed: what ran is acked, the rest goes back); else
-- false and the failures that need no user code ({job =, err =}...: a
-- lapsed deadline, rickover's "failed"), for fail_later, or nil.
local function wait_calls(t, h, wjobs, ran, done, fetched)
  local later_failed
  for k, job in ipairs(wjobs) do
    local stop, pgen = core.between_calls()
    if (k > 1 and (stop or core.now() - fetched >= t.cfg.poll_interval))
        or (pgen == t.paused_gen and t.paused or paused(t))[h.def.queue_name] then
      queue.settle(in_flight(t, h), done, h.later)
      h.batch, h.done, h.later, h.held = nil, nil, nil, nil
      return true, true, fetched -- (a reply put back is due at once)
    end
    if ran[job.id] then
      done[#done + 1] = job.id
    else
      local ok, performed, err, tb = call.wait_call(t, h, job, done)
      if ok == nil then return true, false, nil end
      if ok == "later" then
        later_failed = later_failed or {}
        later_failed[#later_failed + 1] = { job = job, err = performed }
      elseif not ok then
        fail(t, h, performed, err, tb, done)
        h.done = nil
        return true, false, nil
      else
        done[#done + 1] = job.id
        ran[job.id] = true
      end
    end
  end
  return false, later_failed
end

-- Records the failures wait_calls left (list), with the ids done, in one
-- fail.lua call: those of the first one's error (the usual case: timeouts
-- of one reply_timeout); the others are not listed, so they stay due and
-- come back with the shard's next fetch. Returns process's results.
local function fail_later(t, h, list, done)
  local first, same = list[1], {}
  for _, f in ipairs(list) do
    if rawequal(f.err, first.err) then same[#same + 1] = f.job end -- (equal strings, or the same value)
  end
  fail(t, h, same, first.err, nil, done)
  h.done = nil
  return false, nil
end

-- One fetch of shard h: up to fetch_size due jobs, performed batch_size ids
-- per perform call, in perform_in order. Returns ok (jobs ran and all
-- succeeded), head (the shard's earliest perform_in left, or nil).
-- The fetched jobs are one batch in flight in Redis. All done: acked by the
-- shard's next fetch, or this thread's next Redis call (pending_acks). A
-- perform call fails: one fail.lua call fails its ids, acks the ones done
-- before and puts the rest back unchanged. The fetch's replies and lapsed
-- deadlines of jobs that waited run first, each a call of its own
-- (call.wait_call); the failures that need no user code (a timeout) are
-- recorded after the other calls, in one fail.lua call. Stopping,
-- or poll_interval after the fetch with jobs still to perform: the same call
-- without failures (queue.settle), so a stop never waits for more than the
-- perform in progress, and at most ~poll_interval of finished work is ever
-- unacked (what a kill -9 would rerun).
local function process(t, h)
  local ack_same = t.pending[h] ~= nil
  local cmds, acked, tfrom = pending_acks(t, h)
  cmds[#cmds + 1] = queue.fetch_cmd(h.prefix, t.token, t.lease_ms, fetch_limit(h), ack_same and h.batch,
                                    h.def.delivery == "at_most_once", nil, h.fin)
  local nfetch = #cmds
  -- a throttled worker's snapshot of the running calls, in the same round trip
  if h.def.throttle then cmds[#cmds + 1] = flow.read_cmd(t, h) end
  local sent = core.mono()
  local replies = t.conn:pipeline(cmds)
  timing.check(cmds, replies, tfrom)
  -- fetch.lua leased the shard for lease_ttl from no earlier than now: the
  -- calls of this fetch hold it until then, or as the renewals extend it
  h.lease_until = sent + t.cfg.lease_ttl
  -- An ack Redis refused stays pending (sent again by batch id, so nothing
  -- runs twice); the error then goes to the loop's back-off, and this
  -- fetch's batch, if any, is redelivered to this holder by the next fetch.
  local failed
  for i, p in ipairs(acked) do
    local ok, err = pcall(took, t, p, replies[i])
    if ok then
      t.pending[p] = nil
      if p.fin then p.fin.results = nil end -- (sent with the ack)
    else
      failed = failed or err
    end
  end
  h.later, h.held = nil, nil
  if failed then error(failed, 0) end
  local res, retake = took(t, h, replies[nfetch])
  t.pending[h] = nil
  if retake then return process(t, h) end -- a dead holder's lease, given back: taken now
  -- (the results of the batch acked, or of one a fail.lua call settled)
  if h.fin then h.fin.results = nil end
  if not res then return false, nil end -- lease held elsewhere
  h.best_due = res.best
  h.snapshot = replies[nfetch + 1]
  local jobs = res.jobs
  h.job_windows = res.windows
  if #jobs == 0 then return false, res.head end
  fetched_bytes(h, #jobs, res.bytes)
  local size = h.def.batch_size
  -- replies and lapsed deadlines of jobs that waited (the fetch flagged
  -- them: job.wait) are calls of their own (call.wait_call), before the
  -- jobs to perform: a reply's handling is not held back by them
  local wjobs
  if res.waits then jobs, wjobs = split_waits(jobs) end
  -- h.done: ids of the batch in flight already performed with success. When
  -- the fail.lua/settle call that would have acked them never reached Redis,
  -- the next fetch delivers the same batch again: those ids are not rerun.
  -- (Only a fetch with several calls needs it.)
  local ran
  if #jobs > size or wjobs then
    if not h.done or h.done.batch ~= h.batch then h.done = { batch = h.batch, ids = {} } end
    ran = h.done.ids
  end
  -- done: the ids performed so far, for a fetch that may end in a partial
  -- ack (several calls, or flow control holding some jobs back)
  local fetched, started = core.now(), core.mono()
  local done = (ran or h.def.throttle or h.def.concurrency) and {} or nil
  local later_failed
  if wjobs then
    local ended, a, b = wait_calls(t, h, wjobs, ran, done, fetched)
    if ended then return a, b end
    later_failed = a
  end
  for first = 1, #jobs, size do
    -- (and a pause that came after the fetch: its jobs go back unchanged)
    local stop, pgen = core.between_calls()
    if ((first > 1 or wjobs) and (stop or core.now() - fetched >= t.cfg.poll_interval))
        or (pgen == t.paused_gen and t.paused or paused(t))[h.def.queue_name] then
      fetch_adapt(h, first - 1, core.mono() - started)
      queue.settle(in_flight(t, h), done, h.later)
      h.batch, h.done, h.later, h.held = nil, nil, nil, nil
      local head = res.head
      if not head or jobs[first].perform_in < head then head = jobs[first].perform_in end
      return true, head
    end
    local slice = #jobs <= size and jobs or (size == 1 and { jobs[first] })
      or { unpack(jobs, first, math.min(first + size - 1, #jobs)) }
    if ran and next(ran) then
      -- (a table only when some job of the slice already ran: a fetch
      -- delivered again; the usual slice has none)
      local again = false
      for i = 1, #slice do
        if ran[slice[i].id] then again = true break end
      end
      if again then
        local todo = {}
        for _, job in ipairs(slice) do
          if ran[job.id] then done[#done + 1] = job.id else todo[#todo + 1] = job end
        end
        slice = todo
      end
    end
    local ok, performed, err, tb = true, slice, nil, nil
    if #slice > 0 then
      -- the wait: from due to the start of the job's call (a job a fetch put
      -- back unperformed is counted when it runs, once)
      local now, qn = core.now(), h.def.queue_name
      for i = 1, #slice do timing.observe(t.timing, qn, "w", now - slice[i].perform_in, now) end
      ok, performed, err, tb = perform(t, h, slice, done)
    end
    if ok == nil then return false, nil end
    -- the throttle held every job of this call: they go back at the end of
    -- the fetch, and its next calls are asked about
    if ok == "held" then ok, performed = true, {} end
    if ok == "units" then
      -- no units or the throttle held the call: the fetch goes back (what
      -- ran is acked; the throttle's "later"s are requeued) and h waits a
      -- moment; nil: not a failure, not an empty shard
      queue.settle(in_flight(t, h), done, h.later)
      h.batch, h.done, h.later, h.held = nil, nil, nil, nil
      return nil
    end
    if not ok then
      fail(t, h, performed, err, tb, done)
      h.done = nil
      return false, nil -- fail.lua moved jobs: the head is unknown, re-probe
    end
    if done then
      for _, job in ipairs(performed) do
        done[#done + 1] = job.id
        if ran then ran[job.id] = true end
      end
    end
  end
  if later_failed then return fail_later(t, h, later_failed, done) end
  if h.later or h.held then
    -- the throttle kept some jobs: not an ack of the whole fetch, a partial
    -- one (the held jobs go back unchanged, the later ones at their time)
    local held = h.held
    queue.settle(in_flight(t, h), done, h.later)
    h.batch, h.done, h.later, h.held = nil, nil, nil, nil
    if held then return nil end
    return false, nil
  end
  fetch_adapt(h, #jobs, core.mono() - started)
  -- (from the fetch, not from its end: so what a thread ran but has not
  -- acked is what it ran since poll_interval / ACK_WAIT_PART before its
  -- current fetch, plus that fetch's own, docs/guarantees.md)
  t.pending[h] = started + t.cfg.poll_interval / ACK_WAIT_PART
  h.done_slot = core.ack_pending(h.prefix, h.batch, h.done_slot) -- (for the main VM, should the thread get stuck)
  return true, res.head
end

M.process, M.flush, M.take_dead, M.paused = process, flush, take_dead, paused
return M
