-- Lowkiq's spec/queue/queue_metrics_spec.rb and shard_metrics_spec.rb for
-- luakiq: luakiq.ops.admin.worker_stats / stats (sums of stats.lua over shards)
-- and the per-shard scripts stats.lua and heads.lua.
local S = require "queue.support"
local admin = require "luakiq.ops.admin"
local runner = require "luakiq.runner"

describe("metrics", function()
  local env = S.lifecycle()
  local function now() return env.now end

  describe("of an empty queue", function()
    for _, field in ipairs { "length", "morgue_length", "lag", "processed", "failed", "busy" } do
      it(field .. " is 0", function()
        assert.are.equal(0, env:stats("Test")[field])
        assert.are.equal(0, env:stats("Multi")[field])
      end)
    end
  end)

  describe("of a filled queue", function()
    it("one pushed job gives length 1 (fresh)", function()
      env:push("Test", { { id = 1 } })
      local s = env:stats("Test")
      assert.are.same({ 1, 1, 0 }, { s.length, s.fresh, s.retries })
    end)

    it("a failed queued job counts in length as a retry", function()
      env:fail_all("Test", { { id = 1 } }, "x")
      env:push("Test", { { id = 2 } })
      local s = env:stats("Test")
      assert.are.same({ 2, 1, 1 }, { s.length, s.fresh, s.retries })
    end)

    it("one dead job gives morgue_length 1", function()
      env:kill("Test", { { id = 1 } })
      assert.are.equal(1, env:stats("Test").morgue_length)
      assert.are.equal(0, env:stats("Test").length)
    end)

    it("jobs at now-10 and now give lag 10", function()
      env:push("Test", { { id = 1, perform_in = now() - 10 }, { id = 2, perform_in = now() } })
      assert.are.equal(10, env:stats("Test").lag)
    end)

    it("takes the largest lag over the shards", function()
      env:push("Multi", { { id = 1, perform_in = now() - 3 }, { id = 2, perform_in = now() - 10 },
                          { id = 3, perform_in = now() + 100 } })
      assert.are.equal(10, env:stats("Multi").lag)
    end)

    it("only a future job gives lag 0", function()
      env:push("Test", { { id = 1, perform_in = now() + 10 } })
      assert.are.equal(0, env:stats("Test").lag)
    end)

    it("a processed and acked batch gives processed 1", function()
      env:push("Test", { { id = 1 } })
      local t = env:thread("Test")
      assert.is_true((runner.process(t, t.handlers[1])))
      assert.are.equal(0, env:stats("Test").processed)  -- the ack rides on the next call
      runner.flush(t)
      local s = env:stats("Test")
      assert.are.same({ 1, 0, 0 }, { s.processed, s.busy, s.length })
    end)

    it("a failed batch gives failed 1", function()
      env:push("Test", { { id = 1 } })
      local t = env:thread("Test")
      t.cfg.by_name.Test.perform = function() error("no", 0) end
      assert.is_false((runner.process(t, t.handlers[1])))
      local s = env:stats("Test")
      assert.are.same({ 1, 0, 0, 1 }, { s.failed, s.processed, s.busy, s.retries })
    end)

    it("a fetched batch without ack gives busy 1", function()
      env:push("Test", { { id = 1 } })
      env:fetch("Test")
      local s = env:stats("Test")
      assert.are.same({ 1, 0 }, { s.busy, s.length })
    end)

    it("sums processed and failed over the shards", function()
      local jobs = {}
      for i = 1, 6 do jobs[i] = { id = i } end
      env:push("Multi", jobs)
      local handlers = {}
      for s = 0, 4 do handlers[#handlers + 1] = { worker = "Multi", shard = s } end
      local t = env:thread(handlers)
      t.cfg.by_name.Multi.perform = function(batch) if batch["3"] then error("three", 0) end end
      for _, h in ipairs(t.handlers) do runner.process(t, h) end
      runner.flush(t)
      -- ids 3 and 5 share shard 1 (batch_size 2): the whole batch fails
      local s = env:stats("Multi")
      assert.are.same({ 4, 2, 0 }, { s.processed, s.failed, s.busy })
    end)
  end)

  describe("stats (Lowkiq's /api/v1/stats shape)", function()
    it("has total and by_worker with length, morgue_length, lag and expired", function()
      env:push("Multi", { { id = 1, perform_in = now() - 4 }, { id = 2 } })
      env:push("Other", { { id = 1, perform_in = now() - 7 } })
      env:kill("Test", { { id = 1 } })
      assert.are.same({
        total = { length = 3, morgue_length = 1, lag = 7, expired = 0, waiting = 0 },
        by_worker = {
          Test = { length = 0, morgue_length = 1, lag = 0, expired = 0, waiting = 0 },
          Batch = { length = 0, morgue_length = 0, lag = 0, expired = 0, waiting = 0 },
          Ahead = { length = 0, morgue_length = 0, lag = 0, expired = 0, waiting = 0 },
          Multi = { length = 2, morgue_length = 0, lag = 4, expired = 0, waiting = 0 },
          Other = { length = 1, morgue_length = 0, lag = 7, expired = 0, waiting = 0 },
        },
      }, admin.stats(env.conn, env.cfg))
    end)

    it("gives a lag of about 10 s on the real clock for jobs at now-10 and now", function()
      S.unfreeze()
      local t = S.real_now()
      env:push("Test", { { id = 1, perform_in = t - 10 }, { id = 2 } })
      local lag = admin.stats(env.conn, env.cfg).total.lag
      assert.is_true(lag >= 10 and lag < 10.5, "lag " .. lag)
    end)
  end)

  describe("of one shard (stats.lua, heads.lua)", function()
    it("an empty shard has no head and lag 0", function()
      local p = env:prefix("Multi", 3)
      -- (then waiting and the five reply counters: spec/queue/await_spec.lua;
      -- then snoozed, stale and cancelled)
      assert.are.same({ "0", "0", "0", "", "0", "0", "0", "0", "0", "0", "0", "0", "0", "0", "0", "0", "0" },
        env.conn:script("stats", p))
      assert.are.same({ "", "0" }, env.conn:script("heads", p))
      assert.are.equal(0, env:stats("Multi").lag)
    end)

    it("a shard with jobs at now-10 and now has head now-10, lag 10", function()
      env:push("Multi", { { id = 1, perform_in = now() - 10 }, { id = 4, perform_in = now() } }) -- both shard 3
      local r = env.conn:script("stats", env:prefix("Multi", 3))
      assert.are.equal("2", r[1])
      assert.are.equal(10, now() - tonumber(r[4]))
      assert.are.same({ r[4], "0" }, env.conn:script("heads", env:prefix("Multi", 3)))
    end)

    it("heads.lua flags in-flight jobs without a lease as orphaned", function()
      env:push("Test", { { id = 1 } })
      env:fetch("Test")
      local p = env:prefix("Test")
      assert.are.same({ "", "0" }, env.conn:script("heads", p))
      env.conn:call("DEL", p .. "lease")
      assert.are.same({ "", "1" }, env.conn:script("heads", p))
    end)
  end)
end)
