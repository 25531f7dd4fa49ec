-- luakiq.ops.reshard: `luakiq reshard DIR WORKER N`, a queue's shards_count
-- changed while hosts run (docs/operations.md, "Resharding"; the keys and
-- scripts in docs/redis.md, "Reshard"). Runs in the CLI's VM.
--
-- A job of id X lives in shard crc32(X) % shards_count. With A shards before
-- and B after, every job whose shard differs moves. Every Redis call touches
-- one shard (one hash slot, Redis Cluster), so a move is three calls:
-- reshard_out.lua stages the job in its old shard (it leaves the queue and
-- the morgue there, atomically), reshard_in.lua merges it into its new
-- shard (idempotent), reshard_shard.lua "drop" forgets the staged copy. A
-- run killed anywhere leaves every job queued, dead or staged; the next run
-- (same N) imports what is staged first, then goes on.
--
-- Order: while the jobs move, no host may run any job of the queue (an id
-- could be half here, half there). So:
--   1. lock (one reshard of a queue at a time) and record from/to;
--   2. freeze shards 0..max(A, B)-1 (fetch.lua gives them to nobody else,
--      push.lua refuses pushes routed with another count than B);
--   3. registry NS:queues[Q] = B (a host started with A is refused; running
--      hosts see it within a second or two and re-plan, luakiq.runner);
--   4. take every shard's lease (a host in a call keeps its lease until the
--      call ends and is acked; a dead host's in-flight jobs are restored, as
--      by any new holder);
--   5. move the misplaced jobs of shards 0..A-1, then check again;
--   6. counters of removed shards (the schedules' last ticks moved at 2);
--   7. thaw (release the leases, publish the wake-ups), unlock.
-- The queue does not run from 2 to 7 (the "pause" the summary reports);
-- pushes go on throughout.
local core = require "luakiq.core"
local config = require "luakiq.lib.config"
local errors = require "luakiq.lib.errors"
local keys = require "luakiq.lib.keys"
local log = require "luakiq.lib.log"
local queue = require "luakiq.runner.queue"

local M = {}

M.LOCK_TTL = 5       -- seconds: a killed reshard's lock lapses within this
M.PAGE = 1000        -- ids read per ZRANGEBYLEX
M.BATCH = 200        -- ids per reshard_out.lua call (--batch)

-- r, or raises one line naming the call: a script's refusal (FENCED,
-- INFLIGHT: docs/redis.md, "Errors") or any other error of Redis.
local function check(r, what)
  if type(r) == "table" and r.err then error("redis: " .. what .. ": " .. errors.redis_text(r.err), 0) end
  return r
end

local function esc(s)
  s = tostring(s)
  if #s > 100 then s = s:sub(1, 100) .. "..." end
  return (s:gsub("%c", function(c) return string.format("\\x%02x", c:byte()) end))
end

