-- luakiq.schedulers: which shard a worker thread serves next.
--
-- A scheduler is a function (ctx) -> step; the runner calls step() in a loop
-- (one thread, one scheduler instance). ctx, given by the runner:
--   handlers       array of this thread's handlers ({worker=, shard=, ...};
--                  best_due: the priority of the shard's best due job as
--                  last seen by a fetch or heads(), nil when 100 or unknown)
--   process(h)     -> ok, head: fetch and run one batch of h. ok: a batch ran
--                  and succeeded. head: the lowest perform_in left in h's
--                  queue afterwards; nil means empty after a success, and
--                  empty or unknown after a false result
--   heads([only])  -> array, one entry per handler: its lowest perform_in, or
--                  false when empty (one Redis round trip for all); only: an
--                  array of handler indexes, the ones read (the others nil)
--   wait([secs])   sleep up to poll_interval (or secs, a hint, when given) or
--                  until a push wakes the thread; -> array of woken handler
--                  indexes (possibly empty)
--   poll()         optional, -> array of woken handler indexes, never blocks
--   now()          -> float seconds (Unix time)
--   poll_interval  seconds (default 1)
-- Calls in flight (a scheduler opts in by setting ctx.on_done):
--   on_done        set by the scheduler: function(h, ok, head). Then a
--                  process(h) whose perform call waits in luakiq's I/O
--                  returns nil at once (h is in flight), the thread runs
--                  other shards, and on_done(h, ok, head) reports the result
--                  later (from wait() or poll()). Without it, process()
--                  returns only when h's work is done.
--   busy(h)        true while h must not be processed (in flight, or its
--                  worker's concurrent_shards reached)
--   wait() also returns when a parked call's wait is over; its second
--   result is then true.
--
-- Config:  scheduler = "lag" (default) | "seq" | function(ctx) return step end
local M = {}

-- seq: Lowkiq's Seq, exactly. Round robin over the handlers; after a full
-- cycle in which every process() returned false (empty or failed), wait()
-- once and return without processing.
-- Calls in flight: a busy handler is skipped (it counts as a false result);
-- a process() that parks counts as true (work went on).
function M.seq(ctx)
  local handlers = ctx.handlers
  local n = #handlers
  local i, done, any_ok = 0, 0, false
  local busy = ctx.busy or function() return false end
  ctx.on_done = function(_, ok) if ok then any_ok = true end end
  return function()
    if done == n then -- a full cycle of results (also true when n == 0)
      local idle = not any_ok
      done, any_ok = 0, false
      if idle then
        ctx.wait()
        return
      end
    end
    i = i % n + 1
    local h = handlers[i]
    done = done + 1
    if busy(h) then return end
    local ok = ctx.process(h)
    if ok or ok == nil then any_ok = true end
  end
end

-- lag: serve the due shard whose oldest job has waited longest (Lowkiq's Lag),
-- without Lowkiq's probe round trip before every batch.
--
-- * Heads (lowest perform_in per handler) are cached. ctx.heads() refreshes
--   the cache at the first step, after every wait() that was not ended by a
--   wake-up, at least once per poll_interval as a safety net (pushes that do
--   not wake the thread, e.g. jobs scheduled in the future, are found by
--   it), and when a process() leaves its shard's head unknown. A wake-up
--   (from poll() or ending a wait()) refreshes only the woken handlers' heads
--   (a push or a reply wakes its own shard; the others' cached heads still
--   hold): a reply to a job that waits costs one heads.lua, not one per
--   shard of the thread. Between refreshes, process()'s returned head keeps
--   the cache exact for that shard.
-- * Due means head <= now (lag >= 0). Lowkiq keeps only lag > 0, so a job due
--   exactly now would wait a whole poll_interval; here it runs.
-- * Priorities first: the shard whose best due job has the lowest priority
--   number wins (handlers[i].best_due, kept by the runner from every fetch
--   and probe; nil = 100, the default); among equals the largest lag wins;
--   ties go to the first handler in order (max_by).
-- * Never spin: a process() returning false (empty, failed, lease held
--   elsewhere) is a strike for its handler. The first strike only re-reads
--   the head (so the jobs behind a failed batch run at once, as in Lowkiq);
--   the second makes the handler ineligible until the next refresh by time or
--   wait not ended by a wake-up (or a wake-up for that shard). A success
--   clears the strikes.
-- * Nothing due: wait(hint), hint = seconds until the earliest future head,
--   capped by poll_interval, so that scheduled jobs start on time.
-- * Calls in flight: a busy handler (ctx.busy) is not eligible; its result
--   comes through ctx.on_done and updates heads and strikes as a direct
--   result would. A wait that only resumed parked calls leaves the heads
--   fresh (no probe).
function M.lag(ctx)
  local handlers = ctx.handlers
  local n = #handlers
  local interval = ctx.poll_interval or 1
  local heads = {}        -- i -> perform_in | false (empty)
  local strikes = {}      -- i -> false results since the last success/reset
  local stale = true      -- probe and forget strikes (start, after wait)
  local reprobe = false   -- probe only
  local woke = {}         -- handler indexes a wake-up named: probe those only
  local reset_at = -math.huge
  local busy = ctx.busy or function() return false end
  local seen_busy = {}    -- i -> head a probe saw while i was in flight

  local function result(i, ok, head)
    if ok then
      strikes[i] = nil
      heads[i] = type(head) == "number" and head or false
    else
      strikes[i] = (strikes[i] or 0) + 1
      if type(head) == "number" then heads[i] = head else reprobe = true end
    end
  end
  -- A call in flight reports the head its fetch saw, which can be older
  -- than one a probe saw since (a push for the shard woke us meanwhile):
  -- the earlier of the two wins, so that push is not forgotten.
  ctx.on_done = function(h, ok, head)
    local i = h.index
    result(i, ok, head)
    local p = seen_busy[i]
    seen_busy[i] = nil
    if type(p) == "number" and (heads[i] == false or heads[i] == nil or p < heads[i]) then heads[i] = p end
  end

  local function probe(only)
    local h = ctx.heads(only)
    for k = 1, only and #only or n do
      local i = only and only[k] or k
      local v = h[i]
      heads[i] = type(v) == "number" and v or false
      if busy(handlers[i]) then seen_busy[i] = heads[i] end
    end
    reprobe = false
  end
  -- The woken indexes w (strikes forgotten) join the next partial probe.
  local function woken_by(w)
    for _, i in ipairs(w) do
      strikes[i] = nil
      woke[#woke + 1] = i
    end
  end

  return function()
    if n == 0 then ctx.wait() return end
    local now = ctx.now()
    if ctx.poll then
      local woken = ctx.poll()
      if woken and #woken > 0 then woken_by(woken) end
    end
    if stale or now - reset_at >= interval then
      probe()
      strikes, stale, reset_at, woke = {}, false, now, {}
    elseif reprobe then
      probe()
      woke = {}
    elseif #woke > 0 then
      probe(woke)
      woke = {}
    end

    local best, best_lag, best_prio, next_at = nil, -1, math.huge, math.huge
    for i = 1, n do
      local head = heads[i]
      if head and (strikes[i] or 0) < 2 and not busy(handlers[i]) then
        local lag = now - head
        if lag >= 0 then
          local prio = tonumber(handlers[i].best_due) or 100
          if prio < best_prio or (prio == best_prio and lag > best_lag) then best, best_lag, best_prio = i, lag, prio end
        elseif head < next_at then
          next_at = head
        end
      end
    end

    if best then
      local ok, head = ctx.process(handlers[best])
      if ok ~= nil then result(best, ok, head) end
      return
    end

    local hint = interval
    if next_at - now < hint then hint = next_at - now end
    local woken, resumed = ctx.wait(hint)
    if woken and #woken > 0 then
      woken_by(woken) -- (pushes and replies wake their shards: the others' heads hold)
    elseif not resumed then
      stale = true -- time passed and pushes may have arrived
    end -- (parked calls went on: the heads still hold)
  end
end

return M
