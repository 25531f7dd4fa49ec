-- Lowkiq's spec/queue/actions_spec.rb for luakiq: the admin actions of
-- luakiq.ops.admin (perform_now.lua, kill_failed.lua, delete_failed.lua,
-- morgue_requeue.lua, morgue_delete.lua), with DESIGN's rules: "perform all
-- now" sets perform_in = now (never 0); a morgue requeue gives perform_in now
-- and retry_count -1 and keeps the minimal score of an equal payload.
local S = require "queue.support"
local admin = require "luakiq.ops.admin"

describe("actions", function()
  local env = S.lifecycle()
  local function now() return env.now end
  local function act(name, ...) return admin[name](env.conn, env.cfg, ...) end

  describe("perform_all_now", function()
    it("does nothing on an empty queue", function()
      assert.are.same({ changed = 0 }, act("perform_all_now", "Test"))
    end)

    it("sets a future job's perform_in to now (not 0) and leaves due jobs alone", function()
      env:push("Multi", { { id = 1, perform_in = now() + 100 }, { id = 2, perform_in = now() - 5 },
                          { id = 3, perform_in = now() + 1 } })
      assert.are.same({ changed = 2 }, act("perform_all_now", "Multi"))
      assert.are.equal(now(), env:queued("Multi", 1).perform_in)
      assert.are.equal(now() - 5, env:queued("Multi", 2).perform_in)
      assert.are.equal(now(), env:queued("Multi", 3).perform_in)
    end)

    it("pages through more than 1000 jobs of a shard", function()
      local jobs = {}
      for i = 1, 1001 do jobs[i] = { id = i, perform_in = now() + i } end
      env:push("Test", jobs)
      assert.are.same({ changed = 1001 }, act("perform_all_now", "Test"))
      -- every one of them now due: none left after now in later (where
      -- future jobs wait), all 1001 at now
      assert.are.equal(0, env.conn:call("ZCOUNT", env:prefix("Test") .. "later", "(" .. now(), "+inf"))
      assert.are.equal(1001, env.conn:call("ZCOUNT", env:prefix("Test") .. "later", now(), now()))
      assert.are.equal(now(), env:queued("Test", 1001).perform_in)
    end)
  end)

  describe("kill_failed", function()
    it("does nothing on an empty queue", function()
      assert.are.same({ killed = 0 }, act("kill_failed", "Test"))
    end)

    it("moves failed jobs with their error to the morgue and keeps fresh ones queued", function()
      env:fail_all("Test", { { id = "failed", payload = "a", score = 1 }, { id = "failed", payload = "b", score = 2 } },
        "oops")
      env:push("Test", { { id = "fresh", payload = "f" } })
      assert.are.same({ killed = 1 }, act("kill_failed", "Test"))
      assert.are.same({ "fresh" }, env:ids(env:list("Test")))
      assert.is_nil(env:dead("Test", "fresh"))
      assert.are.same({ id = "failed", updated_at = now(), error = "oops", payloads = { { "a", 1 }, { "b", 2 } } },
        env:dead("Test", "failed"))
      assert.are.equal(("oops"):reverse(), env.conn:call("HGET", env:prefix("Test") .. "morgue:errors", "failed"))
      assert.is_false(env.conn:call("HGET", env:prefix("Test") .. "errors", "failed"))
    end)

    it("merges into a dead job of the same id, the minimal score winning", function()
      env:kill("Test", { { id = 1, payload = "a", score = 5 } }, "first")
      env:push("Test", { { id = 1, payload = "a", score = 2, retry_count = 0 }, { id = 1, payload = "b", score = 4 } })
      act("kill_failed", "Test")
      assert.are.same({ { "a", 2 }, { "b", 4 } }, env:dead("Test", 1).payloads)
    end)
  end)

  describe("delete_failed", function()
    it("does nothing on an empty queue", function()
      assert.are.same({ deleted = 0 }, act("delete_failed", "Test"))
    end)

    it("deletes failed jobs (not to the morgue) and keeps fresh ones", function()
      env:fail_all("Multi", { { id = 1 }, { id = 2 } }, "x")
      env:push("Multi", { { id = 3 } })
      assert.are.same({ deleted = 2 }, act("delete_failed", "Multi"))
      assert.are.same({ "3" }, env:ids(env:list("Multi")))
      assert.are.same({}, env:morgue("Multi"))
      assert.are.same({}, env.conn:call("KEYS", "*errors*"))
    end)
  end)

  describe("morgue_requeue", function()
    it("queues a dead job with perform_in now, retry_count -1, its payloads and error; the morgue is emptied", function()
      env:fail_all("Test", { { id = 1, payload = "v1", score = 1 }, { id = 1, payload = "v2", score = 2 } }, "gone")
      act("kill_failed", "Test")
      env.now = S.freeze(now() + 50)
      assert.are.same({ requeued = 1 }, act("morgue_requeue", "Test", { 1 }))
      assert.are.same({ id = "1", perform_in = now(), retry_count = -1, error = "gone",
                        payloads = { { "v1", 1 }, { "v2", 2 } } }, env:queued("Test", 1))
      assert.are.same({}, env:morgue("Test"))
      assert.are.same({}, env.conn:call("KEYS", "*morgue*"))
    end)

    it("keeps the lower queued score of an equal payload", function()
      env:kill("Test", { { id = 1, payload = "v", score = 5 } })
      env:push("Test", { { id = 1, payload = "v", score = 2 } })
      act("morgue_requeue", "Test", { "1" })
      assert.are.same({ { "v", 2 } }, env:queued("Test", 1).payloads)
    end)

    it("keeps the lower dead score of an equal payload", function()
      env:kill("Test", { { id = 1, payload = "v", score = 2 } })
      env:push("Test", { { id = 1, payload = "v", score = 5 } })
      act("morgue_requeue", "Test", { "1" })
      assert.are.same({ { "v", 2 } }, env:queued("Test", 1).payloads)
    end)

    it("unites different payloads, sorted by score", function()
      env:kill("Test", { { id = 1, payload = "dead", score = 3 } })
      env:push("Test", { { id = 1, payload = "queued", score = 1 } })
      act("morgue_requeue", "Test", { "1" })
      assert.are.same({ { "queued", 1 }, { "dead", 3 } }, env:queued("Test", 1).payloads)
    end)

    it("resets a queued job's future perform_in to now", function()
      env:kill("Test", { { id = 1 } })
      env:push("Test", { { id = 1, perform_in = now() + 100 } })
      act("morgue_requeue", "Test", { "1" })
      assert.are.equal(now(), env:queued("Test", 1).perform_in)
    end)

    it("resets a queued job's retry_count 0 to -1", function()
      env:kill("Test", { { id = 1 } })
      env:push("Test", { { id = 1, retry_count = 0 } })
      act("morgue_requeue", "Test", { "1" })
      assert.are.equal(-1, env:queued("Test", 1).retry_count)
    end)

    it("requeues only the given ids and ignores unknown ones", function()
      env:kill("Multi", { { id = 1 }, { id = 2 }, { id = 3 } })
      assert.are.same({ requeued = 2 }, act("morgue_requeue", "Multi", { 1, 3, "nope" }))
      assert.are.same({ "1", "3" }, env:ids(env:list("Multi")))
      assert.are.same({ "2" }, env:ids(env:morgue("Multi")))
    end)

    it("with no ids moves everything from the morgue to the queue, over every shard", function()
      local jobs = {}
      for i = 1, 20 do jobs[i] = { id = i } end
      env:kill("Multi", jobs)
      assert.are.equal(20, #env:morgue("Multi"))
      assert.are.same({ requeued = 20 }, act("morgue_requeue", "Multi"))
      assert.are.same({}, env:morgue("Multi"))
      assert.are.equal(20, #env:list("Multi"))
      assert.are.equal(20, env:stats("Multi").fresh)
    end)
  end)

  describe("morgue_delete", function()
    it("with no ids empties the morgue of every shard", function()
      local jobs = {}
      for i = 1, 20 do jobs[i] = { id = i } end
      env:kill("Multi", jobs, "x")
      assert.are.same({ deleted = 20 }, act("morgue_delete", "Multi"))
      assert.are.same({}, env:morgue("Multi"))
      assert.are.same({}, env.conn:call("KEYS", "*morgue*"))
    end)

    it("deletes only the given ids", function()
      env:kill("Multi", { { id = 1 }, { id = 2 } })
      assert.are.same({ deleted = 1 }, act("morgue_delete", "Multi", { "2", "nope" }))
      assert.are.same({ "1" }, env:ids(env:morgue("Multi")))
    end)
  end)

  it("never touches a batch in flight", function()
    env:push("Test", { { id = 1, retry_count = 0, perform_in = now() - 1 } })
    local res = env:fetch("Test")
    env:push("Test", { { id = 2, perform_in = now() + 9 } })
    act("perform_all_now", "Test")
    act("kill_failed", "Test")
    act("delete_failed", "Test")
    act("morgue_requeue", "Test")
    assert.are.same({ { id = "1", perform_in = now() - 1, retry_count = 0, payloads = { { "", now() } } } },
      env:busy("Test"))
    assert.are.equal(1, env:fetch("Test", 0, { ack = res.batch, fetch = false }).acked)
  end)
end)