-- opts: batch (ids per move call), progress(text, final) (a terminal's
-- progress line), pace (seconds to sleep after each move call: specs).
-- Returns the summary table; raises one-line errors (input: exit 2).
function M.run(conn, cfg, worker_name, n_text, opts)
  opts = opts or {}
  local w = cfg.by_name[worker_name]
  if not w then errors.notfound("unknown worker '" .. esc(worker_name) .. "'") end
  local n = tonumber(n_text)
  local max = config.MAX_SHARDS
  if not n or n ~= math.floor(n) or n < 1 or n > max or not tostring(n_text):match("^%d+$") then
    errors.input("N must be an integer from 1 to " .. max .. ", got '" .. esc(n_text) .. "'")
  end
  local batch = opts.batch or M.BATCH
  local progress = opts.progress or function() end
  local ns, Q = cfg.namespace, w.queue_name
  local reg = keys.registry(ns)
  local skey, lkey = keys.reshard(ns, Q)
  local cur = conn:call("HGET", reg, Q)
  if not cur then
    errors.input(string.format("queue '%s' is not in the registry (%s): no host has run it yet; " ..
      "set shards_count = %d in %s instead", Q, reg, n, w.file or w.name))
  end
  local pending = conn:call("HGET", skey, "to")
  if not pending and tonumber(cur) == n then
    errors.input(string.format("queue '%s' already has %d shards; nothing to do", Q, n))
  end
  local token = core.hostname() .. ":" .. core.getpid() .. ":" .. core.token() .. "/reshard"
  local function lock(...)
    return check(conn:pipeline({ { script = "reshard_lock", numkeys = 2, skey, lkey, ... } })[1], "reshard_lock")
  end
  local r = lock("begin", token, cur, tostring(n), tostring(M.LOCK_TTL * 1000), string.format("%.3f", core.now()))
  if r[1] == "BUSY" then
    errors.input(string.format("a reshard of queue '%s' is already running (%s); wait for it to finish", Q,
      esc(r[2]:gsub("/reshard$", ""))))
  elseif r[1] == "PENDING" then
    errors.input(string.format("an interrupted reshard of queue '%s' from %s to %s shards must finish first: " ..
      "luakiq reshard DIR %s %s", Q, r[2], r[3], w.name, r[3]))
  end
  local A, B = tonumber(r[2]), n
  local S = math.max(A, B)
  local t0 = core.mono()
  local prefix = {}
  for s = 0, S - 1 do prefix[s] = keys.prefix(ns, Q, s) end
  local lease_ms = math.floor(cfg.lease_ttl * 1000)
  local held = {}
  local stats = { worker = w.name, queue = Q, from = A, to = B, moved = 0, restored = 0 }
  local title = string.format("reshard %s: %d -> %d shards", Q, A, B)

  -- The lock and the leases held, renewed every second (lease_ttl is at
  -- least... whatever it is: a third of it at most).
  local every = math.min(1, cfg.lease_ttl / 3)
  local next_renew = core.mono() + every
  local function tick()
    if core.mono() < next_renew then return end
    next_renew = core.mono() + every
    local cmds = { { script = "reshard_lock", numkeys = 2, skey, lkey, "renew", token, tostring(M.LOCK_TTL * 1000) } }
    local which = {}
    for s = 0, S - 1 do
      if held[s] then
        cmds[#cmds + 1] = { script = "renew", prefix[s], token, tostring(lease_ms) }
        which[#cmds] = s
      end
    end
    local rs = conn:pipeline(cmds)
    if check(rs[1], "reshard_lock") ~= 1 then
      error("reshard of queue '" .. Q .. "': lost its lock (stalled for over " .. M.LOCK_TTL .. " s?); " ..
        "run it again to finish", 0)
    end
    for i = 2, #rs do
      if check(rs[i], "renew") ~= 1 then
        error("reshard of queue '" .. Q .. "': lost the lease of shard " .. which[i] .. "; run it again to finish", 0)
      end
    end
  end

  -- 2. freeze, 3. registry
  local cmds = {}
  for s = 0, S - 1 do cmds[#cmds + 1] = { script = "reshard_shard", prefix[s], "freeze", token, tostring(B),
                                    keys.wake_channel(ns) } end
  for _, x in ipairs(conn:pipeline(cmds)) do check(x, "reshard_shard freeze") end
  local frozen_at = core.mono()
  -- the schedules' last ticks follow their job id to its new shard before
  -- any host routes with B (the registry, next): a host with A is refused
  -- by schedule.lua from now on, one with B finds the last tick there
  for _, sc in ipairs(cfg.schedules or {}) do
    if sc.worker == w.name then
      local old, new = prefix[keys.shard(sc.id, A)], prefix[keys.shard(sc.id, B)]
      if old ~= new then
        local v = conn:call("HGET", old .. "schedules", sc.name)
        local nv = conn:call("HGET", new .. "schedules", sc.name)
        if v and (not nv or tonumber(v) > tonumber(nv)) then conn:call("HSET", new .. "schedules", sc.name, v) end
      end
    end
  end
  conn:call("HSET", reg, Q, tostring(B))

  -- 4. every shard's lease (restoring what dead holders left in flight)
  local amo = w.delivery == "at_most_once"
  local waited = core.mono()
  while true do
    cmds = {}
    local which = {}
    for s = 0, S - 1 do
      if not held[s] then
        cmds[#cmds + 1] = queue.fetch_cmd(prefix[s], token, lease_ms, 0, nil, amo)
        which[#cmds] = s
      end
    end
    if #cmds == 0 then break end
    for i, x in ipairs(conn:pipeline(cmds)) do
      check(x, "fetch")
      local res = queue.parse_fetch(x, { prefix = prefix[which[i]] })
      if not res.leased then
        held[which[i]] = true
        stats.restored = stats.restored + res.restored
      end
    end
    local left = 0
    for s = 0, S - 1 do if not held[s] then left = left + 1 end end
    if left == 0 then break end
    progress(string.format("%s: waiting for the calls of %s to end (%.0f s)", title, log.count(left, "shard"),
      core.mono() - waited))
    tick()
    core.sleep(0.02)
  end
  stats.waited = core.mono() - waited

  -- 5. the moves
  local function move(s, flat)
    if #flat == 0 then return 0 end
    local by, order = {}, {}
    local ids = {}
    for i = 1, #flat, 2 do
      local id = flat[i]
      ids[#ids + 1] = id
      local t = keys.shard(id, B)
      if not by[t] then by[t] = {} order[#order + 1] = t end
      local l = by[t]
      l[#l + 1] = id
      l[#l + 1] = flat[i + 1]
    end
    cmds = {}
    for _, t in ipairs(order) do
      local l = by[t]
      for from = 1, #l, 2 * batch do
        local c = { script = "reshard_in", prefix[t], token }
        for j = from, math.min(from + 2 * batch - 1, #l) do c[#c + 1] = l[j] end
        cmds[#cmds + 1] = c
      end
    end
    for _, x in ipairs(conn:pipeline(cmds)) do check(x, "reshard_in") end
    stats.moved = stats.moved + #ids
    -- the drop, and the count so far in the reshard's record (for whoever
    -- watches), in one round trip
    local rs = conn:pipeline({ { script = "reshard_shard", prefix[s], "drop", token, unpack(ids) },
                               { "HSET", skey, "moved", tostring(stats.moved) } })
    check(rs[1], "reshard_shard drop")
    check(rs[2], "HSET")
    return #ids
  end
  local function show()
    progress(string.format("%s: %s moved (%.1f s)", title, log.count(stats.moved, "job"), core.mono() - t0))
  end
  -- Stages the ids mis of shard s (prefix P) with reshard_out.lua, batch
  -- ids a call, and moves what it staged; returns how many moved.
  local function send_out(s, P, mis)
    local moved = 0
    for i = 1, #mis, batch do
      local c = { script = "reshard_out", P, token }
      for j = i, math.min(i + batch - 1, #mis) do c[#c + 1] = mis[j] end
      moved = moved + move(s, check(conn:pipeline({ c })[1], "reshard_out"))
      show()
      tick()
      if opts.pace then core.sleep(opts.pace) end
    end
    return moved
  end
  local function pass()
    local moved = 0
    for s = 0, A - 1 do
      local P = prefix[s]
      -- what a killed run staged first (lib/keys.lua: reshard_out)
      moved = moved + move(s, check(conn:call("HGETALL", P .. "reshard:out"), "HGETALL"))
      -- the queued and the dead jobs, by id (members esc(id) .. "\0\0" ..
      -- record, docs/redis.md)
      -- (and the jobs of ids that wait for a reply, held behind their wait)
      for _, index in ipairs { "jobs", "morgue:jobs", "held" } do
        local from = "-"
        repeat
          local ids = conn:call("ZRANGEBYLEX", P .. index, from, "+", "LIMIT", "0", tostring(M.PAGE))
          local mis, after = {}, nil
          for _, m in ipairs(ids) do
            local id
            id, after = keys.member_id(m)
            if keys.shard(id, B) ~= s then mis[#mis + 1] = id end
          end
          moved = moved + send_out(s, P, mis)
          if after then from = after end
          tick()
        until #ids < M.PAGE
      end
      -- the waits and the pending waits of ids that wait for a reply, by
      -- id (hashes, docs/redis.md "Waits": reshard_out.lua takes each with
      -- its held job and the queue's secret)
      for _, hash in ipairs { "waits", "waits:new" } do
        local cursor = "0"
        repeat
          local r = check(conn:call("HSCAN", P .. hash, cursor, "COUNT", tostring(M.PAGE)), "HSCAN")
          cursor = r[1]
          local mis = {}
          for i = 1, #r[2], 2 do
            if keys.shard(r[2][i], B) ~= s then mis[#mis + 1] = r[2][i] end
          end
          moved = moved + send_out(s, P, mis)
          tick()
        until cursor == "0"
      end
    end
    return moved
  end
  local passes = 0
  repeat
    passes = passes + 1
    local moved = pass()
  until moved == 0 or passes >= 5
  stats.passes = passes

  -- 6. counters of removed shards (into shard s % B)
  for s = B, A - 1 do
    local flat = check(conn:pipeline({ { script = "reshard_shard", prefix[s], "counters_out", token } })[1], "counters")
    if #flat > 0 then
      check(conn:pipeline({ { script = "reshard_shard", prefix[s % B], "counters_in", token, tostring(s),
                              unpack(flat) } })[1], "counters")
    end
    check(conn:pipeline({ { script = "reshard_shard", prefix[s], "counters_drop", token } })[1], "counters")
    tick()
  end
  -- 7. thaw
  cmds = {}
  for s = 0, S - 1 do
    cmds[#cmds + 1] = { script = "reshard_shard", prefix[s], "thaw", token, keys.wake_channel(ns), s >= B and "1" or "0" }
  end
  for _, x in ipairs(conn:pipeline(cmds)) do check(x, "reshard_shard thaw") end
  stats.paused = core.mono() - frozen_at
  lock("end", token)
  stats.seconds = core.mono() - t0
  show()
  progress(string.format("%s: done, %s moved in %.2f s", title, log.count(stats.moved, "job"), stats.seconds), true)
  return stats
end

return M
