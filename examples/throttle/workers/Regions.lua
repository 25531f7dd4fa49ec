-- Regions: jobs that call a service in one of three regions. At most 100
-- run at once across every host (concurrency), and no region takes more
-- than its share of those 100 slots: east 40, north 30, west 30 (hipq's
-- example). A job's region is its payload's `region` (the newest payload's,
-- after a merge). Each call records "region start end" in Redis so that
-- run.sh can show how many ran at once per region.
local luakiq = require "luakiq"

local SLOTS = 100
local SHARE = { east = 0.40, north = 0.30, west = 0.30 }

return {
  shards_count = 256,  -- one call per shard at a time: more shards than slots
  batch_size = 1,
  concurrency = SLOTS,
  label = function(id, payloads) return payloads[#payloads].region end,
  -- ctx.running: every running job of the worker on every host, with its
  -- label; ctx.label and ctx.cost: this job's
  throttle = function(ctx)
    local share = SHARE[ctx.label]
    if not share then return true end -- a job of no known region is not throttled
    local used = 0
    for _, r in ipairs(ctx.running) do
      if r.label == ctx.label then used = used + r.cost end
    end
    return used + ctx.cost <= share * SLOTS -- false: wait in place, ask again soon
  end,
  perform = function(batch)
    for _, payloads in pairs(batch) do
      local p = payloads[#payloads]
      local t0 = luakiq.now()
      luakiq.sleep(p.seconds or 0.5) -- the call to the region's service
      luakiq.redis.call("RPUSH", "example:throttle:calls", ("%s %.6f %.6f"):format(p.region, t0, luakiq.now()))
    end
  end,
}
