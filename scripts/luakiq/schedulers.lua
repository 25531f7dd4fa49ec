-- luakiq.schedulers: which shard a worker thread serves next.
--
-- A scheduler is a function (ctx) -> step; the runner calls step() in a loop
-- (one thread, one scheduler instance). ctx, given by the runner:
--   handlers       array of this thread's handlers ({worker=, shard=, ...})
--   process(h)     -> ok, head: fetch and run one batch of h. ok: a batch ran
--                  and succeeded. head: the lowest perform_in left in h's
--                  queue afterwards; nil means empty after a success, and
--                  empty or unknown after a false result
--   heads()        -> array, one entry per handler: its lowest perform_in, or
--                  false when empty (one Redis round trip for all)
--   wait([secs])   sleep up to poll_interval (or secs, a hint, when given) or
--                  until a push wakes the thread; -> array of woken handler
--                  indexes (possibly empty)
--   poll()         optional, -> array of woken handler indexes, never blocks
--   now()          -> float seconds (Unix time)
--   poll_interval  seconds (default 1)
--
-- Config:  scheduler = "lag" (default) | "seq" | function(ctx) return step end
local M = {}

-- seq: Lowkiq's Seq, exactly. Round robin over the handlers; after a full
-- cycle in which every process() returned false (empty or failed), wait()
-- once and return without processing.
function M.seq(ctx)
  local handlers = ctx.handlers
  local n = #handlers
  local i, done, any_ok = 0, 0, false
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
    local ok = ctx.process(handlers[i])
    done = done + 1
    if ok then any_ok = true end
  end
end

-- lag: serve the due shard whose oldest job has waited longest (Lowkiq's Lag),
-- without Lowkiq's probe round trip before every batch.
--
-- * Heads (lowest perform_in per handler) are cached. ctx.heads() refreshes
--   the cache at the first step, after every wait(), at least once per
--   poll_interval as a safety net (pushes that do not wake the thread, e.g.
--   jobs scheduled in the future, are found by it), when poll() reports a
--   wake-up, and when a process() leaves its shard's head unknown. Between
--   refreshes, process()'s returned head keeps the cache exact for that shard.
-- * Due means head <= now (lag >= 0). Lowkiq keeps only lag > 0, so a job due
--   exactly now would wait a whole poll_interval; here it runs.
-- * The largest lag wins; ties go to the first handler in order (max_by).
-- * Never spin: a process() returning false (empty, failed, lease held
--   elsewhere) is a strike for its handler. The first strike only re-reads
--   the head (so the jobs behind a failed batch run at once, as in Lowkiq);
--   the second makes the handler ineligible until the next refresh by time or
--   wait (or a wake-up for that shard). A success clears the strikes.
-- * Nothing due: wait(hint), hint = seconds until the earliest future head,
--   capped by poll_interval, so that scheduled jobs start on time.
function M.lag(ctx)
  local handlers = ctx.handlers
  local n = #handlers
  local interval = ctx.poll_interval or 1
  local heads = {}        -- i -> perform_in | false (empty)
  local strikes = {}      -- i -> false results since the last success/reset
  local stale = true      -- probe and forget strikes (start, after wait)
  local reprobe = false   -- probe only
  local reset_at = -math.huge

  local function probe()
    local h = ctx.heads()
    for i = 1, n do
      local v = h[i]
      heads[i] = type(v) == "number" and v or false
    end
    reprobe = false
  end

  return function()
    if n == 0 then ctx.wait() return end
    local now = ctx.now()
    if ctx.poll then
      local woken = ctx.poll()
      if woken and #woken > 0 then
        for _, i in ipairs(woken) do strikes[i] = nil end
        reprobe = true
      end
    end
    if stale or now - reset_at >= interval then
      probe()
      strikes, stale, reset_at = {}, false, now
    elseif reprobe then
      probe()
    end

    local best, best_lag, next_at = nil, -1, math.huge
    for i = 1, n do
      local head = heads[i]
      if head and (strikes[i] or 0) < 2 then
        local lag = now - head
        if lag >= 0 then
          if lag > best_lag then best, best_lag = i, lag end
        elseif head < next_at then
          next_at = head
        end
      end
    end

    if best then
      local ok, head = ctx.process(handlers[best])
      if ok then
        strikes[best] = nil
        heads[best] = type(head) == "number" and head or false
      else
        strikes[best] = (strikes[best] or 0) + 1
        if type(head) == "number" then heads[best] = head else reprobe = true end
      end
      return
    end

    local hint = interval
    if next_at - now < hint then hint = next_at - now end
    ctx.wait(hint)
    stale = true -- time passed and pushes may have arrived
  end
end

return M
