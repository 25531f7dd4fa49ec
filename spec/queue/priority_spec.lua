-- Job priorities (job field priority, default 100, lower first; DESIGN §6,
-- docs/redis.md "Priority"): fetch order within a shard, merges, the way
-- back from failures and restores, listings, stats and the admin actions
-- across the priority levels, and a thread's choice between shards.
local S = require "queue.support"
local admin = require "luakiq.ops.admin"
local schedulers = require "luakiq.schedulers"

describe("priority", function()
  local env = S.lifecycle()

  local function fetched_ids(res)
    local out = {}
    for i, j in ipairs(res.jobs) do out[i] = j.id end
    return out
  end

  it("fetches the due jobs of a shard lowest priority number first, perform_in within a level", function()
    local now = env.now
    env:push("Test", {
      { id = "d1", perform_in = now - 50 },                 -- 100
      { id = "low", perform_in = now - 90, priority = 500 },
      { id = "hi2", perform_in = now - 10, priority = 1 },
      { id = "hi1", perform_in = now - 20, priority = 1 },
      { id = "d2", perform_in = now - 40, priority = 100 },
      { id = "mid", perform_in = now - 5, priority = 50 },
      { id = "later", perform_in = now + 100, priority = 0 }, -- not due: never ahead of due jobs
      { id = "neg", perform_in = now - 1, priority = -7 },
    })
    local res = env:fetch("Test", 0, { limit = 3 })
    assert.same({ "neg", "hi1", "hi2" }, fetched_ids(res))
    assert.equal(50, res.best) -- the best due job left
    assert.equal(now - 90, res.head) -- the head is still the earliest perform_in of any level
    env:fetch("Test", 0, { limit = 0, ack = res.batch, fetch = false })
    res = env:fetch("Test", 0, { limit = 10 })
    assert.same({ "mid", "d1", "d2", "low" }, fetched_ids(res))
    assert.equal(now + 100, res.head)
    assert.is_nil(res.best) -- nothing due
    env:fetch("Test", 0, { limit = 0, ack = res.batch, fetch = false })
    S.freeze(now + 100)
    res = env:fetch("Test", 0, { limit = 10 })
    assert.same({ "later" }, fetched_ids(res))
    env:fetch("Test", 0, { limit = 0, ack = res.batch, fetch = false })
    -- every level key is gone with its last job
    assert.same({}, env.conn:call("KEYS", "*queue:*"))
    assert.equal(0, env.conn:call("EXISTS", env:prefix("Test") .. "levels", env:prefix("Test") .. "prio"))
  end)

  it("a level far behind costs a fetch nothing: 2,000 due low-priority jobs do not delay a default one", function()
    local now = env.now
    local jobs = {}
    for i = 1, 2000 do jobs[i] = { id = "bulk" .. i, perform_in = now - 1000 + i / 10, priority = 200 } end
    jobs[#jobs + 1] = { id = "normal", perform_in = now - 1 }
    env:push("Test", jobs)
    local res = env:fetch("Test", 0, { limit = 1 })
    assert.same({ "normal" }, fetched_ids(res))
    assert.equal(200, res.best)
    env:fetch("Test", 0, { limit = 0, ack = res.batch, fetch = false })
    assert.same({ "bulk1", "bulk2" }, fetched_ids(env:fetch("Test", 0, { limit = 2 })))
  end)

  it("merges keep the lowest priority, the queued perform_in and the payloads of both", function()
    local now = env.now
    env:push("Test", { { id = "a", payload = "p1", perform_in = now - 5, priority = 30 } })
    env:push("Test", { { id = "a", payload = "p2", perform_in = now - 50, priority = 70 } })
    local job = admin.job(env.conn, env.cfg, "Test", "a")
    assert.equal(30, job.priority)
    assert.equal(now - 5, job.perform_in)
    env:push("Test", { { id = "a", payload = "p3", priority = 10 } })
    job = admin.job(env.conn, env.cfg, "Test", "a")
    assert.equal(10, job.priority)
    assert.equal(now - 5, job.perform_in)
    assert.equal(3, #job.payloads)
    -- a default push into a prioritized job keeps its priority; a default
    -- job pushed with priority 200 stays at 100
    env:push("Test", { { id = "a", payload = "p4" }, { id = "b" }, { id = "b", priority = 200 } })
    assert.equal(10, admin.job(env.conn, env.cfg, "Test", "a").priority)
    assert.equal(100, admin.job(env.conn, env.cfg, "Test", "b").priority)
    -- within one push: the first group's perform_in, the lowest priority
    env:push("Test", { { id = "c", perform_in = now - 1, priority = 60 }, { id = "c", perform_in = now - 99, priority = 40 } })
    job = admin.job(env.conn, env.cfg, "Test", "c")
    assert.equal(40, job.priority)
    assert.equal(now - 1, job.perform_in)
    assert.equal(3, env:stats("Test").length)
  end)

  it("a failed or restored job goes back at its priority, merged with a queued one of its id", function()
    local now = env.now
    env:push("Test", { { id = "x", priority = 7 }, { id = "y", priority = 300 } })
    local res = env:fetch("Test", 0, { limit = 10 })
    assert.same({ "x", "y" }, fetched_ids(res))
    assert.equal(7, admin.job(env.conn, env.cfg, "Test", "x").priority) -- in flight
    env:push("Test", { { id = "y", payload = "again", priority = 250 } }) -- queued behind the flight
    assert.equal("OK", env:fail("Test", 0, { batch = res.batch, error = "boom" }, { "x", now - 1, "y", now - 1 })[1])
    assert.equal(7, admin.job(env.conn, env.cfg, "Test", "x").priority)
    assert.equal(250, admin.job(env.conn, env.cfg, "Test", "y").priority)
    -- a new holder restores a dead holder's batch at its priority
    res = env:fetch("Test", 0, { limit = 1 })
    assert.same({ "x" }, fetched_ids(res))
    env.conn:call("DEL", env:prefix("Test") .. "lease")
    res = env:fetch("Test", 0, { token = "other", limit = 0, fetch = false })
    assert.equal(1, res.restored)
    assert.equal(7, admin.job(env.conn, env.cfg, "Test", "x").priority)
    assert.same({ "x", "y" }, fetched_ids(env:fetch("Test", 0, { token = "other", limit = 10 })))
  end)

  it("listings, stats and the admin actions see every level", function()
    local now = env.now
    env:push("Test", {
      { id = "a", perform_in = now - 3 }, { id = "b", perform_in = now - 2, priority = 5 },
      { id = "c", perform_in = now + 50, priority = 900 }, { id = "d", perform_in = now - 1 },
    })
    local st = env:stats("Test")
    assert.equal(4, st.length)
    assert.equal(3, st.lag)
    assert.same({ "a", "b", "d", "c" }, env:ids(env:list("Test", "perform_in")))
    assert.same({ "c", "d", "b", "a" }, env:ids(env:list("Test", "perform_in", "desc")))
    assert.same({ "b", "d" }, env:ids(env:list("Test", "perform_in", "asc", "-inf", "+inf", 2, 1)))
    assert.same({ "a", "b", "c", "d" }, env:ids(env:list("Test", "retry_count")))
    -- perform all now reaches the future job of priority 900
    admin.perform_all_now(env.conn, env.cfg, "Test")
    assert.equal(now, env:queued("Test", "c").perform_in)
    -- delete one of another level
    admin.delete_queued(env.conn, env.cfg, "Test", { "b" })
    assert.is_nil(env:queued("Test", "b"))
    assert.equal(3, env:stats("Test").length)
    assert.equal(0, env.conn:call("EXISTS", env:prefix("Test") .. "queue:5"))
  end)

  it("a thread serving several shards takes the shard whose best due job has the lowest number first", function()
    local now = env.now
    -- Multi: 5 shards. One id per shard, found by pushing and reading back.
    local keys = require "luakiq.lib.keys"
    local by_shard = {}
    for i = 1, 200 do
      local s = keys.shard("j" .. i, 5)
      by_shard[s] = by_shard[s] or {}
      table.insert(by_shard[s], "j" .. i)
    end
    -- shard 0: old default jobs; shard 1: newer jobs of priority 3
    local jobs = {}
    for k = 1, 3 do jobs[#jobs + 1] = { id = by_shard[0][k], perform_in = now - 100 } end
    for k = 1, 3 do jobs[#jobs + 1] = { id = by_shard[1][k], perform_in = now - 1, priority = 3 } end
    env:push("Multi", jobs)
    -- the Lag scheduler over fetch.lua and heads.lua as the runner calls them
    local handlers = { { worker = "Multi", shard = 0, prefix = env:prefix("Multi", 0) },
                       { worker = "Multi", shard = 1, prefix = env:prefix("Multi", 1) } }
    local order = {}
    local ctx = {
      handlers = handlers,
      now = function() return now end,
      heads = function()
        local hs = {}
        for i, h in ipairs(handlers) do
          local r = env.conn:script("heads", h.prefix, S.TOKEN, now)
          hs[i] = tonumber(r[1]) or false
          h.best_due = tonumber(r[3])
        end
        return hs
      end,
      process = function(h)
        local res = env:fetch("Multi", h.shard, { limit = 1 })
        for _ in ipairs(res.jobs) do order[#order + 1] = h.shard end
        if res.batch ~= "" then env:fetch("Multi", h.shard, { limit = 0, ack = res.batch, fetch = false }) end
        h.best_due = res.best
        return #res.jobs > 0, res.head
      end,
      wait = function() return {} end,
    }
    local step = schedulers.lag(ctx)
    for _ = 1, 6 do step() end
    assert.same({ 1, 1, 1, 0, 0, 0 }, order)
  end)
end)
