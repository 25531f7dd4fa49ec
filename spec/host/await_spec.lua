-- Jobs that wait for a reply (luakiq.await, on_reply; docs/lua-api.md,
-- "Jobs that wait for a reply"): real hosts on a real Redis. Replies are
-- sent with reply.lua through a connection of the spec, as any client of
-- the documented script sends them (docs/redis.md, "Waits"). Each worker
-- records what it did in Redis: "t:log" (one line a call, with the time of
-- this machine's clock, which the hosts share), "t:tokens:ID" (every token
-- await returned for ID), "t:err:ID" (an await error the call caught).
local core = require "luakiq.core"
local json = require "luakiq.json"
local keys = require "luakiq.lib.keys"
local host = require "helpers.host"
local q = host.quote

local srv, env = host.fixture()

-- Every worker's body: perform logs "perform ID TAGS" and, when a payload
-- asks (await = true or the opts; await_id: another id; catch: the error
-- is recorded, not raised; sleep: seconds after await, the first run
-- only), awaits; on_reply logs "reply ID ANSWER TAGS ATTEMPT" and raises,
-- raises luakiq.permanent or awaits again as the reply asks.
local BODY = [[
local luakiq = require "luakiq"
local function log(s) luakiq.redis.call("RPUSH", "t:log", s .. " @" .. string.format("%.6f", luakiq.now())) end
local function tags(pls)
  local t = {}
  for i, p in ipairs(pls) do t[i] = p.tag end
  return table.concat(t, ",")
end
local function record(id, w)
  luakiq.redis.call("RPUSH", "t:tokens:" .. id, w.token)
  luakiq.redis.call("HSET", "t:url", id, tostring(w.url))
  luakiq.redis.call("HSET", "t:attempt", id, w.attempt)
end
return function(w, with_reply)
  w.perform = function(batch)
    for id, pls in pairs(batch) do
      log("perform " .. id .. " " .. tags(pls))
      for _, p in ipairs(pls) do
        if p.await then
          local opts = p.await ~= true and p.await or nil
          local ok, r = pcall(function()
            local w = luakiq.await(p.await_id or id, opts) -- (not a tail call: the error's position is this line)
            return w
          end)
          if ok then
            record(id, r)
          elseif p.catch then
            luakiq.redis.call("RPUSH", "t:err:" .. id, tostring(r))
          else
            error(r, 0)
          end
          if p.sleep and luakiq.redis.call("INCR", "t:runs:" .. id) == 1 then luakiq.sleep(p.sleep) end
        end
      end
    end
  end
  if with_reply then
    w.on_reply = function(id, reply, pls, call)
      log("reply " .. id .. " " .. tostring(reply.answer) .. " " .. tags(pls) .. " " .. call.attempt)
      if reply.raise then error(reply.raise) end
      if reply.permanent then error(luakiq.permanent(reply.permanent)) end
      if reply.again then record(id, luakiq.await(id)) end
    end
  end
  return w
end
]]

local FILES = {
  ["config.lua"] = [[return { threads_per_node = 2, poll_interval = 0.2, lease_ttl = 2,
                              public_url = "https://jobs.example.com/" }]],
  ["lib/body.lua"] = BODY,
  ["workers/W.lua"] = [[return require("lib.body")({ shards_count = 2, max_retry_count = 2,
                          retry_in = function() return 0 end }, true)]],
  -- rickover's rule (no on_reply)
  ["workers/R.lua"] = [[return require("lib.body")({ shards_count = 2, max_retry_count = 3,
                          retry_in = function() return 0 end })]],
  ["workers/T.lua"] = [[return require("lib.body")({ shards_count = 2, max_retry_count = 1, reply_timeout = 1,
                          retry_in = function() return 0 end }, true)]],
  ["workers/U.lua"] = [[return require("lib.body")({ shards_count = 4, concurrency = 1 }, true)]],
  ["workers/UR.lua"] = [[return require("lib.body")({ shards_count = 4, concurrency = 1,
                           await_releases_units = true }, true)]],
  -- one running job per label, as the throttle sees them
  ["workers/TH.lua"] = [[return require("lib.body")({ shards_count = 4,
    label = function(id, pls) return pls[1].tag end,
    throttle = function(ctx)
      for _, r in ipairs(ctx.running) do if r.label == ctx.label then return false end end
      return true
    end }, true)]],
}
local SHARDS = { W = 2, R = 2, T = 2, U = 4, UR = 4, TH = 4 }

-- The log's lines (without their times) and their times.
local function log()
  local lines, times = {}, {}
  for i, e in ipairs(srv.conn:call("LRANGE", "t:log", 0, -1)) do
    lines[i], times[i] = e:match("^(.-) @(%S+)$")
    times[i] = tonumber(times[i])
  end
  return lines, times
end
local function index_of(lines, line)
  for i, l in ipairs(lines) do if l == line then return i end end
end
local function logged(line)
  return function() return index_of((log()), line) end
end
local function tokens(id) return srv.conn:call("LRANGE", "t:tokens:" .. id, 0, -1) end

-- reply.lua as a client sends it: by token, on the id's shard, waking its hosts.
local function reply(worker, id, token, body)
  local P = keys.prefix("luakiq", worker, core.crc32(id) % SHARDS[worker])
  local ok, r = pcall(srv.conn.script, srv.conn, "reply", P, "reply", string.format("%.17g", core.now()),
    keys.wake_channel("luakiq"), "", "token", token, json.encode(body))
  if ok then return r end
  return tostring(r):gsub("^redis: ", ""):match("(%u+) ") or tostring(r)
end

-- An id of worker's queue in the same shard as id.
local function same_shard(worker, id, prefix)
  local want = core.crc32(id) % SHARDS[worker]
  for k = 1, 1000 do
    if core.crc32(prefix .. k) % SHARDS[worker] == want then return prefix .. k end
  end
end

local function cli(dir, args)
  local rc, out, err = host.exec(args:gsub("DIR", q(dir)), nil, env())
  return rc, out ~= "" and json.decode(out) or nil, err
end

describe("luakiq.await", function()
  local box = host.dir_per_test(FILES)
  local function start() box.proc = host.spawn("run " .. q(box.dir), env()) end
  local function enqueue(worker, jobs) host.enqueue(box.dir, worker, jobs, env()) end
  local function explain() return box.proc and box.proc:log() end
  -- Waits until id's n-th await (default 1) has returned.
  local function awaited(id, n)
    host.eventually(function() return #tokens(id) >= (n or 1) end, 15, id .. "'s await " .. (n or 1), explain)
  end
  -- Waits until worker's id is dead; returns its record (luakiq job).
  local function dead(worker, id)
    return host.eventually(function()
      local _, d = cli(box.dir, "job DIR " .. worker .. " " .. id)
      return d and d.state == "dead" and d
    end, 15, id .. " dead", explain)
  end
  local function attempt(id) return srv.conn:call("HGET", "t:attempt", id) end

  it("waits in Redis, seen by stats and luakiq job; the reply runs on_reply with it and the payloads", function()
    -- (a lapsed correlation key: thread 0 sweeps it at start)
    srv.conn:call("HSET", "luakiq:{W}:waitkeys", "old", "3 1000 gone")
    start()
    enqueue("W", { { id = "a", payload = { tag = "p1", await = { key = "corr-a" } } } })
    awaited("a")
    local token = tokens("a")[1]
    assert.are.equal("https://jobs.example.com/api/v1/replies/" .. token, srv.conn:call("HGET", "t:url", "a"))
    local n = tonumber(attempt("a"))
    host.eventually(function() return host.stats(box.dir, env()).by_worker.W.waiting == 1 end, 5, "waiting 1")
    local s = host.stats(box.dir, env())
    assert.are.equal(1, s.total.waiting)
    assert.are.equal(0, s.by_worker.W.length)
    local rc, j, err = cli(box.dir, "job DIR W a")
    assert.are.equal(0, rc, err)
    assert.are.equal("waiting", j.state)
    assert.are.equal(n, j.attempt)
    assert.are.equal("corr-a", j.key)
    assert.is_true(math.abs(j.deadline - j.since - 86400) < 0.001) -- the default reply_timeout
    assert.are.same({ tag = "p1", await = { key = "corr-a" } }, j.payloads[1][1])
    host.eventually(function() return not srv.conn:call("HGET", "luakiq:{W}:waitkeys", "old") end, 5, "the sweep")
    local ka, kd, kid = srv.conn:call("HGET", "luakiq:{W}:waitkeys", "corr-a"):match("^(%d+) (%S+) (.*)$")
    assert.are.same({ n, j.deadline, "a" }, { tonumber(ka), tonumber(kd), kid })
    assert.are.equal("accepted", reply("W", "a", token, { answer = 42 }))
    host.eventually(logged("reply a 42 p1 " .. n), 5, "on_reply", explain)
    host.eventually(function() return host.stats(box.dir, env()).by_worker.W.waiting == 0 end, 5, "waiting 0")
    rc = cli(box.dir, "job DIR W a")
    assert.are.equal(1, rc) -- done: nowhere
    assert.are.equal("STALE", reply("W", "a", token, { answer = 42 }))
    local lines = log()
    assert.are.equal(2, #lines, table.concat(lines, "\n"))
  end)

  it("runs payloads pushed for a waiting id after its reply, while the shard's other ids run", function()
    start()
    local b = same_shard("W", "a", "b")
    enqueue("W", { { id = "a", payload = { tag = "p1", await = true } } })
    awaited("a")
    local t0 = core.now()
    enqueue("W", { { id = "a", payload = { tag = "p2" } }, { id = b, payload = { tag = "pb" } } })
    -- the shard is not blocked: b runs at once
    host.eventually(logged("perform " .. b .. " pb"), 5, "b", explain)
    local lines, times = log()
    assert.is_true(times[index_of(lines, "perform " .. b .. " pb")] - t0 < 1.5, "b ran late")
    core.sleep(0.6)
    assert.is_nil(index_of((log()), "perform a p2")) -- a's new payload waits behind its reply
    local _, j = cli(box.dir, "job DIR W a")
    assert.are.equal("waiting", j.state)
    assert.are.equal("p2", j.queued_payloads[1][1].tag)
    assert.are.equal("accepted", reply("W", "a", tokens("a")[1], { answer = 1 }))
    host.eventually(logged("perform a p2"), 5, "a's p2", explain)
    lines = log()
    assert.is_true(index_of(lines, "reply a 1 p1 " .. attempt("a")) < index_of(lines, "perform a p2"))
  end)

  it("takes on_reply's error through the retry path (a new attempt and token), awaits again, and luakiq.permanent", function()
    start()
    enqueue("W", { { id = "a", payload = { tag = "p1", await = true } } })
    awaited("a")
    local first = tokens("a")[1]
    assert.are.equal("accepted", reply("W", "a", first, { answer = 1, raise = "boom" }))
    -- performed again (retry_in 0): a new attempt, a new token; the old one is stale
    awaited("a", 2)
    local second = tokens("a")[2]
    assert.are_not.equal(first, second)
    assert.are.equal("STALE", reply("W", "a", first, { answer = 1 }))
    -- on_reply awaits again: multi-step
    assert.are.equal("accepted", reply("W", "a", second, { answer = 2, again = true }))
    awaited("a", 3)
    local _, j = cli(box.dir, "job DIR W a")
    assert.are.equal("waiting", j.state)
    assert.are.equal(0, j.retry_count)
    assert.are.equal("accepted", reply("W", "a", tokens("a")[3], { answer = 3, permanent = "no way" }))
    assert.are.equal("no way", dead("W", "a").error)
    local lines = log()
    assert.are.same({ "perform a p1", "reply a 1 p1", "perform a p1", "reply a 2 p1", "reply a 3 p1" },
      (function()
        local out = {}
        for i, l in ipairs(lines) do out[i] = l:gsub(" %d+$", "") end
        return out
      end)())
  end)

  it("applies rickover's rule without on_reply: succeeded is done, failed retries, retryable false is dead", function()
    start()
    enqueue("R", { { id = "s", payload = { tag = "x", await = true } }, { id = "f", payload = { tag = "x", await = true } },
                   { id = "n", payload = { tag = "x", await = true } } })
    for _, id in ipairs { "s", "f", "n" } do awaited(id) end
    assert.are.equal("BADREPLY", reply("R", "s", tokens("s")[1], { answer = 1 }))
    assert.are.equal("accepted", reply("R", "s", tokens("s")[1], { status = "succeeded" }))
    assert.are.equal("accepted", reply("R", "f", tokens("f")[1], { status = "failed", error = "it broke" }))
    assert.are.equal("accepted", reply("R", "n", tokens("n")[1], { status = "failed", error = "never", retryable = false }))
    awaited("f", 2)
    assert.are.equal("never", dead("R", "n").error)
    assert.are.equal(1, (cli(box.dir, "job DIR R s"))) -- done: nowhere
    local _, f = cli(box.dir, "job DIR R f")
    assert.are.equal("waiting", f.state) -- its second run awaited again
    assert.are.equal(0, f.retry_count)
    assert.are.equal(1, host.count(box.proc:log(), "batch failed: it broke"))
  end)

  it("fails a wait with no reply in time through the retry path, then the morgue; heartbeats too", function()
    start()
    enqueue("T", { { id = "t", payload = { tag = "x", await = true } },
                   { id = "h", payload = { tag = "x", await = { timeout = 30, heartbeat = 0.5 } } } })
    assert.are.equal("reply timeout after 1 s", dead("T", "t").error)
    assert.are.equal(2, #tokens("t")) -- performed, timed out, retried, timed out again
    assert.are.equal("heartbeat timeout after 0.5 s", dead("T", "h").error)
    assert.are.equal("STALE", reply("T", "t", tokens("t")[2], { answer = "late" }))
  end)

  it("refuses an id not in the call, bad options and a duplicate key with a clear error at the call", function()
    start()
    enqueue("W", { { id = "k1", payload = { tag = "x", await = { key = "dup" } } } })
    awaited("k1")
    enqueue("W", {
      { id = "e1", payload = { tag = "x", await = true, await_id = "zz", catch = true } },
      { id = "e2", payload = { tag = "x", await = { timeout = -1 }, catch = true } },
      { id = "e3", payload = { tag = "x", await = { tiemout = 5 }, catch = true } },
      { id = "e4", payload = { tag = "x", await = { key = "dup" }, catch = true } },
    })
    local want = {
      e1 = "luakiq.await: 'zz' is not a job of this call (its ids: e1)",
      e2 = "luakiq.await: timeout must be a number of seconds > 0, got -1",
      e3 = "luakiq.await: unknown option 'tiemout' (timeout, key, heartbeat)",
      e4 = 'luakiq.await: duplicate key "dup": job k1 waits with it (attempt ' ..
        attempt("k1") .. ")",
    }
    for id, msg in pairs(want) do
      host.eventually(function() return srv.conn:call("LINDEX", "t:err:" .. id, 0) end, 10, id .. "'s error", explain)
      local got = srv.conn:call("LINDEX", "t:err:" .. id, 0)
      -- at the call: the position is the worker's line that called it
      assert.truthy(got:find("^%S*/lib/body%.lua:%d+: "), got)
      assert.are.equal(msg, (got:gsub("^[^ ]+ ", "")), id)
      -- the call that caught it fails all the same: nothing waits
      local d = dead("W", id)
      assert.truthy(d.error:find(msg, 1, true), d.error)
    end
    local _, k1 = cli(box.dir, "job DIR W k1")
    assert.are.equal("waiting", k1.state) -- the key is still k1's
    assert.are.equal(1, host.stats(box.dir, env()).by_worker.W.waiting)
  end)

  it("refuses luakiq.await outside a worker thread's call", function()
    local f = box.dir .. "/outside.lua"
    host.write(f, [[print(select(2, pcall(function() local w = require("luakiq").await("a") return w end)))]])
    local rc, out, err = host.exec("lua " .. q(f), nil, env())
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("outside.lua:1: luakiq.await: only inside perform or on_reply, on a worker thread of luakiq run",
      1, true), out)
  end)

  it("gives a re-run of the same attempt the same token (its host killed with -9 before the ack)", function()
    start()
    enqueue("W", { { id = "a", payload = { tag = "p1", await = true, sleep = 60 } } })
    awaited("a")
    box.proc:kill()
    start() -- takes the shard over once the dead host's lease ends (2 s), restores a and runs it again
    awaited("a", 2)
    local t = tokens("a")
    assert.are.equal(t[1], t[2])
    assert.are.equal("accepted", reply("W", "a", t[1], { answer = 7 }))
    host.eventually(logged("reply a 7 p1 " .. attempt("a")), 10, "on_reply", explain)
  end)

  it("keeps a waiting job's concurrency units (await_releases_units = false) until its reply was handled", function()
    start()
    enqueue("U", { { id = "u1", payload = { tag = "x", await = true } } })
    awaited("u1")
    enqueue("U", { { id = "u2", payload = { tag = "y" } } })
    core.sleep(1.5)
    assert.is_nil(index_of((log()), "perform u2 y")) -- the one unit is u1's, waiting
    assert.are.equal("1", srv.conn:call("HGET", "luakiq:{U}:units", "wait:u1"))
    assert.are.equal("accepted", reply("U", "u1", tokens("u1")[1], { answer = 1 }))
    host.eventually(logged("perform u2 y"), 10, "u2 after u1's reply", explain)
    local lines = log()
    assert.is_true(index_of(lines, "reply u1 1 x " .. attempt("u1")) <
      index_of(lines, "perform u2 y"))
    host.eventually(function() return not srv.conn:call("HGET", "luakiq:{U}:units", "wait:u1") end, 5, "hold given back")
  end)

  it("gives a waiting job's units back when an operator kills it (admin kill): the next job starts", function()
    start()
    enqueue("U", { { id = "u1", payload = { tag = "x", await = true } } })
    awaited("u1")
    enqueue("U", { { id = "u2", payload = { tag = "y" } } })
    core.sleep(1)
    assert.is_nil(index_of((log()), "perform u2 y"))
    local rc, out, err = cli(box.dir, "admin DIR U kill u1")
    assert.are.same({ 0, { killed = 1 } }, { rc, out }, err)
    assert.is_falsy(srv.conn:call("HGET", "luakiq:{U}:units", "wait:u1"))
    host.eventually(logged("perform u2 y"), 5, "u2 once u1 was killed", explain)
    assert.are.equal("STALE", reply("U", "u1", tokens("u1")[1], { answer = 1 }))
  end)

  it("shows a waiting job in the throttle's running list (ctx.running) until its reply was handled", function()
    start()
    enqueue("TH", { { id = "t1", payload = { tag = "x", await = true } } })
    awaited("t1")
    local calls = srv.conn:call("HGET", "luakiq:{TH}:calls", "wait:t1")
    assert.truthy(calls, "the wait's registration")
    assert.are.same({ { "t1", 1, "x" } }, json.decode(calls).jobs)
    enqueue("TH", { { id = "t2", payload = { tag = "x" } }, { id = "t3", payload = { tag = "y" } } })
    host.eventually(logged("perform t3 y"), 10, "t3: another label", explain)
    core.sleep(1)
    assert.is_nil(index_of((log()), "perform t2 x")) -- t1 runs for the throttle while it waits
    assert.are.equal("accepted", reply("TH", "t1", tokens("t1")[1], { answer = 1 }))
    host.eventually(logged("perform t2 x"), 10, "t2 after t1's reply", explain)
    local lines = log()
    assert.is_true(index_of(lines, "reply t1 1 x " .. attempt("t1")) < index_of(lines, "perform t2 x"))
    host.eventually(function() return not srv.conn:call("HGET", "luakiq:{TH}:calls", "wait:t1") end, 5,
      "registration given back")
  end)

  it("gives the units back while the job waits with await_releases_units = true", function()
    start()
    enqueue("UR", { { id = "u1", payload = { tag = "x", await = true } } })
    awaited("u1")
    enqueue("UR", { { id = "u2", payload = { tag = "y" } } })
    host.eventually(logged("perform u2 y"), 5, "u2 while u1 waits", explain)
    local _, j = cli(box.dir, "job DIR UR u1")
    assert.are.equal("waiting", j.state)
    assert.is_falsy(srv.conn:call("HGET", "luakiq:{UR}:units", "wait:u1"))
  end)
end)
