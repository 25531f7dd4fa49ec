-- luakiq.runner: the loop of one worker thread (runs in that thread's own VM).
--
-- The thread owns a group of shards (from the splitter). Its scheduler
-- (luakiq.schedulers) picks the next shard; one fetch of it runs as a task,
-- its calls one after another, and a call that waits in luakiq's I/O parks
-- the task while the thread goes on with other shards. Leases
-- (docs/guarantees.md) fence every shard.
--
-- The runner's modules, each requiring only those after it (one direction,
-- no cycle, no require inside a function):
--   init   (this file) open and run (the thread's loop), setup (the thread's
--          state) and the handler (a shard's state: new_handler), the queue
--          registry (a reshard met while running), elastic hosts' shares,
--          schedules
--   tasks  the task loop: parked calls, the scheduler's ctx, busy shards
--   fetch  one fetch of a shard (process), its acks (pending, flush), the
--          size of an adapting fetch
--   call   one perform call: payloads, job windows, flow control, the call
--          under its timeout, delivery ids, failures (fail.lua), the call
--          record and fail_stuck; the calls of replies and lapsed deadlines
--   flow   concurrency units and the throttle (luakiq.runner.flow)
--   queue  the calls of the queue scripts and their replies (luakiq.runner.queue)
--   await  luakiq.await in a call (luakiq.runner.await)
-- elastic (the pure share of shards among hosts and threads, which the
-- main VM's splitter and the CLI use too) and unacked are init's alone.
local core = require "luakiq.core"
local json = require "luakiq.json"
local keys = require "luakiq.lib.keys"
local log = require "luakiq.lib.log"
local middleware = require "luakiq.lib.middleware"
local runtime = require "luakiq.lib.runtime"
local cron = require "luakiq.lib.cron"
local errors = require "luakiq.lib.errors"
local timing = require "luakiq.ops.timing"
local hosts = require "luakiq.ops.hosts"
local client = require "luakiq.client"
local luakiq = require "luakiq"
local queue = require "luakiq.runner.queue"
local unacked = require "luakiq.runner.unacked"
local elastic = require "luakiq.runner.elastic"
local call = require "luakiq.runner.call"
local fetch = require "luakiq.runner.fetch"
local tasks = require "luakiq.runner.tasks"
local hooks = require "luakiq.lib.hooks"
local schedulers = require "luakiq.schedulers"

-- The worker thread's states, named once (host/runner.c) and exported as numbers.
local STATE = core.states

local traceback, flush = call.traceback, fetch.flush

local M = {}

-- A handler: the thread's state of one shard it serves (or may serve). Every
-- field a handler has is here; the runner's modules (and luakiq.runner.flow)
-- set them, none adds another.
function M.new_handler(t, w, shard)
  return {
    -- the shard
    worker = w.name,   -- its worker's name
    shard = shard,     -- its number
    def = w,           -- its worker (config.lua's table)
    prefix = keys.prefix(t.cfg.namespace, w.queue_name, shard), -- its keys' prefix, NS:{QUEUE:SHARD}:
    index = 0,         -- its place in t.handlers, the scheduler's index (setup, set_active)
    timing = t.timing, -- the thread's timing observations (luakiq.ops.timing)
    -- perform with the server middlewares around it
    perform = middleware.chain(t.cfg.middlewares, function(worker, batch, call) return worker.perform(batch, call) end),
    -- on_reply with the server middlewares around it (a reply's call, luakiq.runner.call's wait_call)
    reply = middleware.chain(t.cfg.middlewares, call.on_reply),
    -- its fetch (luakiq.runner.fetch)
    batch = nil,       -- the id of its batch in flight (fetch.lua's; nil: none)
    fin = queue.finishing(w), -- keep_done / monotonic: fetch.lua's options and the batch's results (or nil)
    done = nil,        -- {batch =, ids = {id -> true}}: the ids of that batch performed (a fetch of several calls)
    later = nil,       -- {{id, at}...}: ids of the fetch that go back at a time (the throttle's, closed job windows)
    held = nil,        -- true: the throttle or flow control's units held jobs of the fetch back
    job_windows = nil, -- true: a job of the fetch has windows of its own
    best_due = nil,    -- the priority of its best due job left (priorities; the scheduler reads it)
    fetch_n = nil,     -- an adapting fetch's size for its next fetch (fetch_adapt)
    per_job = nil,     -- an adapting fetch's moving average of a job's seconds
    job_bytes = nil,   -- an adapting fetch's moving average of a job's busy record's bytes
    -- its calls (luakiq.runner.call, luakiq.runner.tasks)
    task = nil,        -- the coroutine of its fetch in flight (a task; nil: none)
    lease_until = nil, -- mono: how long its lease holds for its calls (core.call_begin's fence)
    done_slot = nil,   -- C's slot of the shard's done ids (core.call_begin)
    rec_done = nil,    -- the done list C keeps the ids of (host/calls.c: the call record's tail)
    -- flow control (luakiq.runner.flow)
    units = nil,       -- the queue whose units its call holds (given back after the call)
    units_until = nil, -- mono: no fetch before then (a held or refused call's back-off)
    snapshot = nil,    -- running_read.lua's reply for its next throttled call
    -- its call's luakiq.await (luakiq.runner.await; luakiq.runner.call sets them per call)
    thread = t,        -- the thread's state
    call_jobs = nil,   -- the call's jobs
    call_batch = nil,  -- their payloads by id
    awaited = nil,     -- id -> {attempt =, deadline =}: the waits the call made
    await_error = nil, -- the first error an await of the call raised (the call fails with it)
  }
end

-- Builds the per-thread state and the scheduler context.
local function setup(boot)
  local cfg = runtime.load(boot.dir, boot.overrides)
  hooks.setup(cfg.hook_timeout)
  local conn, err = runtime.connect(cfg, cfg.redis_retry or 30)
  if not conn then error(err, 0) end
  local t = {
    cfg = cfg, conn = conn, token = boot.token,
    host = (boot.token or ""):match("^(.*):[^:]*$") or boot.token, -- HOST:PID (throttle's running list)
    lease_ms = math.floor(cfg.lease_ttl * 1000),
    handlers = {},   -- the handlers it serves now, the scheduler's (elastic: set_active)
    by_prefix = {},  -- shard prefix -> index in handlers (wake-ups)
    all = {},        -- every handler (elastic: every shard; their state survives a move out and back)
    pending = {},    -- handlers whose last batch succeeded and awaits its ack -> when it is due (pending_acks)
    waiting = {},    -- handler -> {req = wait request, deadline = mono} of its parked task
    ntasks = 0,      -- tasks in flight (parked)
    in_call = {},    -- worker name -> its shards in a call now (concurrent_shards)
    refused = {},    -- prefix -> true while another holder has the lease
    paused = {}, paused_gen = 0, -- queue -> true while paused (luakiq.runner.fetch's paused)
    releases = {},   -- queue -> shard prefixes whose calls' units go back with the next Redis call
    wake_at = nil,   -- mono: the earliest end of a handler's wait (units, a window's opening)
    win = {},        -- worker name -> {closed =, recheck = wall time} (windows)
    timing = timing.new(), -- wait and run times not written yet (luakiq.ops.timing)
    -- the per-batch debug line is built only when it is printed (its fields
    -- cost more than a blank job's whole batch otherwise)
    debug = boot.log_level == "debug",
    el = nil,        -- an elastic host's thread's state (below; nil: a fixed plan)
    registry_at = nil, -- mono: the next look at the queue registry (registry_tick)
    dropped = nil,   -- handler -> true: shards of resharded queues a fixed thread gives back (settle_dropped)
    replan = false,  -- true: a reshard changed handlers, run() makes the scheduler anew
    sched = nil,     -- schedule name -> {tick =, next =, claimed =} (thread 0 with schedules; schedules_tick)
    sched_at = nil,  -- wall time: the next look at the schedules
    tick_every = nil, -- seconds: how often the schedules are looked at (caps the thread's waits)
    sweep_at = nil,  -- wall time: the next sweep of correlation keys (thread 0; sweep_tick), nil: not this thread
    sweeps = nil,    -- queue -> waitkey.lua sweep's cursor (sweep_tick)
  }
  -- Elastic hosts (luakiq.runner.elastic): boot.handlers is every shard; the thread
  -- serves its share, t.handlers, recomputed every beat (elastic_tick).
  local el = boot.elastic
  if el then
    t.el = {
      host = el.host, threads = el.threads, index = el.index, beat = el.beat, dead_after = el.dead_after,
      next = 0,          -- mono: the next look at the live hosts
      hosts_key = nil,   -- the live hosts' tokens last computed with
      held = {},         -- handler -> true while this thread holds its lease
      leaving = {},      -- handler -> true: no longer ours, its lease to give back once its call is over
      changed = false,   -- t.handlers changed: run() makes the scheduler anew
      held_text = nil,   -- the held shards as last told to the main thread (publish_held)
    }
  end
  for i, h in ipairs(boot.handlers) do
    local handler = M.new_handler(t, cfg.by_name[h.worker], h.shard)
    handler.index = i
    t.all[i] = handler
    if not el then
      t.handlers[i] = handler
      t.by_prefix[handler.prefix] = i
    end
  end
  return t
end

-- --- elastic hosts (luakiq.runner.elastic) -------------------------------------------

-- Makes list the thread's handlers (h.index: the position the scheduler
-- knows it by) and the wake-up lookup.
local function set_active(t, list)
  t.handlers, t.by_prefix = list, {}
  for i, h in ipairs(list) do
    h.index = i
    t.by_prefix[h.prefix] = i
  end
end

-- Tells the main thread (core.set_held: the hosts heartbeat lists it) which
-- shards this thread holds now, when that changed.
local function publish_held(t)
  local el, list = t.el, json.array()
  for _, h in ipairs(t.all) do
    if el.held[h] then list[#list + 1] = { worker = h.worker, shard = h.shard } end
  end
  local text = json.encode(list)
  if text ~= el.held_text then
    el.held_text = text
    core.set_held(text)
  end
end

local function names_of(list)
  local names = {}
  for i, h in ipairs(list) do names[i] = h.worker .. h.shard end
  return table.concat(names, ", ")
end

-- Gives back the leases of the shards this thread no longer owns, once
-- their calls are over: their acks first (flush), then release.lua, so the
-- new owner's next fetch takes them at once. A shard whose ack Redis refused
-- keeps its lease (flush raises; tried again at the next tick).
-- (set: handler -> true. Returns the handlers given back, nil when none.)
local function release_idle(t, set)
  local done, ack = {}, false
  for h in pairs(set) do
    if not h.task then
      done[#done + 1] = h
      if t.pending[h] then ack = true end
    end
  end
  if #done == 0 then return nil end
  if ack then flush(t) end
  queue.release(t.conn, done, t.token)
  for _, h in ipairs(done) do set[h], h.batch = nil, nil end
  return done
end

local function settle_leaving(t)
  local el = t.el
  local done = release_idle(t, el.leaving)
  if not done then return end
  for _, h in ipairs(done) do
    el.leaving[h], el.held[h], h.batch = nil, nil, nil
    t.refused[h.prefix] = nil
  end
  table.sort(done, function(a, b) return a.prefix < b.prefix end)
  log.info("shards handed over: " .. names_of(done))
end

-- Every beat (el.beat seconds; run() calls it between steps): reads the live
-- elastic hosts, works out this thread's share (luakiq.runner.elastic.share) when
-- they changed, gives back what it no longer owns, and leases every owned
-- shard that has no call in flight nor an ack pending (fetch.lua, limit 0):
-- that takes a new shard as soon as its previous holder let it go (refused
-- until then, or until its lease ran out: a killed holder; its in-flight
-- jobs are restored to the queue then), and keeps idle ones'. Raises on a
-- Redis error (the loop backs off; nothing changes meanwhile).
local function elastic_tick(t)
  local el = t.el
  local now = core.mono()
  if now < el.next then return end
  el.next = now + el.beat
  local tokens = {}
  for _, v in ipairs(hosts.list(t.conn, t.cfg.namespace)) do
    if v.elastic and type(v.token) == "string" and (tonumber(v.seen) or math.huge) <= el.dead_after then
      tokens[#tokens + 1] = v.token
    end
  end
  table.sort(tokens)
  local hosts_key = table.concat(tokens, "\n")
  if hosts_key ~= el.hosts_key then
    el.hosts_key = hosts_key
    local mine = elastic.share(t.all, tokens, el.host, el.threads)[el.index + 1]
    local owned, changed = {}, #mine ~= #t.handlers
    for i, h in ipairs(mine) do
      owned[h] = true
      if t.handlers[i] ~= h then changed = true end
    end
    if changed then
      local gone, new = {}, {}
      for _, h in ipairs(t.handlers) do
        if not owned[h] then
          el.leaving[h] = true
          gone[#gone + 1] = h
        end
      end
      local had = {}
      for _, h in ipairs(t.handlers) do had[h] = true end
      for _, h in ipairs(mine) do
        el.leaving[h] = nil
        if not had[h] then new[#new + 1] = h end
      end
      set_active(t, mine)
      el.changed = true
      log.info(string.format("elastic: %s live; this thread serves %s (%d new, %d to hand over)",
        log.count(math.max(#tokens, 1), "host"), log.count(#mine, "shard"), #new, #gone), { new = #new > 0 and names_of(new) or nil,
        leaving = #gone > 0 and names_of(gone) or nil })
    end
  end
  settle_leaving(t)
  local cmds, hs = {}, {}
  for _, h in ipairs(t.handlers) do
    if not h.task and not t.pending[h] then
      hs[#hs + 1] = h
      cmds[#cmds + 1] = queue.fetch_cmd(h.prefix, t.token, t.lease_ms, 0, nil, h.def.delivery == "at_most_once")
    end
  end
  if #cmds > 0 then
    local r = t.conn:pipeline(cmds)
    for i, h in ipairs(hs) do
      local res = queue.parse_fetch(r[i], h)
      if res.leased then
        el.held[h] = nil
        -- try again as its lease ends (a killed holder's: taken then, not up
        -- to a beat later), or at once when that holder was a process of
        -- this machine that is gone (its lease given back: fetch.take_dead)
        if fetch.take_dead(t, h, res.holder) then el.next = core.mono()
        elseif res.pttl and res.pttl >= 0 then el.next = math.min(el.next, core.mono() + res.pttl / 1000 + 0.005) end
      elseif not el.held[h] then
        el.held[h] = true
        -- a scheduler anew: the old one may have struck the shard off while
        -- it was refused (lag: until its next refresh), and it has work now
        el.changed = true
        if t.refused[h.prefix] then
          t.refused[h.prefix] = nil
          log.info("shard lease acquired", { worker = h.worker, shard = h.shard })
        end
      end
    end
  end
  publish_held(t)
end

-- --- online reshard (luakiq.ops.reshard) ------------------------------------------

-- Every REGISTRY_CHECK seconds (run() calls it between steps) the thread
-- reads the queue registry: a worker whose count there is no longer its own
-- was resharded (`luakiq reshard`) while this host runs. The shards are
-- frozen by then (fetch.lua gives them to the reshard only), so nothing of
-- the queue runs here until the reshard is done, whatever this thread does.
--   Elastic threads follow: the worker's handlers become shards 0..N-1 (the
--   same list, in the same order, on every host), and the next tick shares
--   them anew; a shard beyond N that this thread holds is handed over
--   (released) like any shard it no longer owns.
--   Threads of a fixed plan (the default splitter, by_node, a custom one)
--   cannot re-plan alone: the plan spans every thread of the host and all
--   of them share one lease token, so two threads taking one shard would not
--   be fenced. They stop serving the queue, and the host's main loop stops
--   the host with one line (exit 1: luakiq.ops.cli's run) so that its
--   supervisor starts it again with shards_count = N.
local REGISTRY_CHECK = 1
local function resharded(t, w, n)
  local old = w.shards_count
  w.shards_count = n -- (luakiq.perform_async and the schedules route with it)
  if t.el then
    local all, have, rank = {}, {}, {}
    for _, h in ipairs(t.all) do
      if h.worker ~= w.name or h.shard < n then
        all[#all + 1] = h
        if h.worker == w.name then have[h.shard] = true end
      end
    end
    for shard = 0, n - 1 do if not have[shard] then all[#all + 1] = M.new_handler(t, w, shard) end end
    for i, x in ipairs(t.cfg.workers) do rank[x.name] = i end
    table.sort(all, function(a, b)
      if a.worker ~= b.worker then return rank[a.worker] < rank[b.worker] end
      return a.shard < b.shard
    end)
    t.all = all
    t.el.hosts_key, t.el.next = nil, 0 -- the share anew at the next tick
    log.info(string.format("queue %s resharded from %d to %d shards; this elastic thread takes its share of the new ones",
      w.queue_name, old, n), { worker = w.name })
    return
  end
  local keep, gone = {}, 0
  for _, h in ipairs(t.handlers) do
    if h.worker == w.name then
      t.dropped = t.dropped or {}
      t.dropped[h] = true
      gone = gone + 1
    else
      keep[#keep + 1] = h
    end
  end
  if gone == 0 then return end
  set_active(t, keep)
  t.replan = true
  -- (the main loop stops the host with one line: luakiq.ops.cli's run)
  log.debug(string.format("queue %s was resharded from %d to %d shards; this thread drops its shards (a fixed plan)",
    w.queue_name, old, n), { worker = w.name })
end

local function registry_tick(t)
  local now = core.mono()
  if now < (t.registry_at or 0) then return end
  t.registry_at = now + REGISTRY_CHECK
  local flat = t.conn:call("HGETALL", keys.registry(t.cfg.namespace))
  local counts = {}
  for i = 1, #flat, 2 do counts[flat[i]] = tonumber(flat[i + 1]) end
  for _, w in ipairs(t.cfg.workers) do
    local n = counts[w.queue_name]
    if n and n ~= w.shards_count then resharded(t, w, n) end
  end
end

-- Gives back the leases of a fixed thread's shards of resharded queues once
-- their calls are over (their acks first).
local function settle_dropped(t)
  if t.dropped then release_idle(t, t.dropped) end
end

-- Recurring jobs (config.lua schedules), on thread 0 of every host: every
-- SCHEDULE_CHECK seconds, each schedule's latest tick (<= now) is tried once
-- with schedule.lua, which claims and enqueues it atomically, so hosts
-- racing for a tick enqueue it once. A cron schedule's next tick is cached;
-- at start the latest past tick (up to 400 days back) is tried, which fires
-- a tick missed while no host ran, once.
local SCHEDULE_CHECK = 0.25
local function schedules_tick(t)
  local now = core.now()
  if now < (t.sched_at or 0) then return end
  t.sched_at = now + SCHEDULE_CHECK
  local cfg = t.cfg
  for _, s in ipairs(cfg.schedules) do
    local st = t.sched[s.name]
    if not st then
      st = {}
      t.sched[s.name] = st
      if s.spec then
        st.tick = cron.prev(s.spec, s.zone, now - 400 * 86400, now)
        st.next = cron.next(s.spec, s.zone, now)
      end
    end
    local tick
    if s.every then
      tick = math.floor(now / s.every) * s.every
    else
      while st.next and st.next <= now do
        st.tick = st.next
        st.next = cron.next(s.spec, s.zone, st.next)
      end
      tick = st.tick
    end
    if tick and tick ~= st.claimed then
      local w = cfg.by_name[s.worker]
      local ok, payload = hooks.call("dump_payload", { worker = s.worker }, cfg.dump_payload,
        s.payload == nil and "" or s.payload)
      if not ok or type(payload) ~= "string" then
        log.error("schedule " .. s.name .. ": cannot dump its payload: " .. tostring(payload))
        payload = ""
      end
      local P = keys.prefix(cfg.namespace, w.queue_name, keys.shard(s.id, w.shards_count))
      local r = t.conn:pipeline({ { script = "schedule", P, s.name, string.format("%.17g", tick),
                                    string.format("%.17g", now), runtime.wake_arg(t.conn, cfg), s.id, payload,
                                    tostring(w.shards_count) } })[1]
      -- (resharded since this thread last read the registry: the tick is
      -- claimed in the id's new shard once registry_tick has the new count)
      if type(r) == "table" and r.err and require("luakiq.lib.errors").redis_code(r.err) == "RESHARDED" then return end
      if type(r) == "table" and r.err then error("schedule.lua failed: " .. r.err, 0) end
      st.claimed = tick
      if r == 1 then
        log.info("schedule " .. s.name .. " enqueued its job",
          { worker = w.name, id = s.id, tick = string.format("%.17g", tick) })
      end
    end
  end
end

-- Correlation keys of waits (luakiq.await's key; docs/redis.md, "Waits"),
-- on thread 0 of every host: every SWEEP_EVERY seconds, one step of
-- waitkey.lua sweep (an HSCAN page of SWEEP_COUNT) per queue drops the
-- entries whose wait's deadline passed. Correctness never depends on it
-- (a reply by key re-checks the wait; a claim takes a lapsed entry over):
-- it keeps the keys of finished waits from piling up. The cursor is kept
-- per queue, so a large hash is walked a page a minute.
local SWEEP_EVERY, SWEEP_COUNT = 60, 500
local function sweep_tick(t)
  local now = core.now()
  if now < t.sweep_at then return end
  t.sweep_at = now + SWEEP_EVERY
  local cmds, names, seen = {}, {}, {}
  for _, w in ipairs(t.cfg.workers) do
    if not seen[w.queue_name] then
      seen[w.queue_name] = true
      names[#names + 1] = w.queue_name
      cmds[#cmds + 1] = { script = "waitkey", keys.queue_prefix(t.cfg.namespace, w.queue_name), "sweep",
                          t.sweeps[w.queue_name] or "0", SWEEP_COUNT, string.format("%.17g", now) }
    end
  end
  local r = t.conn:pipeline(cmds)
  for i, q in ipairs(names) do
    if type(r[i]) ~= "table" or r[i].err then error("waitkey.lua sweep failed: " .. tostring(r[i] and r[i].err), 0) end
    t.sweeps[q] = r[i][1]
  end
end

-- Exposed for the shard-handler specs, which drive one thread's state from a
-- `luakiq lua` VM: setup(boot) -> t, process(t, handler) -> ok, head, flush(t);
-- and for the main VM (luakiq.ops.cli): fail_stuck.
M.setup, M.process, M.flush, M.fail_stuck = setup, fetch.process, flush, call.fail_stuck

-- The thread's scheduler over ctx (luakiq.schedulers): lag and seq as they
-- are; a config's own is bounded by hook_timeout (luakiq.lib.hooks): its
-- factory (past it or failing: lag) and each step, whose ctx functions
-- run outside the bound (hooks.outside: a fetch, a perform call with its
-- own timeout). A step past hook_timeout is skipped: the loop goes on
-- (the schedules' tick, TERM); one that raises is logged with a back-off.
local function scheduler(t, ctx)
  local f = t.cfg.scheduler
  if f == schedulers.lag or f == schedulers.seq then return f(ctx) end
  local out = {}
  local proxy = setmetatable({}, {
    __index = function(_, k)
      local v = ctx[k]
      if type(v) ~= "function" or k == "on_done" then return v end
      out[v] = out[v] or hooks.outside(v)
      return out[v]
    end,
    __newindex = ctx,
  })
  local ok, step = hooks.call("scheduler", nil, f, proxy)
  if not ok or type(step) ~= "function" then
    log.error("the config's scheduler did not make its step (" .. tostring(step):match("^[^\n]*") .. "); using lag")
    return schedulers.lag(ctx)
  end
  return function()
    local oks, err, timed_out = hooks.call("scheduler", nil, step)
    if not oks and not timed_out then error(err, 0) end
  end
end

-- The thread's runner between open() and the end of run(): {t =, ctx =,
-- step =, ticker =}. Kept across a run() that returned "reload", so that the
-- thread runs on in this VM when the new code's VM cannot be opened.
local current

-- Opens a worker thread's runner in this VM (called from C, host/entry.c,
-- with the boot string): loads DIR, connects, builds the shard handlers and
-- the scheduler. reloading: a fresh VM replacing an old one on SIGHUP (only
-- the log line differs). Raises a one-line error when DIR does not load.
function M.open(boot_json, reloading)
  -- perform_async in a worker thread follows a reshard made meanwhile
  client.follow = true
  -- os.execute in a worker thread: core.execute (host/sys.c) keeps the
  -- host's INT handler (system(3) ignores INT process-wide while it waits)
  -- and ends the command at the running call's timeout.
  os.execute = core.execute
  local boot = json.decode(boot_json)
  core.log_setup { json = boot.log_json, level = boot.log_level }
  local ok, t = pcall(setup, boot)
  if not ok then error(select(2, errors.describe(t)), 0) end
  local ctx = tasks.scheduler_ctx(t)
  local step = scheduler(t, ctx)
  local what = names_of(t.handlers)
  if t.el then what = string.format("elastic, its share of %d shards (token %s)", #t.all, t.token) end
  log.info((reloading and "thread reloaded: " or "thread started: ") .. what)
  core.set_state(STATE.idle)
  local ticker = core.thread_index() == 0 and #t.cfg.schedules > 0
  if ticker then t.sched, t.tick_every = {}, SCHEDULE_CHECK end
  if core.thread_index() == 0 then t.sweep_at, t.sweeps = core.now(), {} end -- (the first sweep at start)
  current = { t = t, ctx = ctx, step = step, ticker = ticker }
end

-- The thread's loop (called from C after open). Returns 0 when the thread
-- stops, or "reload" when a reload is asked for (SIGHUP: core.reload_wanted)
-- and the thread is at a point between two calls with nothing of its own in
-- flight: no parked call, every fetch acked (the acks sent, so the new VM
-- starts clean); its leases stay held under the same token. The caller
-- swaps the VM, or calls run() again to go on with the old code.
function M.run()
  local t, ctx, ticker = current.t, current.ctx, current.ticker
  local backoff = 0.1
  while not core.stopping() do
    local ok, err
    if not core.reload_wanted() then
      ok, err = xpcall(registry_tick, traceback, t)
      if ok then ok, err = xpcall(settle_dropped, traceback, t) end
      if t.replan then
        t.replan = false
        ctx.handlers = t.handlers
        current.step = scheduler(t, ctx)
      end
      if ok then ok, err = nil, nil end
    end
    if ok == false then
      -- (a Redis error: the back-off below)
    elseif t.el and not core.reload_wanted() then
      ok, err = xpcall(elastic_tick, traceback, t)
      if t.el.changed then
        -- the thread's shards changed: a scheduler anew over them (a call
        -- in flight of a kept shard reports to it; of a dropped one, to none)
        t.el.changed = false
        ctx.handlers = t.handlers
        current.step = scheduler(t, ctx)
      end
    end
    if ok == false then
      -- (an elastic tick's Redis error: the back-off below)
    elseif not core.reload_wanted() then
      ok, err = xpcall(current.step, traceback)
      if ok and ticker then ok, err = xpcall(schedules_tick, traceback, t) end
      if ok and t.sweep_at then ok, err = xpcall(sweep_tick, traceback, t) end
    elseif t.ntasks > 0 then
      -- no new fetch; the parked calls finish (each bounded by its timeout)
      ok, err = xpcall(ctx.wait, traceback, 0.05)
    else
      ok, err = xpcall(flush, traceback, t)
      -- an elastic thread gives back what it was handing over (the new VM
      -- starts from the live hosts again)
      if ok and t.el then ok, err = xpcall(settle_leaving, traceback, t) end
      if ok then return "reload" end
    end
    if ok then
      backoff = 0.1
    elseif err == luakiq.FATAL then
      break
    else
      -- A Redis failure (or a bug in a user scheduler): log, back off, reconnect.
      -- A pending ack stays pending: fetch.lua re-acks by batch id, so nothing runs twice.
      log.error(tostring(err):match("^[^\n]*") .. "; retrying in " .. backoff .. " s")
      core.set_state(STATE.error)
      local okd, errd = xpcall(tasks.drive_parked, traceback, t, ctx.on_done, backoff)
      if not okd then
        if errd == luakiq.FATAL then break end
        log.error(tostring(errd):match("^[^\n]*"))
      end
      backoff = math.min(backoff * 2, 5)
      if t.conn:broken() then
        local okc, e = t.conn:reconnect()
        if okc then log.info("reconnected to Redis") else log.warn(e) end
      end
    end
  end
  -- Graceful stop: the parked tasks finish their calls (each bounded by its
  -- timeout) and settle their fetches first.
  while t.ntasks > 0 and not core.fatal_message() do
    local ok, err = xpcall(ctx.wait, traceback, 0.05)
    if not ok then
      if err == luakiq.FATAL then break end
      log.error(tostring(err):match("^[^\n]*"))
      core.sleep(0.1)
    end
  end
  -- Stop (graceful or after a fatal error): ack what ran, give the shards back
  -- at once. A batch left in flight by luakiq.fatal is then orphaned, and the
  -- next holder restores it without waiting out lease_ttl.
  -- Acks that cannot be sent (Redis away or refusing writes) are tried for
  -- 5 s; then the shards whose acks are still pending keep their lease (no
  -- other host restores the batch before the lease ends, lease_ttl at most)
  -- and one line per shard says what will run again. The other shards are
  -- given back.
  do
    local deadline, said = core.now() + 5, nil
    repeat
      local ok, err = pcall(flush, t)
      if ok then break end
      if not said then log.warn("cannot ack at stop (trying for 5 s): " .. tostring(err):match("^[^\n]*")) end
      said = true
      core.sleep(0.2)
      if t.conn:broken() then t.conn:reconnect() end
    until core.now() > deadline
    local back, all = {}, t.handlers
    if t.el then -- and the shards it was handing over
      all = {}
      for _, h in ipairs(t.handlers) do all[#all + 1] = h end
      for h in pairs(t.el.leaving) do all[#all + 1] = h end
    end
    for _, h in ipairs(all) do
      if t.pending[h] then
        local path, why = unacked.save(t.cfg, { prefix = h.prefix, token = t.token, batch = h.batch,
          lease_ms = t.lease_ms, worker = h.worker, shard = h.shard, fin = h.fin })
        log.error("stopping with the ack of batch " .. tostring(h.batch) .. " unsent; the lease is kept: a start of " ..
                  "luakiq on this machine within lease_ttl (" .. t.cfg.lease_ttl .. " s) sends it (" ..
                  (path or "cannot write: " .. tostring(why)) .. "), else its performed jobs run again when the " ..
                  "lease ends", { worker = h.worker, shard = h.shard })
      else
        back[#back + 1] = h
      end
    end
    local ok, err = pcall(queue.release, t.conn, back, t.token)
    if not ok then log.warn("cannot give the leases back at stop: " .. tostring(err):match("^[^\n]*")) end
    if t.el then core.set_held("[]") end
  end
  core.set_state(STATE.stopped)
  return 0
end

return M
