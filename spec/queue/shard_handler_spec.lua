-- Lowkiq's spec/shard_handler_spec.rb for luakiq: one worker thread's state
-- (luakiq.runner.setup / process / flush) against the real scripts, with
-- perform, retry_in and retries_exhausted replaced by recorders. Plus what
-- Lowkiq's suite lacks: batch_size > 1, a failed multi-job batch, pushes
-- during a batch, leases (refusal, restore exactly once, re-acquisition) and
-- stale batch ids. docs/redis.md (fail.lua): after the morgue at max_retry_count the rest
-- goes back with retry_count -1 and perform_in now.
local S = require "queue.support"
local runner = require "luakiq.runner"
local queue = require "luakiq.runner.queue"
local luakiq = require "luakiq"
local core = require "luakiq.core"

local function first_line(s) return (tostring(s):match("^[^\n]*")) end

describe("shard handler", function()
  local env = S.lifecycle()
  local function now() return env.now end

  -- A thread owning Test's shard 0 (or worker's), with recorders.
  local calls
  local function thread(worker, token)
    local t = env:thread(worker or "Test", token)
    local w = t.cfg.by_name[worker or "Test"]
    calls = { perform = {}, retry_in = {}, exhausted = {} }
    w.perform = function(batch) calls.perform[#calls.perform + 1] = batch end
    w.retry_in = function(c) calls.retry_in[#calls.retry_in + 1] = c return 10 end
    w.retries_exhausted = function(jobs) calls.exhausted[#calls.exhausted + 1] = jobs end
    return t, t.handlers[1], w
  end

  it("performs a batch: string ids, loaded payloads, then the ack empties everything", function()
    env:push("Test", { { id = 1, payload = "payload" } })
    local t, h = thread()
    local ok, head = runner.process(t, h)
    assert.is_true(ok)
    assert.is_nil(head)
    assert.are.same({ { ["1"] = { "payload" } } }, calls.perform)
    runner.flush(t)
    assert.are.same({}, env:list("Test"))
    assert.are.same({}, env:busy("Test"))
    assert.are.same({}, calls.retry_in)
  end)

  it("runs a thread's perform calls in one coroutine, never again in one whose call raised", function()
    -- (luakiq.runner.call's spare coroutine: made once, resumed with each call)
    env:push("Test", { { id = 1 }, { id = 2 }, { id = 3 }, { id = 4 } })
    local t, h, w = thread()
    local seen = {}
    w.perform = function(batch)
      local id = next(batch)
      seen[#seen + 1] = coroutine.running()
      if id == "2" then error("boom", 0) end
    end
    for _ = 1, 4 do runner.process(t, h) end
    assert.are.equal(4, #seen)
    assert.are.equal(seen[1], seen[2]) -- the first call's, reused
    assert.are_not.equal(seen[2], seen[3]) -- it raised: dead, a new one
    assert.are.equal(seen[3], seen[4])
    assert.are.equal("dead", coroutine.status(seen[2]))
    for _, co in ipairs(seen) do assert.are_not.equal(coroutine.running(), co) end
  end)

  it("retries a failed job: retry_count 0, perform_in now + retry_in(0), its error, every payload", function()
    env:push("Test", { { id = 1, payload = "v1", score = 0 }, { id = 1, payload = "v2", score = 1 } })
    local t, h, w = thread()
    w.perform = function() error("error", 0) end
    assert.is_false((runner.process(t, h)))
    assert.are.same({}, env:busy("Test"))
    local job = env:queued("Test", 1)
    assert.are.equal("error", first_line(job.error))
    job.error = nil
    assert.are.same({ id = "1", retry_count = 0, perform_in = now() + 10, payloads = { { "v1", 0 }, { "v2", 1 } } }, job)
    assert.are.same({ 0 }, calls.retry_in)
    assert.are.same({}, env:morgue("Test"))
    assert.are.same({}, calls.exhausted)
  end)

  it("stores the message only by default (format_error), the traceback when format_error asks", function()
    env:push("Test", { { id = 1 }, { id = 2, perform_in = now() + 1 } })
    local t, h, w = thread()
    w.perform = function() error("plain", 0) end
    runner.process(t, h)
    assert.are.equal("plain", env:queued("Test", 1).error)
    t.cfg.format_error = function(err, tb) return err .. "|" .. tostring(tb) end
    env.now = S.freeze(now() + 1)
    runner.process(t, h)
    local e = env:queued("Test", 2).error
    assert.truthy(e:find("^plain|plain\nstack traceback:"), e)
  end)

  it("sends the lowest payload to the morgue at max_retry_count; the rest go back with -1 and now", function()
    env:push("Test", { { id = 1, payload = "v1", score = 0, retry_count = 4 }, { id = 1, payload = "v2", score = 1 } })
    local t, h, w = thread()
    w.perform = function() error("error", 0) end
    assert.is_false((runner.process(t, h)))
    assert.are.same({ 5 }, calls.retry_in)
    local job = env:queued("Test", 1)
    assert.are.equal("error", first_line(job.error))
    job.error = nil
    assert.are.same({ id = "1", retry_count = -1, perform_in = now(), payloads = { { "v2", 1 } } }, job)
    local dead = env:dead("Test", 1)
    assert.are.equal("error", first_line(dead.error))
    dead.error = nil
    assert.are.same({ id = "1", updated_at = now(), payloads = { { "v1", 0 } } }, dead)
    assert.are.equal(1, #calls.exhausted)
    local ex = calls.exhausted[1]
    assert.are.equal("error", first_line(ex[1].error))
    ex[1].error = nil
    assert.are.same({ { id = "1", payloads = { { "v1", 0 } } } }, ex)
  end)

  it("leaves the batch in flight on luakiq.FATAL; a new holder restores it as it was", function()
    env:push("Test", { { id = 1, payload = "p", perform_in = now() - 2 } })
    local t, h, w = thread()
    w.perform = function() error(luakiq.FATAL, 0) end
    local ok, err = pcall(runner.process, t, h)
    assert.is_false(ok)
    assert.are.equal(luakiq.FATAL, err)
    assert.are.equal(1, #env:busy("Test"))
    env.conn:call("DEL", env:prefix("Test") .. "lease")  -- the holder died: its lease ran out
    local res = env:fetch("Test", 0, { token = "next-host", fetch = false })
    assert.are.equal(1, res.restored)
    assert.are.same({}, env:busy("Test"))
    assert.are.same({ id = "1", retry_count = -1, perform_in = now() - 2, payloads = { { "p", now() } } },
      env:queued("Test", 1))
  end)

  it("fetches batch_size jobs at once, lowest perform_in first, and acks them with the next fetch", function()
    local jobs = {}
    for i, id in ipairs { "e", "d", "c", "b", "a" } do jobs[i] = { id = id, perform_in = now() - i } end
    env:push("Batch", jobs)
    local t, h = thread("Batch")
    assert.is_true((runner.process(t, h)))
    assert.is_true((runner.process(t, h)))
    assert.are.same({ { a = { "" }, b = { "" }, c = { "" } }, { d = { "" }, e = { "" } } }, calls.perform)
    assert.are.equal(3, env:stats("Batch").processed)
    runner.flush(t)
    assert.are.equal(5, env:stats("Batch").processed)
  end)

  it("acks a shard's batch with its next fetch within poll_interval / 10, else with the thread's next call", function()
    -- (Other: two shards, one thread serving both; the specs' poll_interval is 0.1 s)
    local t = env:thread({ { worker = "Other", shard = 0 }, { worker = "Other", shard = 1 } })
    local a, b = t.handlers[1], t.handlers[2]
    local function push_both()
      local jobs, shards = {}, {}
      for i = 1, 8 do jobs[i] = { id = tostring(i) } end -- (fewer than a first fetch's 10)
      env:push("Other", jobs)
      for _, sh in ipairs({ 0, 1 }) do shards[sh + 1] = env.conn:call("ZCARD", env:prefix("Other", sh) .. "jobs") end
      assert.is_true(shards[1] > 0 and shards[2] > 0)
      return shards
    end
    local function counts()
      local s = env:stats("Other")
      return { s.processed, s.busy }
    end
    local n = push_both()
    t.cfg.poll_interval = 10 -- (a's ack waits for 1 s: a slow machine's fetch of b comes sooner)
    assert.is_true((runner.process(t, a)))
    assert.is_true((runner.process(t, b)))
    -- b's fetch came at once: a's batch is still in flight (nothing was
    -- sent alone for it), and b's fetch did not carry it
    assert.are.same({ 0, n[1] + n[2] }, counts())
    -- a's next fetch acks it in the same call
    assert.are.same({ false, nil }, { runner.process(t, a) })
    assert.are.same({ n[1], n[2] }, counts())
    runner.flush(t) -- (before sleeping: every pending ack)
    assert.are.same({ n[1] + n[2], 0 }, counts())
    -- a batch fetched more than poll_interval / 10 ago is acked by the
    -- thread's next call, whatever shard that fetches
    local m = push_both()
    t.cfg.poll_interval = 0.1
    assert.is_true((runner.process(t, a)))
    core.sleep(0.011)
    assert.is_true((runner.process(t, b)))
    assert.are.same({ n[1] + n[2] + m[1], m[2] }, counts())
  end)

  -- Ahead (batch_size 2, fetch_size 5): jobs a..e, due in that order, a first
  -- (with_payload: each id's payload is the id).
  local function push_a_to_e(with_payload)
    local jobs = {}
    for i, id in ipairs { "e", "d", "c", "b", "a" } do
      jobs[i] = { id = id, perform_in = now() - i, payload = with_payload and id or nil }
    end
    env:push("Ahead", jobs)
  end

  it("performs a fetch of fetch_size jobs batch_size ids per perform call, one ack for all", function()
    push_a_to_e()
    env:push("Ahead", { { id = "f", perform_in = now() + 1 } }) -- not due
    local t, h = thread("Ahead")
    assert.are.same({ true, now() + 1 }, { runner.process(t, h) })
    assert.are.same({ { a = { "" }, b = { "" } }, { c = { "" }, d = { "" } }, { e = { "" } } }, calls.perform)
    local s = env:stats("Ahead")
    assert.are.same({ 0, 5 }, { s.processed, s.busy })
    runner.flush(t)
    s = env:stats("Ahead")
    assert.are.same({ 5, 0, 1 }, { s.processed, s.busy, s.length })
  end)

  it("fails one perform call of a fetch: its ids retried, earlier ones acked, later ones back unchanged", function()
    push_a_to_e(true)
    local t, h, w = thread("Ahead")
    w.perform = function(batch)
      calls.perform[#calls.perform + 1] = batch
      if #calls.perform == 2 then error("second call fails", 0) end
    end
    assert.is_false((runner.process(t, h)))
    assert.are.equal(2, #calls.perform)
    local s = env:stats("Ahead")
    assert.are.same({ 2, 2, 0, 3 }, { s.processed, s.failed, s.busy, s.length })
    for _, id in ipairs { "c", "d" } do
      local j = env:queued("Ahead", id)
      assert.are.same({ 0, now() + 10, "second call fails" }, { j.retry_count, j.perform_in, first_line(j.error) })
    end
    local e = env:queued("Ahead", "e")
    assert.are.same({ -1, now() - 1, { { "e", now() } } }, { e.retry_count, e.perform_in, e.payloads })
    assert.is_nil(env:queued("Ahead", "a"))
    -- the rest runs next, in perform_in order
    w.perform = function(batch) calls.perform[#calls.perform + 1] = batch end
    assert.is_true((runner.process(t, h)))
    assert.are.same({ e = { "e" } }, calls.perform[3])
  end)

  -- (kills its connection by CLIENT ID: one server's view)
  local single = require("helpers.redis").on_cluster() and pending or it
  single("does not rerun the performed part of a fetch when its failure call never reached Redis", function()
    push_a_to_e()
    local t, h, w = thread("Ahead")
    local client = t.conn:call("CLIENT", "ID")
    w.perform = function(batch)
      calls.perform[#calls.perform + 1] = batch
      if #calls.perform == 2 then
        env.conn:call("CLIENT", "KILL", "ID", tostring(client)) -- the connection drops
        error("second call fails", 0)
      end
    end
    assert.is_false((pcall(runner.process, t, h)))
    assert.is_true(t.conn:broken())
    assert.is_true((t.conn:reconnect()))
    assert.are.equal(5, env:stats("Ahead").busy)
    w.perform = function(batch) calls.perform[#calls.perform + 1] = batch end
    assert.is_true((runner.process(t, h))) -- the same batch, delivered again
    assert.are.same({ { c = { "" }, d = { "" } }, { e = { "" } } }, { calls.perform[3], calls.perform[4] })
    assert.is_nil(calls.perform[5])
    runner.flush(t)
    local s = env:stats("Ahead")
    assert.are.same({ 5, 0, 0, 0 }, { s.processed, s.failed, s.busy, s.length })
  end)

  it("acks what ran and puts the rest back when a fetch has been held poll_interval", function()
    push_a_to_e()
    local t, h, w = thread("Ahead")
    local start = now()
    w.perform = function(batch)
      calls.perform[#calls.perform + 1] = batch
      env.now = S.freeze(start + 0.25) -- poll_interval (0.1 s in these specs) has passed
    end
    assert.are.same({ true, start - 3 }, { runner.process(t, h) })
    assert.are.same({ { a = { "" }, b = { "" } } }, calls.perform)
    local s = env:stats("Ahead")
    assert.are.same({ 2, 0, 0, 3 }, { s.processed, s.failed, s.busy, s.length })
    assert.are.same({ -1, start - 3 }, { env:queued("Ahead", "c").retry_count, env:queued("Ahead", "c").perform_in })
  end)

  it("fails a multi-job batch job by job: one retried, one at the limit to the morgue", function()
    env:push("Batch", { { id = 1, payload = "v1" },
                        { id = 2, payload = "p0", score = 0, retry_count = 2 }, { id = 2, payload = "p1", score = 1 } })
    local t, h, w = thread("Batch")
    w.retry_in = function(c) calls.retry_in[#calls.retry_in + 1] = c return 10 * (c + 1) end
    w.perform = function() error("batch broke", 0) end
    assert.is_false((runner.process(t, h)))
    table.sort(calls.retry_in)
    assert.are.same({ 0, 3 }, calls.retry_in)
    local j1, j2 = env:queued("Batch", 1), env:queued("Batch", 2)
    assert.are.same({ 0, now() + 10, { { "v1", now() } } }, { j1.retry_count, j1.perform_in, j1.payloads })
    assert.are.same({ -1, now(), { { "p1", 1 } } }, { j2.retry_count, j2.perform_in, j2.payloads })
    assert.are.same({ { "p0", 0 } }, env:dead("Batch", 2).payloads)
    assert.are.same({ "2" }, { calls.exhausted[1][1].id })
    assert.are.same({ 2, 0 }, { env:stats("Batch").failed, env:stats("Batch").busy })
  end)

  it("runs a push made during a successful batch after it, as a separate job", function()
    env:push("Test", { { id = 1, payload = "old" } })
    local t, h, w = thread()
    w.perform = function(batch)
      calls.perform[#calls.perform + 1] = batch
      if #calls.perform == 1 then luakiq.perform_async("Test", { { id = 1, payload = "new" } }) end
    end
    assert.is_true((runner.process(t, h)))
    assert.are.same({ { "new", now() } }, env:queued("Test", 1).payloads)
    assert.are.same({ { "old", now() } }, env:busy("Test")[1].payloads)
    assert.is_true((runner.process(t, h)))
    runner.flush(t)
    assert.are.same({ { ["1"] = { "old" } }, { ["1"] = { "new" } } }, calls.perform)
    assert.are.same({ 2, 0, 0 }, { env:stats("Test").processed, env:stats("Test").length, env:stats("Test").busy })
  end)

  it("merges a push made during a failed batch into the retry (failed + queued), which runs after", function()
    env:push("Test", { { id = 1, payload = "old", score = 1 } })
    local t, h, w = thread()
    w.perform = function(batch)
      calls.perform[#calls.perform + 1] = batch
      if #calls.perform == 1 then
        luakiq.perform_async("Test", { { id = 1, payload = "new", score = 2, perform_in = now() - 50 } })
        error("first run fails", 0)
      end
    end
    assert.is_false((runner.process(t, h)))
    local job = env:queued("Test", 1)
    assert.are.same({ 0, now() + 10, { { "old", 1 }, { "new", 2 } } }, { job.retry_count, job.perform_in, job.payloads })
    assert.is_false((runner.process(t, h)))  -- not due yet
    env.now = S.freeze(now() + 10)
    assert.is_true((runner.process(t, h)))
    assert.are.same({ ["1"] = { "old", "new" } }, calls.perform[2])
  end)

  it("refuses a shard whose lease another token holds: nothing fetched, nothing performed", function()
    env:push("Test", { { id = 1 } })
    local t1, h1 = thread()
    assert.is_true((runner.process(t1, h1)))
    env:push("Test", { { id = 2 } })
    local t2, h2 = thread("Test", "other-host")
    assert.are.same({ false, nil }, { runner.process(t2, h2) })
    assert.are.same({}, calls.perform)
    local r = env:fetch("Test", 0, { token = "other-host" })
    assert.is_true(r.lease)
    assert.is_true(r.pttl > 0 and r.pttl <= 30000)
    assert.are.same({ "2" }, env:ids(env:list("Test")))
  end)

  it("runs a dead holder's batch exactly once, and the old holder's late calls change nothing", function()
    env:push("Test", { { id = 1, payload = "x" } })
    local performed = 0
    local t1, h1, w1 = thread("Test", "host-1")
    w1.perform = function() error(luakiq.FATAL, 0) end
    pcall(runner.process, t1, h1)
    local stale = h1.batch
    env.conn:call("DEL", env:prefix("Test") .. "lease")
    local t2, h2, w2 = thread("Test", "host-2")
    w2.perform = function() performed = performed + 1 end
    assert.is_true((runner.process(t2, h2)))
    runner.flush(t2)
    -- host-1 wakes up: its failure is refused (host-2 holds the lease)...
    local late = queue.in_flight(t1.conn, h1.prefix, t1.token, t1.lease_ms, stale, h1.worker, h1.shard)
    assert.are.same({}, queue.fail(late, now(), 5, "late", { { id = "1", retry_count = -1 } }, { now() }))
    -- ...and once host-2 has released the shard, host-1 takes it over with nothing to restore.
    queue.release(t2.conn, t2.handlers, t2.token)
    w1.perform = function() performed = performed + 1 end
    local res = env:fetch("Test", 0, { token = "host-1" })
    assert.are.same({ 0, 0 }, { res.restored, #res.jobs })
    assert.are.equal(1, performed)
    local s = env:stats("Test")
    assert.are.same({ 1, 0, 0, 0 }, { s.processed, s.failed, s.length, s.busy })
  end)

  it("lets a holder whose lease expired unchallenged re-acquire and keep its batch", function()
    env:push("Test", { { id = 1 } })
    local first = env:fetch("Test")
    env.conn:call("DEL", env:prefix("Test") .. "lease")
    local again = env:fetch("Test")
    assert.are.same({ 0, first.batch, { "1" } }, { again.restored, again.batch, env:ids(again.jobs) })
    assert.are.equal(1, env:fetch("Test", 0, { ack = first.batch, fetch = false }).acked)
  end)

  it("ignores a re-sent ack or failure naming a stale batch id", function()
    env:push("Test", { { id = 1 }, { id = 2, perform_in = now() + 1 } })
    local b1 = env:fetch("Test")
    env:fetch("Test", 0, { ack = b1.batch, fetch = false })
    env.now = S.freeze(now() + 1)
    local b2 = env:fetch("Test")
    assert.are_not.equal(b1.batch, b2.batch)
    assert.are.equal(0, env:fetch("Test", 0, { ack = b1.batch, fetch = false }).acked)
    assert.are.same({ "OK", "0", "0", "" }, env:fail("Test", 0, { batch = b1.batch, error = "late" }, { "2", now() + 5 }))
    assert.are.same({ "2" }, env:ids(env:busy("Test")))
    local s = env:stats("Test")
    assert.are.same({ 1, 0, 1 }, { s.processed, s.failed, s.busy })
  end)

  it("hands an unloadable payload to retries_exhausted with its score (bury.lua reports it)", function()
    env.conn:script("push", env:prefix("Test"), "", now(), "x", now(), -1, 7, "{bad", "x", now(), -1, 8, '"ok"')
    local t, h = thread()
    assert.is_true((runner.process(t, h)))
    assert.are.same({ { x = { "ok" } } }, calls.perform)
    local dead = calls.exhausted[1]
    assert.are.equal(1, #dead)
    assert.truthy(dead[1].error:match("^load_payload failed"), dead[1].error)
    assert.are.same({ id = "x", payloads = { { "{bad", 7 } } }, { id = dead[1].id, payloads = dead[1].payloads })
  end)

  it("performs the loadable payloads of a fetch in order, around unloadable ones and jobs without one", function()
    local p = env:prefix("Test")
    env.conn:script("push", p, "", now(), "y", now() - 3, -1, 1, '"a"', "y", now() - 3, -1, 2, "{bad2", "y", now() - 3, -1,
      3, '"b"', "z", now() - 2, -1, 4, "{bad3")
    env.conn:script("push", p, "", now(), "w", now() - 1, -1, 5, '"c"')
    local t, h, w = thread()
    assert.is_true((runner.process(t, h)))
    assert.are.same({ { y = { "a", "b" } }, { w = { "c" } } }, calls.perform) -- (batch_size 1; z has none)
    local dead = {}
    for _, list in ipairs(calls.exhausted) do
      for _, d in ipairs(list) do dead[#dead + 1] = { d.id, d.payloads[1][1] } end
    end
    table.sort(dead, function(a, b) return a[1] < b[1] end)
    assert.are.same({ { "y", "{bad2" }, { "z", "{bad3" } }, dead)
    runner.flush(t)
    assert.are.equal(0, env:stats("Test").length)
    -- the call's delivery id counts the loadable payloads only: the same
    -- as for a push without the unloadable one
    local seen = {}
    w.perform = function(_, call) seen[#seen + 1] = call.delivery end
    for _, bad in ipairs({ false, true }) do
      local args = { "push", p, "", now(), "u", now() - 1, -1, 1, '"a"', "u", now() - 1, -1, 3, '"b"' }
      if bad then for _, v in ipairs({ "u", now() - 1, -1, 2, "{bad5" }) do args[#args + 1] = v end end
      env.conn:script(unpack(args))
      assert.is_true((runner.process(t, h)))
      runner.flush(t)
    end
    assert.are.equal(2, #seen)
    assert.are.equal(seen[1], seen[2])
    -- a failed call puts back its jobs' loadable payloads only
    env.conn:script("push", p, "", now(), "v", now() - 1, -1, 1, '"a"', "v", now() - 1, -1, 2, "{bad4", "v", now() - 1, -1,
      3, '"b"')
    w.perform = function() error("x", 0) end
    assert.is_false((runner.process(t, h)))
    assert.are.same({ { "a", 1 }, { "b", 3 } }, env:queued("Test", "v").payloads)
  end)

  it("falls back to the default formula when retry_in fails", function()
    env:push("Test", { { id = 1 } })
    local t, h, w = thread()
    w.retry_in = function() error("bad formula") end
    w.perform = function() error("x", 0) end
    runner.process(t, h)
    local pin = env:queued("Test", 1).perform_in
    assert.is_true(pin >= now() + 15 and pin <= now() + 44, tostring(pin - now()))
  end)
end)
