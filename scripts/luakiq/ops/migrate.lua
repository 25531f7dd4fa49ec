-- luakiq.ops.migrate: `luakiq migrate DIR`, a namespace converted online from
-- layout 1 (docs/redis.md of luakiq before layout 2) to layout 2
-- (docs/redis.md, "Migration from layout 1"; docs/operations.md,
-- "Upgrading from layout 1"). Runs in the CLI's VM.
--
-- The layout version (NS:{NS:queues}:layout, layout.lua) says where a
-- namespace is: absent with queues registered = layout 1; "1>2" = this
-- migration under way (every luakiq of layout 2 refuses to start); "2".
-- Every step below is one atomic call of migrate_shard.lua on one shard
-- (one hash slot) that deletes the layout-1 keys it converted, and the
-- shard's progress is those keys themselves (what is left to convert) plus
-- its fence and holder: a run killed anywhere is run again and goes on; a
-- page converted twice finds nothing the second time.
--   1. "begin": the version becomes "1>2";
--   2. every shard of every registered queue is fenced (P reshard, P shards
--      = keys.lua FENCE): layout-1 hosts stop fetching from it (a holder in
--      a call finishes and acks, then gives the lease back), layout-1
--      producers are refused;
--   3. per shard, once nobody holds its lease: "claim" converts the batch in
--      flight (a layout-2 host restores it) and makes the shard nobody's;
--      then "page" converts LIMIT queued and dead jobs per call until none
--      are left. Shards still leased wait while the others go on;
--   4. "done": the version becomes "2".
-- On a namespace already at "2" the same run sweeps layout-1 jobs written
-- late (by a layout-1 producer, into shards it was not fenced from) into
-- layout 2 and renews the fences; the in-flight batches are left alone.
local core = require "luakiq.core"
local keys = require "luakiq.lib.keys"

local M = {}

M.PAGE = 500 -- jobs per page call (--page)

local function check(r, what)
  if type(r) == "table" and r.err then error("redis: migrate " .. what .. ": " .. r.err, 0) end
  return r
end

