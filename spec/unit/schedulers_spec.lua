local schedulers = require "luakiq.schedulers"

-- A fake ctx over an in-memory model: queues[i] is a sorted array of the
-- perform_in values of handler i. process(h) takes the first due one (the
-- `result` hook can override what happens). Every call is counted.
local function fake(queues, opts)
  opts = opts or {}
  local ctx = {
    handlers = {}, clock = opts.now or 1000, poll_interval = opts.poll_interval or 1,
    n = { process = 0, heads = 0, wait = 0, poll = 0 }, processed = {}, hints = {},
  }
  for i = 1, #queues do ctx.handlers[i] = { worker = "W", shard = i - 1, index = i } end
  local function head(i) return queues[i][1] or false end
  function ctx.now() return ctx.clock end
  function ctx.heads()
    ctx.n.heads = ctx.n.heads + 1
    local out = {}
    for i = 1, #queues do out[i] = head(i) end
    return out
  end
  function ctx.process(h)
    ctx.n.process = ctx.n.process + 1
    ctx.processed[#ctx.processed + 1] = h.index
    if opts.result then return opts.result(h.index, queues, ctx) end
    local q = queues[h.index]
    if q[1] and q[1] <= ctx.clock then
      table.remove(q, 1)
      return true, q[1]
    end
    return false, q[1]
  end
  function ctx.wait(hint)
    ctx.n.wait = ctx.n.wait + 1
    ctx.hints[#ctx.hints + 1] = hint
    return opts.woken or {}
  end
  return ctx
end

local function steps(step, k) for _ = 1, k do step() end end

describe("luakiq.schedulers.lag", function()
  it("keeps a push seen while the shard's call was in flight (calls in flight)", function()
    local busy, queues = {}, { { 990 }, {} }
    local ctx = fake(queues, {
      result = function(i, queues)
        table.remove(queues[i], 1)
        busy[i] = true
        return nil -- parked: the result comes through ctx.on_done
      end,
    })
    function ctx.busy(h) return busy[h.index] == true end
    local woken = {}
    function ctx.poll() local w = woken woken = {} return w end
    -- a wait that only resumed parked calls (as the runner's does)
    function ctx.wait() ctx.n.wait = ctx.n.wait + 1 return {}, true end
    local step = schedulers.lag(ctx)
    step() -- shard 1's call parks
    assert.same({ 1 }, ctx.processed)
    -- a push for shard 1 wakes the thread while the call is in flight
    queues[1][1] = 999
    woken = { 1 }
    step() -- probes (sees the pushed job of the busy shard), nothing else due: waits
    -- the call ends; its fetch saw nothing left (the push came after it)
    busy[1] = nil
    ctx.on_done(ctx.handlers[1], true, nil)
    step()
    assert.same({ 1, 1 }, ctx.processed) -- the pushed job is fetched, not forgotten
  end)

  it("processes a shard with lag 1.0 (Lowkiq)", function()
    local ctx = fake { { 999 } }
    schedulers.lag(ctx)()
    assert.same({ 1 }, ctx.processed)
    assert.equal(0, ctx.n.wait)
  end)

  it("waits once and processes nothing when nothing is due (Lowkiq: lag 0)", function()
    for _, q in ipairs { {}, { 1005 } } do
      local ctx = fake { q }
      schedulers.lag(ctx)()
      assert.equal(0, ctx.n.process)
      assert.equal(1, ctx.n.wait)
    end
  end)

  it("runs a job due exactly now (lag >= 0, unlike Lowkiq's lag > 0)", function()
    local ctx = fake { { 1000 } }
    schedulers.lag(ctx)()
    assert.equal(1, ctx.n.process)
  end)

  it("serves the largest lag first, ties in handler order", function()
    local ctx = fake { { 998 }, { 990 }, { 995 }, { 990 }, {} }
    steps(schedulers.lag(ctx), 4)
    assert.same({ 2, 4, 3, 1 }, ctx.processed)
  end)

  it("orders by lag across shards as jobs drain", function()
    local ctx = fake { { 990, 996 }, { 993, 994 } }
    steps(schedulers.lag(ctx), 4)
    assert.same({ 1, 2, 2, 1 }, ctx.processed)
  end)

  it("probes heads once, not before every batch", function()
    local q = {}
    for i = 1, 3 do q[i] = {} for j = 1, 10 do q[i][j] = 900 + j end end
    local ctx = fake(q)
    steps(schedulers.lag(ctx), 30)
    assert.equal(30, ctx.n.process)
    assert.equal(1, ctx.n.heads)
    assert.equal(0, ctx.n.wait)
  end)

  it("re-probes at least once per poll_interval", function()
    local q = { {} }
    for j = 1, 100 do q[1][j] = 900 end
    local ctx = fake(q, { poll_interval = 2 })
    local step = schedulers.lag(ctx)
    steps(step, 5)
    assert.equal(1, ctx.n.heads)
    ctx.clock = ctx.clock + 1.9
    step()
    assert.equal(1, ctx.n.heads)
    ctx.clock = ctx.clock + 0.2
    step()
    assert.equal(2, ctx.n.heads)
  end)

  it("finds a job pushed without a wake-up by the safety-net probe", function()
    local q = { {}, {} }
    for j = 1, 100 do q[1][j] = 900 end
    local ctx = fake(q)
    local step = schedulers.lag(ctx)
    steps(step, 3)
    q[2][1] = 800 -- pushed meanwhile, older than anything in shard 1
    step()
    assert.equal(1, ctx.processed[4])
    ctx.clock = ctx.clock + 1
    step()
    assert.equal(2, ctx.processed[5])
  end)

  it("re-probes after every wait", function()
    local ctx = fake { {} }
    local step = schedulers.lag(ctx)
    steps(step, 3)
    assert.equal(3, ctx.n.wait)
    assert.equal(3, ctx.n.heads)
  end)

  it("hints wait with the time until the next scheduled job, capped by poll_interval", function()
    local ctx = fake({ { 1000.25 }, { 1003 } }, { poll_interval = 1 })
    local step = schedulers.lag(ctx)
    step()
    assert.near(0.25, ctx.hints[1], 1e-9)
    local ctx2 = fake { { 1005 } }
    schedulers.lag(ctx2)()
    assert.equal(1, ctx2.hints[1])
  end)

  it("treats a success with no head as an empty shard (no extra probe)", function()
    local ctx = fake { { 999 } }
    local step = schedulers.lag(ctx)
    step() -- processes the only job; the shard is now empty
    step() -- waits
    assert.same({ process = 1, heads = 1, wait = 1, poll = 0 }, ctx.n)
  end)

  it("goes on at once after a failed batch (re-reads the head)", function()
    -- shard 1: the first job fails (moved 15 s ahead), the next two are due
    local failed = false
    local ctx = fake({ { 990, 991, 992 } }, {
      result = function(i, queues, c)
        local q = queues[i]
        if not failed then
          failed = true
          table.remove(q, 1)
          q[#q + 1] = c.clock + 15
          return false, nil
        end
        table.remove(q, 1)
        return true, q[1]
      end,
    })
    steps(schedulers.lag(ctx), 3)
    assert.equal(3, ctx.n.process)
    assert.equal(0, ctx.n.wait)
    assert.equal(2, ctx.n.heads)
  end)

  it("never spins on a shard that reports due jobs but yields none (refused lease)", function()
    for _, head_back in ipairs { true, false } do
      local ctx = fake({ { 900 } }, {
        result = function(i, queues) return false, head_back and queues[i][1] or nil end,
      })
      local step = schedulers.lag(ctx)
      local since_wait, max_run = 0, 0
      for _ = 1, 30 do
        local before = ctx.n.wait
        step()
        if ctx.n.wait > before then since_wait = 0 else since_wait = since_wait + 1 end
        if since_wait > max_run then max_run = since_wait end
      end
      assert.is_true(max_run <= 2, "at most 2 attempts between waits")
      assert.is_true(ctx.n.wait >= 10)
    end
  end)

  it("keeps serving other shards while one is refused", function()
    local q = { { 900 }, {} }
    for j = 1, 20 do q[2][j] = 950 end
    local ctx = fake(q, {
      result = function(i, queues)
        if i == 1 then return false, queues[1][1] end
        table.remove(queues[2], 1)
        return true, queues[2][1]
      end,
    })
    steps(schedulers.lag(ctx), 22)
    local ones = 0
    for _, i in ipairs(ctx.processed) do if i == 1 then ones = ones + 1 end end
    assert.equal(2, ones)
    assert.equal(0, ctx.n.wait)
  end)

  it("re-probes when the optional poll() reports a wake-up", function()
    local q = { {}, {} }
    for j = 1, 100 do q[1][j] = 990 end
    local ctx = fake(q)
    local woken = {}
    function ctx.poll()
      ctx.n.poll = ctx.n.poll + 1
      local w = woken
      woken = {}
      return w
    end
    local step = schedulers.lag(ctx)
    steps(step, 3)
    q[2][1] = 980
    woken = { 2 }
    step()
    assert.equal(2, ctx.n.heads)
    assert.equal(2, ctx.processed[4])
  end)

  it("with no handlers only waits", function()
    local ctx = fake {}
    steps(schedulers.lag(ctx), 2)
    assert.same({ process = 0, heads = 0, wait = 2, poll = 0 }, ctx.n)
  end)
end)

describe("luakiq.schedulers.seq", function()
  local function scripted(results)
    local k = 0
    return fake({ {}, {}, {} }, { result = function() k = k + 1 return results[(k - 1) % #results + 1] end })
  end

  it("round robin with false, true, true never waits (Lowkiq)", function()
    local ctx = scripted { false, true, true }
    steps(schedulers.seq(ctx), 12)
    assert.same({ 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3 }, ctx.processed)
    assert.equal(0, ctx.n.wait)
  end)

  it("waits on the 4th call after three falses, without processing (Lowkiq)", function()
    local ctx = scripted { false }
    local step = schedulers.seq(ctx)
    steps(step, 3)
    assert.equal(0, ctx.n.wait)
    step()
    assert.equal(1, ctx.n.wait)
    assert.equal(3, ctx.n.process)
    step()
    assert.same({ 1, 2, 3, 1 }, ctx.processed)
  end)

  it("does not probe heads", function()
    local ctx = scripted { true }
    steps(schedulers.seq(ctx), 5)
    assert.equal(0, ctx.n.heads)
  end)

  it("with no handlers only waits", function()
    local ctx = fake {}
    steps(schedulers.seq(ctx), 2)
    assert.same({ process = 0, heads = 0, wait = 2, poll = 0 }, ctx.n)
  end)
end)
