-- Tags (docs/redis.md, "Tags"): job field `tags`, kept per shard in P tags
-- and P tag:<T> while the id is queued, in flight or dead; pushes unite them;
-- a push of an id that is gone replaces them; admin.tagged lists a tag's
-- jobs across workers and shards and drops the entries of ids that are gone.
local S = require "queue.support"
local admin = require "luakiq.ops.admin"
local errors = require "luakiq.lib.errors"

describe("tags", function()
  local env = S.lifecycle()

  local function tags_of(worker, id) return admin.job(env.conn, env.cfg, worker, id).tags end
  -- admin.tagged as "worker/id/state" strings
  local function tagged(tag)
    local list, more = admin.tagged(env.conn, env.cfg, tag)
    local out = {}
    for i, r in ipairs(list) do out[i] = r.worker .. "/" .. r.id .. "/" .. r.state end
    return out, more, list
  end
  local function push_error(worker, jobs)
    local ok, err = pcall(env.push, env, worker, jobs)
    assert.is_false(ok)
    local kind, msg = errors.describe(err)
    assert.are.equal("input", kind, msg)
    assert.is_nil(msg:find("\n"), msg)
    return msg
  end

  it("an ack drops the tags of the jobs it finishes, not of an id queued again behind it", function()
    env:push("Test", { { id = "f", tags = { "t1" } }, { id = "g", tags = { "t1", "t2" } } })
    local P = env:prefix("Test")
    local r = env:fetch("Test", 0) -- Test: batch_size 1
    local first = r.jobs[1].id
    env:push("Test", { { id = first, tags = { "t3" } } }) -- queued again behind the one in flight
    env:fetch("Test", 0, { ack = r.batch, fetch = false })
    assert.are.equal(first == "f" and "t1\nt3" or "t1\nt2\nt3", env.conn:call("HGET", P .. "tags", first),
      "queued again: keeps its tags")
    -- drain: every ack finishes its job
    for _ = 1, 5 do
      r = env:fetch("Test", 0, { ack = r.batch })
      if #r.jobs == 0 then break end
    end
    assert.are.equal(0, env.conn:call("EXISTS", P .. "tags"), "finished: their tags are gone")
    for _, t in ipairs { "t1", "t2", "t3" } do assert.are.equal(0, env.conn:call("EXISTS", P .. "tag:" .. t)) end
  end)

  it("stores a job's tags sorted, without duplicates, and shows them in its record", function()
    env:push("Test", { { id = "a", payload = 1, tags = { "red", "blue", "red" } } })
    assert.are.same({ "blue", "red" }, tags_of("Test", "a"))
    assert.are.same("blue\nred", env.conn:call("HGET", env:prefix("Test") .. "tags", "a"))
    assert.are.same({ "a" }, env.conn:call("SMEMBERS", env:prefix("Test") .. "tag:red"))
    env:push("Test", { { id = "b", payload = 1 } })
    assert.is_nil(tags_of("Test", "b"))
  end)

  it("costs a shard without tags no key", function()
    env:push("Multi", { { id = 1, payload = 1 }, { id = 2, payload = 2 } })
    for s = 0, 4 do assert.are.equal(0, env.conn:call("EXISTS", env:prefix("Multi", s) .. "tags")) end
  end)

  it("unites the tags of a queued, in-flight or dead id with a push's", function()
    env:push("Test", { { id = "q", payload = 1, tags = { "a" } } })
    env:push("Test", { { id = "q", payload = 2, tags = { "b" } }, { id = "q", payload = 3, tags = { "c" } } })
    assert.are.same({ "a", "b", "c" }, tags_of("Test", "q"))
    env:push("Test", { { id = "q", payload = 4 } }) -- without tags: kept
    assert.are.same({ "a", "b", "c" }, tags_of("Test", "q"))
    -- in flight
    local res = env:fetch("Test")
    assert.are.equal(1, #res.jobs)
    env:push("Test", { { id = "q", payload = 5, tags = { "d" } } })
    assert.are.same({ "a", "b", "c", "d" }, tags_of("Test", "q"))
    -- dead
    env:kill("Batch", { { id = "k", payload = 1, tags = { "x" } } }, "boom")
    assert.are.equal("dead", admin.job(env.conn, env.cfg, "Batch", "k").state)
    env:push("Batch", { { id = "k", payload = 2, tags = { "y" } } })
    assert.are.same({ "x", "y" }, tags_of("Batch", "k"))
  end)

  it("replaces the tags of an id that is gone, and a push without tags drops them", function()
    env:push("Test", { { id = "g", payload = 1, tags = { "old" } } })
    local res = env:fetch("Test")
    env:fetch("Test", 0, { ack = res.batch, fetch = false }) -- acked: gone
    env:push("Test", { { id = "g", payload = 2, tags = { "new" } } })
    assert.are.same({ "new" }, tags_of("Test", "g"))
    assert.are.equal(0, env.conn:call("SISMEMBER", env:prefix("Test") .. "tag:old", "g"))
    -- deleted, then pushed again without tags: none
    admin.delete_queued(env.conn, env.cfg, "Test", { "g" })
    env:push("Test", { { id = "g", payload = 3 } })
    assert.is_nil(tags_of("Test", "g"))
    assert.are.same({}, (tagged("new")))
  end)

  it("lists a tag's jobs across workers and shards: queued, in flight and dead", function()
    -- Multi: ids 1..12 over 5 shards; 3 stays queued, 1 (shard 3) in flight, 2 (shard 2) dead
    env:kill("Multi", { { id = 2, payload = 2, tags = { "t" } } }, "boom")
    env:push("Multi", { { id = 1, payload = 1, tags = { "t" } }, { id = 3, payload = 3, tags = { "t", "u" } },
                        { id = 4, payload = 4, tags = { "u" } } })
    local res = env:fetch("Multi", 3)
    assert.are.same({ "1", "4" }, env:ids(res.jobs))
    env:push("Other", { { id = "o", payload = 1, tags = { "t" } } })
    local list, more, recs = tagged("t")
    assert.are.same({ "Multi/1/in_flight", "Multi/2/dead", "Multi/3/queued", "Other/o/queued" }, list)
    assert.is_false(more)
    assert.are.same({ "t", "u" }, recs[3].tags)
    assert.are.same({ { 3, env.now } }, recs[3].payloads)
    assert.are.equal("boom", recs[2].error)
    assert.are.same({ "Multi/3/queued", "Multi/4/in_flight" }, (tagged("u")))
    assert.are.same({}, (tagged("none")))
  end)

  it("drops the entries of ids that are gone when listing", function()
    env:push("Test", { { id = "x", payload = 1, tags = { "t", "v" } }, { id = "y", payload = 1, tags = { "t" } } })
    admin.delete_queued(env.conn, env.cfg, "Test", { "x" })
    assert.are.same({ "Test/y/queued" }, (tagged("t")))
    local P = env:prefix("Test")
    assert.are.same({ "y" }, env.conn:call("SMEMBERS", P .. "tag:t"))
    assert.are.equal(0, env.conn:call("EXISTS", P .. "tag:v"))
    assert.are.same({ "y", "t" }, env.conn:call("HGETALL", P .. "tags"))
    -- morgue_delete
    env:kill("Test", { { id = "z", payload = 1, tags = { "t" } } }, "boom")
    assert.are.same({ "Test/y/queued", "Test/z/dead" }, (tagged("t")))
    admin.morgue_delete(env.conn, env.cfg, "Test", { "z" })
    assert.are.same({ "Test/y/queued" }, (tagged("t")))
  end)

  it("lists at most limit jobs and says there are more", function()
    local jobs = {}
    for i = 1, 30 do jobs[i] = { id = i, payload = i, tags = { "many" } } end
    env:push("Multi", jobs)
    local list, more = admin.tagged(env.conn, env.cfg, "many", 10)
    assert.are.equal(10, #list)
    assert.is_true(more)
    list, more = admin.tagged(env.conn, env.cfg, "many")
    assert.are.equal(30, #list)
    assert.is_false(more)
  end)

  it("refuses bad tags with one line, enqueuing nothing", function()
    local long = string.rep("x", 65)
    local many = {}
    for i = 1, 17 do many[i] = "t" .. i end
    for _, c in ipairs {
      { "x", "tags must be a non-empty array of strings" },
      { {}, "tags must be a non-empty array of strings" },
      { { a = "b" }, "tags must be a non-empty array of strings" },
      { { "" }, "a tag must be a non-empty string" },
      { { 1 }, "a tag must be a non-empty string" },
      { { long }, "is over 64 bytes" },
      { { "a\nb" }, "has a control character" },
      { { "\255" }, "is not valid UTF-8" },
      { many, "at most 16 tags, got 17" },
    } do
      local msg = push_error("Test", { { id = "ok", payload = 1 }, { id = "bad", payload = 1, tags = c[1] } })
      assert.truthy(msg:find("job 2 (id bad): ", 1, true), msg)
      assert.truthy(msg:find(c[2], 1, true), msg)
    end
    assert.are.equal(0, env:stats("Test").length)
    local ok, err = pcall(admin.tagged, env.conn, env.cfg, "")
    assert.is_false(ok)
    assert.are.equal("input", (errors.describe(err)))
  end)

  it("push.lua refuses a bad tags section before any write", function()
    local P = env:prefix("Test")
    for _, v in ipairs { "", "a\n\nb", "a\n", string.rep("x", 65), "a\tb" } do
      local ok, err = pcall(env.conn.script, env.conn, "push", P, "", env.now, "1", env.now, -1, env.now, "p",
        "", "tags", "1", v)
      assert.is_false(ok)
      assert.truthy(tostring(err):find("tags must be", 1, true), tostring(err))
    end
    assert.are.equal(0, env.conn:call("EXISTS", P .. "queue"))
  end)
end)
