-- Finished jobs and stale payloads in fetch.lua (docs/redis.md, "Finished
-- jobs" and "Stale payloads"; lib/done.lua): the optional ARGV sections
-- "done" (keep_done: the ack keeps a record per job, with call:result's
-- JSON) and "mono" (monotonic: payloads not above their id's highest score
-- acked are dropped at fetch, counted as stale). A fetch without them
-- writes neither key.
local S = require "queue.support"
local admin = require "luakiq.ops.admin"
local queue = require "luakiq.runner.queue"

describe("fetch.lua's finished jobs", function()
  local env = S.lifecycle()

  local function keys_of(P)
    local out = {}
    for _, k in ipairs({ "done", "done:at", "mono", "mono:at" }) do
      if env.conn:call("EXISTS", P .. k) == 1 then out[#out + 1] = k end
    end
    return table.concat(out, ",")
  end
  local function job(id) return admin.job(env.conn, env.cfg, "Batch", id) end
  local function stale() return env:stats("Batch").stale end

  it("without the sections: no record, no key, the job is not found afterwards", function()
    env:push("Batch", { { id = "a", payload = "x" } })
    local r = env:fetch("Batch", 0)
    env:fetch("Batch", 0, { ack = r.batch, fetch = false })
    assert.are.equal("", keys_of(env:prefix("Batch")))
    local ok, err = pcall(job, "a")
    assert.is_false(ok)
    assert.matches("not found", tostring(err))
  end)

  it("keep_done: the ack keeps done, finished_at, attempts and the result sent with it", function()
    local now = S.freeze(1000.25)
    env:push("Batch", { { id = "a", payload = "x" }, { id = "b", payload = "y", retry_count = 1 } })
    local fin = { keep = 60, keep_max = 100 }
    local r = env:fetch("Batch", 0, { fin = fin })
    assert.are.equal(2, #r.jobs)
    fin.results = { "a", '{"rows":3}' }
    r = env:fetch("Batch", 0, { ack = r.batch, fin = fin })
    assert.are.equal(2, r.acked)
    local a, b = job("a"), job("b")
    assert.are.same({ id = "a", state = "done", finished_at = now, attempts = 1, result = { rows = 3 }, tags = a.tags },
      a)
    assert.are.equal("done", b.state)
    assert.are.equal(3, b.attempts) -- retry_count 1: its third perform
    assert.is_nil(b.result)
  end)

  it("keep_done: records leave keep_done seconds after, and beyond keep_done_max (the oldest first)", function()
    local fin = { keep = 10, keep_max = 3 }
    for i = 1, 5 do
      S.freeze(1000 + i)
      env:push("Batch", { { id = "j" .. i, payload = "x" } })
      local r = env:fetch("Batch", 0, { fin = fin })
      env:fetch("Batch", 0, { ack = r.batch, fetch = false, fin = fin })
    end
    local P = env:prefix("Batch")
    assert.are.same({ "j3", "j4", "j5" }, env.conn:call("ZRANGE", P .. "done:at", 0, -1))
    assert.are.equal(3, env.conn:call("HLEN", P .. "done"))
    -- 10 s after j4: j3 and j4 leave with the next ack
    S.freeze(1014.5)
    env:push("Batch", { { id = "j6", payload = "x" } })
    local r = env:fetch("Batch", 0, { fin = fin })
    env:fetch("Batch", 0, { ack = r.batch, fetch = false, fin = fin })
    assert.are.same({ "j5", "j6" }, env.conn:call("ZRANGE", P .. "done:at", 0, -1))
    assert.is_false(pcall(job, "j3"))
    assert.are.equal("done", job("j5").state)
  end)

  it("fail.lua's done ids are kept and remembered as the ack's are, the failed one is not", function()
    local now = S.freeze(1500.5)
    env:push("Batch", { { id = "a", payload = "x", score = 4 }, { id = "b", payload = "y", score = 5 } })
    local fin = { keep = 60, keep_max = 100, mono_ttl = 100 }
    local r = env:fetch("Batch", 0, { fin = fin })
    assert.are.equal(2, #r.jobs)
    fin.results = { "a", '"ok"' }
    local b = queue.in_flight(env.conn, env:prefix("Batch"), S.TOKEN, 30000, r.batch, "Batch", 0)
    b.fin = fin
    local bj = r.jobs[1].id == "b" and r.jobs[1] or r.jobs[2]
    queue.fail(b, now, 3, "boom", { bj }, { now + 10 }, { "a" })
    local a = job("a")
    assert.are.equal("done", a.state)
    assert.are.equal("ok", a.result)
    assert.are.equal(now, a.finished_at)
    assert.are.equal("queued", job("b").state)
    assert.are.equal("4", env.conn:call("HGET", env:prefix("Batch") .. "mono", "a"))
    assert.is_falsy(env.conn:call("HGET", env:prefix("Batch") .. "mono", "b"))
  end)

  it("a record lib/done.lua kept as cancelled answers cancelled", function()
    local P = env:prefix("Batch")
    env.conn:call("HSET", P .. "done", "c", '{"state":"cancelled","finished_at":5,"attempts":0}')
    local c = job("c")
    assert.are.equal("cancelled", c.state)
    assert.are.equal(5, c.finished_at)
  end)

  it("monotonic: a payload not above the highest score acked is dropped and counted, a higher one runs", function()
    local fin = { mono_ttl = 100 }
    S.freeze(2000)
    env:push("Batch", { { id = "o", payload = "s8", score = 8 } })
    local r = env:fetch("Batch", 0, { fin = fin })
    assert.are.equal("s8", r.jobs[1].payloads[1][1])
    r = env:fetch("Batch", 0, { ack = r.batch, fin = fin })
    assert.are.equal(0, #r.jobs)
    local P = env:prefix("Batch")
    assert.are.equal("8", env.conn:call("HGET", P .. "mono", "o"))
    -- a late snapshot (7), an equal one on another id's batch-mate, then 9
    env:push("Batch", { { id = "o", payload = "s7", score = 7 }, { id = "n", payload = "n1", score = 1 } })
    r = env:fetch("Batch", 0, { fin = fin })
    assert.are.equal(1, #r.jobs)
    assert.are.equal("n", r.jobs[1].id)
    assert.are.equal(1, stale())
    assert.is_false(pcall(job, "o")) -- its record left with its only payload
    r = env:fetch("Batch", 0, { ack = r.batch, fin = fin })
    env:push("Batch", { { id = "o", payload = "s6", score = 6 }, { id = "o", payload = "s9", score = 9 } })
    r = env:fetch("Batch", 0, { fin = fin })
    assert.are.equal(1, #r.jobs)
    assert.are.same({ { "s9" } }, r.jobs[1].payloads)
    assert.are.equal(2, stale())
    env:fetch("Batch", 0, { ack = r.batch, fetch = false, fin = fin })
    assert.are.equal("9", env.conn:call("HGET", P .. "mono", "o"))
  end)

  it("monotonic: without the section a lower score runs; the scores leave after mono ttl", function()
    local fin = { mono_ttl = 100 }
    S.freeze(3000)
    env:push("Batch", { { id = "o", payload = "s8", score = 8 } })
    local r = env:fetch("Batch", 0, { fin = fin })
    env:fetch("Batch", 0, { ack = r.batch, fetch = false, fin = fin })
    env:push("Batch", { { id = "o", payload = "s7", score = 7 } })
    r = env:fetch("Batch", 0)
    assert.are.equal("s7", r.jobs[1].payloads[1][1])
    env:fetch("Batch", 0, { ack = r.batch, fetch = false })
    -- 100 s after o's ack, the next ack of the worker forgets it
    S.freeze(3100.5)
    env:push("Batch", { { id = "p", payload = "x", score = 1 } })
    r = env:fetch("Batch", 0, { fin = fin })
    env:fetch("Batch", 0, { ack = r.batch, fetch = false, fin = fin })
    local P = env:prefix("Batch")
    assert.is_falsy(env.conn:call("HGET", P .. "mono", "o"))
    assert.are.same({ "p" }, env.conn:call("ZRANGE", P .. "mono:at", 0, -1))
    assert.are.equal(0, stale())
  end)

  it("passes over words that name no section; checks the sections' numbers", function()
    local P = env:prefix("Batch")
    env:push("Batch", { { id = "w", payload = "x" } })
    local r = env.conn:pipeline({ { script = "fetch", P, S.TOKEN, 30000, 1, 1, "", "1", "0", "what" } })[1]
    assert.are.equal("OK", r[1])
    r = env.conn:pipeline({ { script = "fetch", P, S.TOKEN, 30000, 1, 1, "", "1", "0", "done", "x", "10" } })[1]
    assert.matches("BADARG luakiq fetch: keep_done must be a finite number", tostring(r.err))
  end)
end)
