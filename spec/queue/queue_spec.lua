-- Lowkiq's spec/queue/queue_spec.rb for luakiq: fetch, push merge (new +
-- queued), push_back merge (failed + queued, fail.lua), in-flight data, ack,
-- morgue, delete and serialization, on the "Test" queue (1 shard), with the
-- merge rules of docs/redis.md ("Merge rules") where they differ from Lowkiq's code.
local S = require "queue.support"
local admin = require "luakiq.ops.admin"
local client = require "luakiq.client"
local errors = require "luakiq.lib.errors"

describe("queue", function()
  local env = S.lifecycle()
  local function now() return env.now end

  describe("fetch", function()
    it("returns no job from an empty queue", function()
      local res = env:fetch("Test")
      assert.are.same({}, res.jobs)
      assert.are.equal("", res.batch)
      assert.is_nil(res.head)
    end)

    it("returns a due job with its perform_in, retry_count -1 and payloads (default score now)", function()
      env:push("Test", { { id = 1, payload = "v1", perform_in = now() - 10 } })
      local res = env:fetch("Test")
      -- (fetch.lua sends payloads without scores; busy.lua lists them with)
      assert.are.same({ { id = "1", perform_in = now() - 10, retry_count = -1, payloads = { { "v1" } } } },
        res.jobs)
      assert.are.equal("1", res.batch)
      assert.are.same({ { "v1", now() } }, env:busy("Test")[1].payloads)
    end)

    it("skips a job whose perform_in is in the future and reports it as the head", function()
      env:push("Test", { { id = 1, payload = "v1", perform_in = now() + 10 } })
      local res = env:fetch("Test")
      assert.are.same({}, res.jobs)
      assert.are.equal(now() + 10, res.head)
    end)

    it("takes every job with perform_in <= now, including exactly now and negative times", function()
      env:push("Test", { { id = "a", perform_in = now() }, { id = "b", perform_in = -5 },
                         { id = "c", perform_in = now() + 0.001 }, { id = "d", perform_in = 0 } })
      local res = env:fetch("Test")
      assert.are.same({ "b", "d", "a" }, env:ids(res.jobs))
      assert.are.equal(now() + 0.001, res.head)
    end)

    it("takes the lowest perform_in first, ties by id, up to the limit", function()
      env:push("Test", { { id = 3, perform_in = now() - 1 }, { id = 1, perform_in = now() - 1 },
                         { id = 2, perform_in = now() - 5 } })
      local first = env:fetch("Test", 0, { limit = 2 })
      assert.are.same({ "2", "1" }, env:ids(first.jobs))
      local second = env:fetch("Test", 0, { limit = 2, ack = first.batch })
      assert.are.equal(2, second.acked)
      assert.are.same({ "3" }, env:ids(second.jobs))
    end)
  end)

  describe("push merge (new + queued)", function()
    -- push.lua reads the call's queued members in one range when they are at
    -- most 64 more than its distinct ids, else looks each id up: both paths
    -- merge alike.
    it("merges into queued ids whether the call's id range holds few or many other jobs", function()
      local many = {}
      for i = 1, 90 do many[i] = { id = ("m%02d"):format(i), payload = "old", score = 1 } end
      env:push("Test", many)
      -- few in range: m05 and m06 (and one zero-byte id next to them)
      env:push("Test", { { id = "m05", payload = "new", score = 2 }, { id = "m06", payload = "old", score = 0 },
                         { id = "m05\0", payload = "z", score = 1 } })
      -- many in range: m01 .. m90 span all 90 jobs for 2 ids
      env:push("Test", { { id = "m01", payload = "new", score = 2 }, { id = "m90", payload = "x", score = 3 } })
      assert.are.same({ { "old", 1 }, { "new", 2 } }, env:queued("Test", "m05").payloads)
      assert.are.same({ { "old", 0 } }, env:queued("Test", "m06").payloads)
      assert.are.same({ { "z", 1 } }, env:queued("Test", "m05\0").payloads)
      assert.are.same({ { "old", 1 }, { "new", 2 } }, env:queued("Test", "m01").payloads)
      assert.are.same({ { "old", 1 }, { "x", 3 } }, env:queued("Test", "m90").payloads)
      assert.are.equal(91, env.conn:call("ZCARD", env:prefix("Test") .. "jobs"))
    end)

    it("keeps a single payload with the first, lower score", function()
      env:push("Test", { { id = 1, payload = "v1", score = 1 } })
      env:push("Test", { { id = 1, payload = "v1", score = 2 } })
      assert.are.same({ { "v1", 1 } }, env:queued("Test", 1).payloads)
    end)

    it("keeps the minimal score even when the lower score comes later (docs/redis.md, merge rules)", function()
      env:push("Test", { { id = 1, payload = "v1", score = 5 } })
      env:push("Test", { { id = 1, payload = "v1", score = 3 } })
      assert.are.same({ { "v1", 3 } }, env:queued("Test", 1).payloads)
    end)

    it("returns the payloads sorted by score, whatever the push order", function()
      env:push("Test", { { id = 1, payload = "v3", score = 3 } })
      env:push("Test", { { id = 1, payload = "v1", score = 1 } })
      env:push("Test", { { id = 1, payload = "v2", score = 2 } })
      assert.are.same({ { "v1", 1 }, { "v2", 2 }, { "v3", 3 } }, env:queued("Test", 1).payloads)
    end)

    it("keeps the queued perform_in over a later, larger one", function()
      env:push("Test", { { id = 1, perform_in = now() } })
      env:push("Test", { { id = 1, perform_in = now() + 10 } })
      assert.are.equal(now(), env:queued("Test", 1).perform_in)
    end)

    it("keeps the queued perform_in over a later, earlier one too", function()
      env:push("Test", { { id = 1, perform_in = now() + 10 } })
      env:push("Test", { { id = 1, perform_in = now() } })
      assert.are.equal(now() + 10, env:queued("Test", 1).perform_in)
    end)

    it("keeps the queued retry_count (0) over a later fresh push (-1)", function()
      env:push("Test", { { id = 1, retry_count = 0 } })
      env:push("Test", { { id = 1 } })
      assert.are.equal(0, env:queued("Test", 1).retry_count)
    end)

    it("merges README's example: {v1:1,v2:2} rc 0 + {v2:3,v3:4} gives {v1:1,v2:2,v3:4}", function()
      env:push("Test", { { id = 1, payload = "v1", score = 1, retry_count = 0, perform_in = now() + 5 },
                         { id = 1, payload = "v2", score = 2 } })
      env:push("Test", { { id = 1, payload = "v2", score = 3 }, { id = 1, payload = "v3", score = 4 } })
      local job = env:queued("Test", 1)
      assert.are.same({ { "v1", 1 }, { "v2", 2 }, { "v3", 4 } }, job.payloads)
      assert.are.equal(now() + 5, job.perform_in)
      assert.are.equal(0, job.retry_count)
    end)

    it("applies the first occurrence of an id within one push", function()
      env:push("Test", { { id = 1, payload = "a", perform_in = now() + 3, score = 7 },
                         { id = 1, payload = "b", perform_in = now() + 1, score = 6 } })
      local job = env:queued("Test", 1)
      assert.are.equal(now() + 3, job.perform_in)
      assert.are.same({ { "b", 6 }, { "a", 7 } }, job.payloads)
    end)

    it("treats equal JSON values as one payload (canonical dump, keys sorted)", function()
      env:push("Test", { { id = 1, payload = { b = 1, a = { 2, 3 } }, score = 2 } })
      env:push("Test", { { id = 1, payload = { a = { 2, 3 }, b = 1 }, score = 1 } })
      assert.are.same({ { { a = { 2, 3 }, b = 1 }, 1 } }, env:queued("Test", 1).payloads)
    end)
  end)

  describe("push_back merge (failed + queued, fail.lua)", function()
    -- Puts `inflight` jobs in flight on the Batch queue, then queues `queued`
    -- (pushed meanwhile), then fails every in-flight id with perform_in pin.
    local function fail_over(inflight, queued, pin, err)
      env:push("Batch", inflight)
      local res = env:fetch("Batch")
      env:push("Batch", queued)
      local pairs_ = {}
      for _, j in ipairs(res.jobs) do pairs_[#pairs_ + 1] = j.id pairs_[#pairs_ + 1] = pin or now() + 10 end
      local r = env:fail("Batch", 0, { batch = res.batch, error = err }, pairs_)
      assert.are.equal("OK", r[1])
      return res
    end

    it("keeps the minimal score of an equal payload, on either side", function()
      fail_over({ { id = 1, payload = "v1", score = 1 }, { id = 2, payload = "v1", score = 5 } },
                { { id = 1, payload = "v1", score = 5 }, { id = 2, payload = "v1", score = 1 } })
      assert.are.same({ { "v1", 1 } }, env:queued("Batch", 1).payloads)
      assert.are.same({ { "v1", 1 } }, env:queued("Batch", 2).payloads)
    end)

    it("returns the united payloads sorted by score", function()
      fail_over({ { id = 1, payload = "v2", score = 2 } },
                { { id = 1, payload = "v3", score = 3 }, { id = 1, payload = "v1", score = 1 } })
      assert.are.same({ { "v1", 1 }, { "v2", 2 }, { "v3", 3 } }, env:queued("Batch", 1).payloads)
    end)

    it("takes the failed job's perform_in over the queued one's", function()
      fail_over({ { id = 1 } }, { { id = 1, perform_in = now() } }, now() + 10)
      assert.are.equal(now() + 10, env:queued("Batch", 1).perform_in)
    end)

    it("takes the failed job's retry_count (stored + 1) over the queued one's", function()
      fail_over({ { id = 1, retry_count = 0 } }, { { id = 1 } })
      assert.are.equal(1, env:queued("Batch", 1).retry_count)
    end)

    it("stores the error through dump_error, and fetch returns it through load_error", function()
      fail_over({ { id = 1, payload = "v1" } }, {}, now() - 1, "boom: it broke")
      assert.are.equal(("boom: it broke"):reverse(), env.conn:call("HGET", env:prefix("Batch") .. "errors", "1"))
      local res = env:fetch("Batch")
      assert.are.equal("boom: it broke", res.jobs[1].error)
      assert.are.equal("boom: it broke", env:busy("Batch")[1].error)
    end)

    it("replaces a queued job's error with the failed job's, and clears it on a failure without error", function()
      fail_over({ { id = 1 } }, {}, now() - 1, "first")
      local res = env:fetch("Batch")
      env:push("Batch", { { id = 1, payload = "later" } })
      env:fail("Batch", 0, { batch = res.batch }, { "1", now() + 1 })
      local job = env:queued("Batch", 1)
      assert.is_nil(job.error)
      assert.are.equal(1, job.retry_count)
    end)
  end)

  describe("in-flight jobs", function()
    it("are listed by busy with their original perform_in, retry_count and payloads", function()
      env:push("Test", { { id = 1, payload = "v1", score = 1, perform_in = now() - 3, retry_count = 2 },
                         { id = 1, payload = "v2", score = 2 } })
      env:fetch("Test")
      assert.are.same({ { id = "1", perform_in = now() - 3, retry_count = 2, payloads = { { "v1", 1 }, { "v2", 2 } } } },
        env:busy("Test"))
      assert.are.same({}, env:list("Test"))
    end)

    it("are gone after the ack", function()
      env:push("Test", { { id = 1 } })
      local res = env:fetch("Test")
      local ack = env:fetch("Test", 0, { ack = res.batch, fetch = false })
      assert.are.equal(1, ack.acked)
      assert.are.same({}, env:busy("Test"))
      -- (layout 2: the busy records carry the payloads)
      assert.are.equal(0, env.conn:call("EXISTS", env:prefix("Test") .. "busy"))
    end)

    it("are delivered again, same batch id, by a fetch that does not ack them", function()
      env:push("Test", { { id = 1, payload = "x" } })
      local first = env:fetch("Test")
      env:push("Test", { { id = 2, perform_in = now() - 100 } })
      local again = env:fetch("Test")
      assert.are.equal(first.batch, again.batch)
      assert.are.same(first.jobs, again.jobs)
      assert.are.equal(1, #env:list("Test"))
    end)
  end)

  describe("morgue", function()
    it("stores the error of a job that reached max_retry_count, and lists it back", function()
      env:push("Test", { { id = 1, payload = "v1", score = 3, retry_count = 4 } })
      local res = env:fetch("Test")
      local r = env:fail("Test", 0, { batch = res.batch, error = "dead end" }, { "1", now() + 99 })
      assert.are.same({ "OK", "1", "1", "", "1", '"v1"', "3" }, r)
      local dead = env:dead("Test", 1)
      assert.are.same({ id = "1", updated_at = now(), error = "dead end", payloads = { { "v1", 3 } } }, dead)
      assert.are.equal(("dead end"):reverse(), env.conn:call("HGET", env:prefix("Test") .. "morgue:errors", "1"))
    end)

    it("morgue_delete removes a dead job", function()
      env:push("Test", { { id = 1, retry_count = 4 } })
      local res = env:fetch("Test")
      env:fail("Test", 0, { batch = res.batch, error = "x" }, { "1", now() })
      assert.are.same({ deleted = 1 }, admin.morgue_delete(env.conn, env.cfg, "Test", { "1" }))
      assert.is_nil(env:dead("Test", 1))
      assert.are.same({}, env.conn:call("KEYS", "*morgue*"))
    end)
  end)

  describe("delete", function()
    it("removes a queued job", function()
      env:push("Test", { { id = 1, payload = "x" }, { id = 2 } })
      assert.are.same({ deleted = 1 }, admin.delete_queued(env.conn, env.cfg, "Test", { 1 }))
      assert.are.same({ "2" }, env:ids(env:fetch("Test").jobs))
      assert.are.equal(0, env.conn:call("EXISTS", env:prefix("Test") .. "payloads:1"))
    end)

    it("leaves a job in flight alone and deletes only its queued twin", function()
      env:push("Test", { { id = 1, payload = "running" } })
      local res = env:fetch("Test")
      env:push("Test", { { id = 1, payload = "queued" } })
      assert.are.same({ deleted = 1 }, admin.delete_queued(env.conn, env.cfg, "Test", { "1" }))
      assert.are.same({}, env:list("Test"))
      assert.are.same({ { "running", now() } }, env:busy("Test")[1].payloads)
      assert.are.equal(1, env:fetch("Test", 0, { ack = res.batch, fetch = false }).acked)
    end)
  end)

  describe("serialization", function()
    it("round-trips a structured payload", function()
      local payload = { int = 1, str = "str", float = 1.5, time = now(), list = { 1, "two", { three = 3 } },
                        nested = { a = { b = true } }, text = 'é "quoted"\n\ttab' }
      env:push("Test", { { id = 1, payload = payload } })
      assert.are.same({ { payload } }, env:fetch("Test").jobs[1].payloads)
    end)

    it("accepts ids with any bytes (braces, newlines, range characters)", function()
      local ids = { "a\nb", "{x}", "-", "+", "[1", "ünï code", "1" }
      local jobs = {}
      for i, id in ipairs(ids) do jobs[i] = { id = id, payload = id } end
      env:push("Multi", jobs)
      for _, id in ipairs(ids) do
        assert.are.same({ { id, now() } }, env:queued("Multi", id).payloads, id)
      end
      local seen = {}
      for shard = 0, 4 do
        for _, j in ipairs(env:fetch("Multi", shard, { limit = 10 }).jobs) do seen[#seen + 1] = j.id end
      end
      table.sort(seen)
      table.sort(ids)
      assert.are.same(ids, seen)
    end)

    it("stores the default payload as the empty string", function()
      env:push("Test", { { id = 1 } })
      -- (layout 2: the payload is in the job's record, read by job.lua)
      local r = env.conn:script("job", env:prefix("Test"), "1")
      assert.are.same({ '""', tostring(now()) }, { r[8], r[9] })
    end)

    it("dumps a blank job's payload with a replaced dump_payload, which the default's short way skips", function()
      -- (the client writes '""' itself only while dump_payload is json.encode)
      local default, seen = env.cfg.dump_payload, {}
      env.cfg.dump_payload = function(v) seen[#seen + 1] = v return "<" .. tostring(v) .. ">" end
      local ok, err = pcall(env.push, env, "Test", { { id = 1 }, { id = 2, payload = "x" } })
      env.cfg.dump_payload = default
      assert(ok, err)
      assert.are.same({ "", "x" }, seen)
      local r = env.conn:script("job", env:prefix("Test"), "1")
      assert.are.equal("<>", r[8])
    end)
  end)

  -- luakiq.client.pusher: a push of jobs handed over one at a time
  -- (luakiq.ops.feed), in chunks; what happened comes back as data.
  describe("client.pusher", function()
    local chunk = client.PUSHER_CHUNK
    before_each(function() client.PUSHER_CHUNK = 3 end)
    after_each(function() client.PUSHER_CHUNK = chunk end)

    it("pushes chunk by chunk, one in flight, and returns how many were stored", function()
      local p = client.pusher(env.conn, env.cfg, "Multi")
      for i = 1, 7 do p:add({ id = "p" .. i, payload = i }, i * 10) end
      assert.are.equal(3, p.stored) -- (the first chunk landed when the second went; that one is in flight)
      assert.are.equal(7, p:close())
      assert.are.equal(7, env:stats("Multi").length)
    end)

    it("names the chunk that failed and counts what was stored, its kind of error kept", function()
      local p = client.pusher(env.conn, env.cfg, "Multi")
      for i = 1, 3 do p:add({ id = "q" .. i }, i * 10) end
      p:add({ id = "q4" }, 40)
      p:add({ id = "q5", score = "soon" }, 50)
      local ok, err = pcall(p.add, p, { id = "q6" }, 60)
      assert.is_false(ok)
      assert.are.same({ "input", "job 2 (id q5): score must be a finite number" }, { errors.describe(err) })
      assert.are.same({ from = 40, to = 60, stored = 0 }, p.failed)
      assert.are.equal(3, p.stored) -- the chunk before, landed before the refusal
      assert.are.equal(3, env:stats("Multi").length)
    end)
  end)
end)
