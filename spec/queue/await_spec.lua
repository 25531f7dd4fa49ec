-- Jobs that wait for a reply, the Redis side (docs/redis.md, "Waits";
-- lib/waits.lua): await.lua, reply.lua, waitkey.lua, waiting.lua and what
-- fetch.lua, fail.lua, push.lua, job.lua, stats.lua and the reshard scripts
-- do with waits, called through a real connection against a real
-- redis-server, as the host will call them.
local S = require "queue.support"
local queue = require "luakiq.runner.queue"

local SECRET = string.rep("5a", 32)

describe("waits", function()
  local env = S.lifecycle()
  local function now() return env.now end
  local P

  before_each(function() P = env:prefix("Test") end)

  -- The code word of a script's error reply (nil when it succeeded) and
  -- the reply or the error's text.
  local function call(name, key, ...)
    local ok, r = pcall(env.conn.script, env.conn, name, key, ...)
    if ok then return nil, r end
    local text = tostring(r):gsub("^redis: ", "")
    return text:match("^(%u+) ") or "ERR", text
  end
  local function push(id, payload, at)
    env:push("Test", { { id = id, payload = payload, perform_in = at } })
  end
  -- fetch.lua as the host calls it (members form); the jobs decoded by the
  -- host's parser, the "waits" section read here: waits[job number] =
  -- {kind, attempt, value}.
  local function fetch(o)
    o = o or {}
    local cmd = queue.fetch_cmd(P, o.token or S.TOKEN, o.lease_ms or 30000, o.fetch == false and 0 or o.limit or 10,
      o.ack, o.at_most_once, o.now or now())
    local r = env.conn:pipeline({ cmd })[1]
    if r[1] == "LEASE" then return { lease = true } end
    local res = queue.parse_fetch(r, { prefix = P, worker = "Test", shard = 0 })
    res.batch, res.restored, res.acked = r[2], tonumber(r[4]), tonumber(r[5])
    res.ids, res.waits = {}, require("helpers.waits").section(r)
    for i, j in ipairs(res.jobs) do res.ids[i] = j.id end
    return res
  end
  local function await(batch, id, o)
    o = o or {}
    local code, r = call("await", P, o.token or S.TOKEN, 30000, o.now or now(), batch, id, o.timeout or 60,
      o.heartbeat or "", o.key or "", o.rule or "", SECRET)
    if code then return nil, code, r end
    return { token = r[1], attempt = tonumber(r[2]), deadline = tonumber(r[3]) }
  end
  local function reply(how, refs, body, o)
    o = o or {}
    local args = { P, o.op or "reply", o.now or now(), "", "", how }
    for _, v in ipairs(refs) do args[#args + 1] = v end
    if body then args[#args + 1] = body end
    local code, r = call("reply", unpack(args))
    return code or r, r
  end
  local function by_token(token, body, o) return reply("token", { token }, body, o) end
  local function job(id) return env.conn:script("job", P, id) end
  -- Pushes id, fetches it and awaits it: {batch, token, attempt, ...}.
  local function waiting(id, o)
    push(id, (o and o.payload) or "p1")
    local f = fetch()
    assert.are.same({ id }, f.ids)
    local w = assert(await(f.batch, id, o))
    w.batch = f.batch
    return w
  end

  it("keeps a reply that comes before the ack, and hands it back as a call of its own", function()
    local w = waiting("a")
    assert.are.equal("accepted", by_token(w.token, '{"ok":1}'))
    assert.are.equal("duplicate", by_token(w.token, '{"ok":1}'))
    -- the ack makes the job wait, its reply is due at once: the same fetch
    -- hands it back (the job is not counted as processed)
    local f = fetch { ack = w.batch }
    assert.are.equal(0, f.acked)
    assert.are.same({ "a" }, f.ids)
    assert.are.same({ kind = "reply", attempt = w.attempt, value = '{"ok":1}' }, f.waits[1])
    assert.are.same({ { '"p1"' } }, f.jobs[1].payloads)
    -- the reply call acked: done, the wait is over
    local g = fetch { ack = f.batch }
    assert.are.equal(1, g.acked)
    assert.are.same({}, g.ids)
    assert.are.same({ "" }, job("a"))
    assert.are.equal("STALE", by_token(w.token, '{"ok":1}'))
  end)

  it("gives a re-run of the same attempt (its holder killed before the ack) the same token", function()
    local w = waiting("a")
    assert.are.equal("accepted", by_token(w.token, '{"n":1}'))
    -- another host takes the shard over: the job is restored and runs again
    env.conn:call("DEL", P .. "lease")
    local f = fetch { token = "other" }
    assert.are.equal(1, f.restored)
    assert.are.same({ "a" }, f.ids)
    local again = assert(await(f.batch, "a", { token = "other" }))
    assert.are.equal(w.token, again.token)
    assert.are.equal(w.attempt, again.attempt)
    -- and the reply that came meanwhile is still its
    local g = fetch { token = "other", ack = f.batch }
    assert.are.same({ kind = "reply", attempt = w.attempt, value = '{"n":1}' }, g.waits[1])
  end)

  it("answers accepted, duplicate, CONFLICT, STALE (older attempt, timed out) and UNKNOWN (forged)", function()
    local w = waiting("a")
    fetch { ack = w.batch } -- now waiting
    assert.are.equal("waiting", job("a")[1])
    local bad = w.token:sub(1, -2) .. (w.token:sub(-1) == "0" and "1" or "0")
    assert.are.equal("UNKNOWN", by_token(bad, "{}"))
    assert.are.equal("UNKNOWN", by_token("junk", "{}"))
    assert.are.equal("UNKNOWN", reply("id", { "a", tostring(w.attempt + 5) }, "{}"))
    assert.are.equal("BADJSON", by_token(w.token, "{nope"))
    assert.are.equal("TOOBIG", by_token(w.token, '"' .. string.rep("x", 262144) .. '"'))
    assert.are.equal("accepted", reply("id", { "a", tostring(w.attempt) }, '{"v":1}'))
    assert.are.equal("duplicate", by_token(w.token, '{"v":1}'))
    assert.are.equal("CONFLICT", by_token(w.token, '{"v":2}'))
    -- on_reply awaits again: a new attempt, the old token is stale
    local f = fetch()
    assert.are.equal("reply", f.waits[1].kind)
    local w2 = assert(await(f.batch, "a"))
    assert.are.equal(w.attempt + 1, w2.attempt)
    assert.are_not.equal(w.token, w2.token)
    fetch { ack = f.batch }
    assert.are.equal("STALE", by_token(w.token, '{"v":1}'))
    -- timed out: the fetch after the deadline takes it as a timeout call
    local t = fetch { now = now() + 61 }
    assert.are.same({ kind = "timeout", attempt = w2.attempt, value = "60" }, t.waits[1])
    assert.are.equal("STALE", by_token(w2.token, '{"late":1}'))
    local st = env.conn:script("stats", P)
    -- waiting, accepted, duplicate, conflict, stale, unknown
    assert.are.same({ "1", "1", "1", "1", "2", "3" }, { unpack(st, 9, 14) })
    local late = env.conn:script("waiting", P, "late", 10)
    assert.are.equal("2", late[1])
    assert.are.same({ "a", tostring(w2.attempt), "reply", '{"late":1}' }, { unpack(late, 3, 6) })
  end)

  it("keeps payloads pushed for a waiting id queued behind it until its reply was handled", function()
    local w = waiting("a")
    push("a", "p2") -- while its call runs: held, not fetched next
    fetch { ack = w.batch }
    push("a", "p3")
    push("b", "pb")
    local f = fetch()
    assert.are.same({ "b" }, f.ids) -- the other ids of the shard go on
    local j = job("a")
    assert.are.equal("waiting", j[1])
    -- its job (1 payload), then the held ones (2)
    assert.are.same({ "1", '"p1"' }, { j[12], j[13] })
    assert.are.same({ "2", '"p2"' }, { j[15], j[16] })
    assert.are.equal('"p3"', j[18])
    assert.are.equal("accepted", by_token(w.token, '{"status":"succeeded"}'))
    local g = fetch { ack = f.batch }
    assert.are.same({ "a" }, g.ids)
    assert.are.same({ { '"p1"' } }, g.jobs[1].payloads) -- the reply call: its own job only
    assert.are.equal("reply", g.waits[1].kind)
    -- handled: the held job joins the queue, after it
    local h = fetch { ack = g.batch }
    assert.are.same({ "a" }, h.ids)
    assert.are.same({ { '"p2"' }, { '"p3"' } }, h.jobs[1].payloads)
    assert.are.same({}, h.waits)
  end)

  it("moves a job pushed while the call ran before await behind the wait", function()
    push("a", "p1")
    local f = fetch()
    push("a", "p2") -- queued behind the batch, fetchable after it
    local w = assert(await(f.batch, "a"))
    local g = fetch { ack = f.batch }
    assert.are.same({}, g.ids)
    assert.are.equal("accepted", by_token(w.token, "{}"))
    local h = fetch { ack = g.batch }
    assert.are.same({ "a" }, h.ids)
    assert.are.same({ { '"p1"' } }, h.jobs[1].payloads)
    assert.are.same({ { '"p2"' } }, fetch({ ack = h.batch }).jobs[1].payloads)
  end)

  it("costs the fetch of the other ids nothing: 1,000 waiting ids, the others fetched in order", function()
    local ids = {}
    for i = 1, 1000 do ids[i] = { id = string.format("w%04d", i), payload = "x" } end
    env:push("Test", ids)
    local f = fetch { limit = 1000 }
    for i = 1, 1000 do assert(await(f.batch, ids[i].id)) end
    for i = 1, 50 do push(string.format("o%02d", i), "y") end
    local g = fetch { ack = f.batch, limit = 20 }
    assert.are.equal(20, #g.ids)
    assert.are.equal("o01", g.ids[1])
    assert.are.same({}, g.waits)
    assert.are.equal("1000", env.conn:script("stats", P)[9])
    local listed, cursor = 0, "0"
    repeat
      local r = env.conn:script("waiting", P, "list", cursor, 1000)
      cursor, listed = r[1], listed + (#r - 1) / 7
    until cursor == "0"
    assert.are.equal(1000, listed)
  end)

  it("returns lapsed deadlines from the fetch: timeout and heartbeat, then the retry path", function()
    local w = waiting("a", { timeout = 30, heartbeat = 5 })
    local f = fetch { ack = w.batch }
    assert.are.same({}, f.ids)
    assert.are.equal(tostring(now() + 5), f.head and tostring(f.head)) -- the heartbeat deadline is the head
    assert.are.equal("ok", by_token(w.token, nil, { op = "heartbeat", now = now() + 4 }))
    assert.are.same({}, fetch({ now = now() + 6 }).ids)
    local g = fetch { now = now() + 10 }
    assert.are.same({ kind = "heartbeat", attempt = w.attempt, value = "5" }, g.waits[1])
    -- the host fails it: the retry path, the job back in the queue; the wait is over
    local r = env:fail("Test", 0, { batch = g.batch, error = "heartbeat timeout after 5 s", now = now() + 10 },
      { "a", now() + 20 })
    assert.are.equal("1", r[2])
    local q = env:queued("Test", "a")
    assert.are.equal(0, q.retry_count)
    assert.are.equal(now() + 20, q.perform_in)
    assert.are.equal("STALE", by_token(w.token, "{}"))
    assert.are.equal("0", env.conn:script("stats", P)[9])
  end)

  it("runs on_reply's failure through the retry path, with the payloads held behind it", function()
    local w = waiting("a")
    fetch { ack = w.batch }
    push("a", "p2")
    by_token(w.token, "{}")
    local f = fetch()
    assert.are.equal("reply", f.waits[1].kind)
    env:fail("Test", 0, { batch = f.batch, error = "on_reply failed" }, { "a", now() + 1 })
    local q = env:queued("Test", "a")
    assert.are.same({ "p1", "p2" }, { q.payloads[1][1], q.payloads[2][1] }) -- (loaded by admin.list)
    assert.are.equal(0, q.retry_count)
    assert.are.equal("STALE", by_token(w.token, "{}"))
  end)

  it("drops the pending wait of a call that failed after await", function()
    push("a", "p1")
    local f = fetch()
    local w = assert(await(f.batch, "a"))
    push("a", "p2")
    env:fail("Test", 0, { batch = f.batch, error = "boom" }, { "a", now() + 1 })
    local q = env:queued("Test", "a")
    assert.are.equal(2, #q.payloads)
    assert.are.equal("STALE", by_token(w.token, "{}"))
    assert.are.equal(0, env.conn:call("HLEN", P .. "waits:new"))
  end)

  it("keeps waits across a lease takeover, and delivers a reply call of a dead holder again", function()
    local w = waiting("a")
    fetch { ack = w.batch }
    env.conn:call("DEL", P .. "lease")
    local f = fetch { token = "B" } -- a new holder: nothing in flight to restore
    assert.are.equal(0, f.restored)
    assert.are.equal("waiting", job("a")[1])
    assert.are.equal("accepted", by_token(w.token, '{"r":1}'))
    local g = fetch { token = "B", ack = f.batch }
    assert.are.equal("reply", g.waits[1].kind)
    -- B dies while on_reply runs: C gets the same reply again
    env.conn:call("DEL", P .. "lease")
    local h = fetch { token = "C" }
    assert.are.same({ "a" }, h.ids)
    assert.are.same({ kind = "reply", attempt = w.attempt, value = '{"r":1}' }, h.waits[1])
    fetch { token = "C", ack = h.batch }
    assert.are.same({ "" }, job("a"))
  end)

  it("keeps a timed-out wait over when its timeout call's holder dies: a reply is STALE, the timeout is taken again", function()
    local w = waiting("a")
    fetch { ack = w.batch }
    local t = fetch { now = now() + 61 }
    assert.are.same({ kind = "timeout", attempt = w.attempt, value = "60" }, t.waits[1])
    assert.are.equal("STALE", by_token(w.token, '{"v":1}', { now = now() + 61 }))
    -- the holder dies before its failure of the timeout is recorded: the
    -- next holder's restore must not make the wait accept a reply again
    -- (the soak found 410 STALE, then the same token accepted and on_reply run)
    env.conn:call("DEL", P .. "lease")
    local g = fetch { token = "B", now = now() + 62 }
    assert.are.same({ kind = "timeout", attempt = w.attempt, value = "60" }, g.waits[1])
    env.conn:call("DEL", P .. "lease")
    fetch { token = "C", now = now() + 63, fetch = false } -- (the restore)
    assert.are.equal("STALE", by_token(w.token, '{"v":1}', { now = now() + 63 }))
    assert.are.equal("STALE", reply("token", { w.token }, nil, { op = "heartbeat", now = now() + 63 }))
    local i = fetch { token = "C", now = now() + 64 }
    assert.are.same({ kind = "timeout", attempt = w.attempt, value = "60" }, i.waits[1])
  end)

  it("refuses an await of an id that is not in the batch in flight, or by another holder", function()
    push("a", "p1")
    local f = fetch()
    local _, code = await(f.batch, "zz")
    assert.are.equal("NOTINFLIGHT", code)
    _, code = await("999", "a")
    assert.are.equal("NOTINFLIGHT", code)
    _, code = await(f.batch, "a", { token = "intruder" })
    assert.are.equal("FENCED", code)
    _, code = await(f.batch, "a", { timeout = 0 })
    assert.are.equal("ERR", code)
  end)

  it("applies rickover's body rule at reply time to a worker without on_reply", function()
    local w = waiting("a", { rule = "status" })
    assert.are.equal("BADREPLY", by_token(w.token, '{"ok":true}'))
    assert.are.equal("accepted", by_token(w.token, '{"status":"failed","retryable":false}'))
  end)

  it("replies by correlation key: a lookup in the queue's slot, then the shard re-checks key and attempt", function()
    local Q = "luakiq:{Test}:"
    local w = waiting("a", { key = "corr-1" })
    assert.are.equal("OK", env.conn:script("waitkey", Q, "claim", "corr-1", w.attempt, "a", w.deadline, now()))
    local code, text = call("waitkey", Q, "claim", "corr-1", 99, "other", now() + 60, now())
    assert.are.equal("TAKEN", code)
    assert.truthy(text:find("TAKEN " .. w.attempt .. " a", 1, true), text)
    local found = env.conn:script("waitkey", Q, "lookup", "corr-1")
    assert.are.same({ "a", tostring(w.attempt) }, found)
    assert.are.equal("STALE", reply("key", { "wrong-key", "a", found[2] }, "{}"))
    assert.are.equal("accepted", reply("key", { "corr-1", found[1], found[2] }, '{"k":1}'))
    assert.are.equal(1, env.conn:script("waitkey", Q, "drop", "corr-1", found[2], "a"))
    assert.are.equal("UNKNOWN", (call("waitkey", Q, "lookup", "corr-1")))
    -- a lapsed entry is free again, and sweep drops it
    env.conn:script("waitkey", Q, "claim", "k2", 7, "x", now() - 1, now() - 2)
    assert.are.equal("OK", env.conn:script("waitkey", Q, "claim", "k2", 8, "y", now() + 5, now()))
    env.conn:script("waitkey", Q, "claim", "k3", 9, "z", now() - 1, now() - 2)
    assert.are.same({ "0", "1" }, env.conn:script("waitkey", Q, "sweep", "0", 100, now()))
    -- the secret is set once
    assert.are.equal(SECRET, env.conn:script("waitkey", Q, "secret", SECRET))
    assert.are.equal(SECRET, env.conn:script("waitkey", Q, "secret", string.rep("0", 64)))
  end)

  it("moves a waiting id with luakiq reshard: its wait, held job and token", function()
    local w = waiting("a")
    fetch { ack = w.batch }
    push("a", "p2")
    local T = "reshard-token"
    local P2 = env:prefix("Test", 3) -- (its new shard under another count)
    env.conn:call("DEL", P .. "lease") -- (its holder gave it back)
    for _, p in ipairs({ P, P2 }) do
      env.conn:script("reshard_shard", p, "freeze", T, 5, "")
      env.conn:script("fetch", p, T, 30000, now(), 0, "", "0", "0", "members")
    end
    local staged = env.conn:script("reshard_out", P, T, "a")
    assert.are.equal("a", staged[1])
    assert.are.same({ "" }, job("a"))
    assert.are.equal(1, env.conn:script("reshard_in", P2, T, "a", staged[2]))
    env.conn:script("reshard_shard", P2, "thaw", T, "", "0")
    local j = env.conn:script("job", P2, "a")
    assert.are.equal("waiting", j[1])
    assert.are.equal(tostring(w.attempt), j[2])
    assert.are.equal('"p2"', j[16])
    assert.are.equal(tostring(w.attempt), env.conn:call("GET", P2 .. "waits:seq"))
    -- the token still verifies there (the queue's secret moved with it)
    local code = call("reply", P2, "reply", now(), "", "", "token", w.token, "{}")
    assert.is_nil(code)
  end)

  it("shares the fetch's limit: replies take at most half of it while jobs are due", function()
    local w = waiting("a")
    fetch { ack = w.batch }
    for i = 1, 5 do push("o" .. i, "y") end
    by_token(w.token, "{}")
    local f = fetch { limit = 2 }
    assert.are.same({ "o1", "a" }, f.ids)
    assert.are.equal("reply", f.waits[2].kind)
    assert.are.same({}, fetch({ ack = f.batch, limit = 2 }).waits)
  end)

  it("holds a scheduled tick and a requeued dead job of a waiting id, keeps its tags, and heads sees the reply", function()
    env:push("Test", { { id = "a", payload = "p1", tags = { "t1" } } })
    local f = fetch()
    local w = assert(await(f.batch, "a"))
    fetch { ack = f.batch }
    assert.are.equal("t1", env.conn:call("HGET", P .. "tags", "a")) -- (the ack keeps a waiting id's tags)
    assert.are.equal(1, env.conn:script("schedule", P, "every-minute", now(), now(), "", "a", '"tick"'))
    -- a dead job of the id, requeued by an operator
    env.conn:call("EVAL", "redis.call('ZADD', KEYS[1] .. 'morgue:jobs', 0, 'a\\0\\0' .. cmsgpack.pack('\"dead\"', 5)) " ..
      "redis.call('ZADD', KEYS[1] .. 'morgue', 5, 'a')", 1, P)
    assert.are.same({ "1", "0" }, env.conn:script("morgue_requeue", P, "", now(), 10, "a"))
    local j = job("a")
    assert.are.equal("waiting", j[1])
    assert.are.same({ "2", '"dead"', "5", '"tick"' }, { unpack(j, 15, 18) })
    -- the shard's head is the wait's deadline; then the reply, due at once
    assert.are.same({ tostring(w.deadline), "0" }, env.conn:script("heads", P))
    assert.are.equal("accepted", by_token(w.token, "{}"))
    assert.are.same({ tostring(now()), "0" }, env.conn:script("heads", P))
  end)

  it("moves a dead holder's reply call to the morgue for an at-most-once worker, and ends the wait", function()
    local w = waiting("a")
    fetch { ack = w.batch }
    push("a", "p2")
    by_token(w.token, "{}")
    fetch()
    env.conn:call("DEL", P .. "lease")
    local f = fetch { token = "B", at_most_once = true }
    -- the reply call's job to the morgue (interrupted), its held job released
    assert.are.equal("interrupted", env.conn:call("HGET", P .. "morgue:errors", "a"))
    assert.are.same({ "a" }, f.ids)
    assert.are.same({}, f.waits)
    assert.are.equal("STALE", by_token(w.token, "{}"))
  end)

  -- An operator's delete and kill (delete.lua, kill.lua: `luakiq admin ...
  -- delete|kill ID`, the API's queue/delete and queue/kill) end the wait and
  -- take the payloads held behind it; a wait whose on_reply call runs is in
  -- flight, and stays.
  it("deletes a waiting job and its held payloads: the wait ends, its token is STALE", function()
    local w = waiting("a")
    fetch { ack = w.batch }
    push("a", "p2") -- held behind the wait
    local v = waiting("v")
    fetch { ack = v.batch }
    assert.are.equal(2, env.conn:script("delete", P, "a", "nope"))
    assert.are.equal("STALE", by_token(w.token, "{}"))
    assert.are.equal(0, env.conn:call("HEXISTS", P .. "waits", "a"))
    assert.are.equal(0, env.conn:call("ZCARD", P .. "held"))
    assert.are.equal("1", env.conn:script("stats", P)[9]) -- v waits on
    push("a", "p3") -- a new job of the id is queued, not held
    local f = fetch()
    assert.are.same({ "a" }, f.ids)
    assert.are.same({ { '"p3"' } }, f.jobs[1].payloads)
    -- a reply call running: in flight, not deleted
    assert.are.equal("accepted", by_token(v.token, "{}"))
    local g = fetch { ack = f.batch }
    assert.are.same({ "v" }, g.ids)
    assert.are.equal(0, env.conn:script("delete", P, "v"))
    assert.are.equal(1, env.conn:call("HEXISTS", P .. "waits", "v"))
    fetch { ack = g.batch }
  end)

  it("kills a waiting job: it and its held payloads go to the morgue, the wait ends", function()
    local w = waiting("a")
    fetch { ack = w.batch }
    push("a", "p2")
    push("q", "pq")
    env.conn:call("HSET", P .. "errors", "q", "boom") -- (as a failed queued job's)
    assert.are.equal(2, env.conn:script("kill", P, now(), "a", "q", "nope"))
    assert.are.equal("STALE", by_token(w.token, "{}"))
    assert.are.equal("killed while waiting for a reply (attempt " .. w.attempt .. ")",
      env.conn:call("HGET", P .. "morgue:errors", "a"))
    assert.are.equal("boom", env.conn:call("HGET", P .. "morgue:errors", "q"))
    local dead = env.conn:call("ZRANGE", P .. "morgue:jobs", 0, -1)
    assert.are.equal(2, #dead)
    assert.truthy(dead[1]:find('"p1"', 1, true) and dead[1]:find('"p2"', 1, true), dead[1])
    assert.are.equal("0", env.conn:script("stats", P)[9])
    assert.are.same({}, fetch().ids)
  end)

  -- (one server only: on a cluster INFO answers from any node, not the one
  -- that holds the shard)
  local it_single = os.getenv("LUAKIQ_TEST_CLUSTER") and pending or it
  it_single("costs Redis at most 300 bytes a waiting job beyond the queued job's own", function()
    local N = 2000
    local function used() return tonumber(env.conn:call("INFO", "memory"):match("used_memory:(%d+)")) end
    local jobs = {}
    for i = 1, N do jobs[i] = { id = string.format("job-%06d", i), payload = "" } end
    local base = used()
    env:push("Test", jobs)
    local queued = used() - base
    local f = fetch { limit = N }
    for i = 1, N do assert(await(f.batch, jobs[i].id)) end
    fetch { ack = f.batch, fetch = false }
    local waiting_cost = used() - base
    assert.are.equal(tostring(N), env.conn:script("stats", P)[9])
    local extra = (waiting_cost - queued) / N
    assert.is_true(extra <= 300, string.format("%.0f bytes a waiting job beyond the queued job's %.0f",
      extra, queued / N))
  end)
end)