-- Every shard of every registered queue (the registry's count: a queue
-- absent from DIR converts too, since the whole namespace changes layout).
local function all_shards(conn, ns)
  local flat = conn:call("HGETALL", keys.registry(ns))
  local queues = {}
  for i = 1, #flat, 2 do
    local n = tonumber(flat[i + 1])
    if n and n >= 1 and n == math.floor(n) then queues[#queues + 1] = { flat[i], n } end
  end
  table.sort(queues, function(a, b) return a[1] < b[1] end)
  local list = {}
  for _, q in ipairs(queues) do
    for s = 0, q[2] - 1 do
      list[#list + 1] = { queue = q[1], shard = s, count = q[2], prefix = keys.prefix(ns, q[1], s) }
    end
  end
  return list, #queues
end

-- opts: page (jobs per call), progress(text, final) (a terminal's line),
-- pace (seconds to sleep after each page call: specs), wake (the channel
-- argument, runtime.wake_arg). Returns the summary table; raises one-line
-- errors.
function M.run(conn, cfg, opts)
  opts = opts or {}
  local ns, page = cfg.namespace, opts.page or M.PAGE
  local show = opts.progress or function() end
  local started = core.now()
  local v = conn:script("layout", keys.registry(ns), "begin")
  local mode
  if v == "1" or v == "1>2" then
    mode = "migrate"
  elseif v == "2" then
    mode = "sweep"
  else
    error(string.format("namespace '%s' has layout '%s', written by a newer luakiq; this one migrates layout 1 to 2",
      ns, tostring(v)), 0)
  end
  local shards, nqueues = all_shards(conn, ns)
  local sum = { namespace = ns, layout = "2", resumed = v == "1>2", swept = mode == "sweep",
                queues = nqueues, shards = #shards, jobs = 0, dead = 0, busy = 0, dropped = 0, waited = 0 }

  -- 2. fence every shard (one pipeline)
  local cmds = {}
  for i, s in ipairs(shards) do
    cmds[i] = { script = "migrate_shard", numkeys = 1, s.prefix, "freeze", tostring(s.count), opts.wake or "" }
  end
  local skipped = {}
  for i, r in ipairs(#cmds > 0 and conn:pipeline(cmds) or {}) do
    r = check(r, "freeze")
    if type(r) == "table" and r[1] == "RESHARD" then
      local s = shards[i]
      if mode == "migrate" then
        error(string.format("queue '%s' has a reshard under way (shard %d is frozen by it): finish it with the " ..
          "luakiq that started it (luakiq reshard), then run luakiq migrate again", s.queue, s.shard), 0)
      end
      skipped[i] = true -- (sweep: a layout-2 reshard moves the shard's jobs; the next sweep sees it)
    end
  end

  -- 3. claim (migrate) and convert, shard by shard; leased shards wait
  local done, pending = 0, {}
  for i in ipairs(shards) do
    if skipped[i] then done = done + 1 else pending[#pending + 1] = i end
  end
  local waiting, wait_from = 0, nil
  local function progress(final)
    local dt = core.now() - started
    local n = sum.jobs + sum.dead
    show(string.format("migrating %s to layout 2: %d/%d shards, %d jobs (%.0f jobs/s)%s", ns, done, #shards, n,
      dt > 0 and n / dt or 0, waiting > 0 and string.format(", %d shards leased (waiting)", waiting) or ""), final)
  end
  while #pending > 0 do
    local still = {}
    for _, i in ipairs(pending) do
      local s = shards[i]
      local ready = true
      if mode == "migrate" then
        local r = check(conn:script("migrate_shard", s.prefix, "claim", string.format("%.17g", core.now())), "claim")
        if r[1] == "LEASED" then
          ready = false
        else
          sum.busy = sum.busy + (tonumber(r[2]) or 0)
        end
      end
      if ready then
        repeat
          local r = check(conn:script("migrate_shard", s.prefix, "page", tostring(page),
            string.format("%.17g", core.now()), mode), "page")
          sum.jobs = sum.jobs + tonumber(r[1])
          sum.dead = sum.dead + tonumber(r[2])
          sum.dropped = sum.dropped + tonumber(r[3])
          progress()
          if opts.pace then core.sleep(opts.pace) end
        until r[4] ~= "1"
        done = done + 1
      else
        still[#still + 1] = i
      end
    end
    pending, waiting = still, #still
    progress()
    if #pending > 0 then
      -- a layout-1 host in a call keeps its lease until the call ends (its
      -- ack gives it back); a dead one's lapses within its lease_ttl
      wait_from = wait_from or core.now()
      core.sleep(0.2)
    end
  end
  if wait_from then sum.waited = core.now() - wait_from end

  -- 4. the namespace is layout 2
  if mode == "migrate" then
    local now_v = conn:script("layout", keys.registry(ns), "done")
    if now_v ~= "2" then
      error(string.format("namespace '%s': layout became '%s' during the migration", ns, tostring(now_v)), 0)
    end
  end
  sum.seconds = core.now() - started
  progress(true)
  return sum
end

-- The summary line of a run.
function M.summary_line(sum)
  local what
  if sum.swept then
    what = sum.jobs + sum.dead > 0 and string.format("was layout 2 already; swept %d queued and %d dead jobs " ..
      "written late in layout 1", sum.jobs, sum.dead) or "was layout 2 already; nothing to migrate"
  else
    what = string.format("migrated to layout 2%s: %d queued, %d dead and %d in-flight jobs", sum.resumed and
      " (resumed)" or "", sum.jobs, sum.dead, sum.busy)
  end
  local extra = sum.dropped > 0 and string.format(", %d without payloads dropped", sum.dropped) or ""
  return string.format("namespace %s %s in %d queues, %d shards%s (%.1f s)", sum.namespace, what, sum.queues,
    sum.shards, extra, sum.seconds)
end

return M
