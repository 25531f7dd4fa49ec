-- Flow control (docs/configuration.md concurrency/cost, docs/guarantees.md):
-- real hosts on a real Redis. Each perform call records "start end" (this
-- machine's clock, shared by the hosts) in t:calls; overlaps are counted by
-- a sweep over them.
local core = require "luakiq.core"
local host = require "helpers.host"
local q = host.quote

local srv, env = host.fixture()

local function worker(keys_lua, sleep)
  return ([[
local luakiq = require "luakiq"
return {
  shards_count = 20, %s
  perform = function(batch)
    local t0 = luakiq.now()
    local ids = {}
    for id in pairs(batch) do ids[#ids + 1] = id end
    -- a hog holds its unit 30 s on its first run only (a run after a kill -9 is quick)
    local hog = ids[1]:find("^hog") and luakiq.redis.call("INCR", "t:" .. ids[1]) == 1
    luakiq.sleep(hog and 30 or %s)
    luakiq.redis.call("RPUSH", "t:calls", t0 .. " " .. luakiq.now() .. " " .. table.concat(ids, ","))
  end,
}
]]):format(keys_lua, sleep)
end

-- calls = {{start, end, ids}}; the most that ran at once (ids matching
-- filter, when given)
local function calls(filter)
  local list = {}
  for _, e in ipairs(srv.conn:call("LRANGE", "t:calls", 0, -1)) do
    local a, b, ids = e:match("^(%S+) (%S+) (.*)$")
    if not filter or ids:find(filter) then list[#list + 1] = { tonumber(a), tonumber(b), ids } end
  end
  return list
end
local function most_at_once(list)
  local ev = {}
  for _, c in ipairs(list) do ev[#ev + 1] = { c[1], 1 } ev[#ev + 1] = { c[2], -1 } end
  table.sort(ev, function(x, y) if x[1] ~= y[1] then return x[1] < y[1] end return x[2] < y[2] end)
  local cur, most = 0, 0
  for _, e in ipairs(ev) do cur = cur + e[2] most = math.max(most, cur) end
  return most
end
-- n jobs "prefixK", none in the shard of "hog1" (which holds its shard 30 s)
local function ids(prefix, n)
  local list, k = {}, 0
  local hog = core.crc32("hog1") % 20
  while #list < n do
    k = k + 1
    if core.crc32(prefix .. k) % 20 ~= hog then list[#list + 1] = { id = prefix .. k } end
  end
  return list
end

describe("concurrency and cost", function()
  local dir, procs = nil, {}
  local function start(keys_lua, sleep, nhosts, config)
    dir = host.scriptdir {
      ["config.lua"] = config or "return { threads_per_node = 5, poll_interval = 0.5, lease_ttl = 1.5 }",
      ["workers/W.lua"] = worker(keys_lua, sleep or 0.2),
    }
    for i = 1, nhosts or 2 do procs[i] = host.spawn("run " .. q(dir), env()) end
  end
  host.stop_after_each(function() return procs, dir end)

  it("runs at most `concurrency` calls at once over 2 hosts x 5 threads, at close to the cap's rate", function()
    start("concurrency = 3,")
    host.enqueue(dir, "W", ids("j", 60), env())
    host.eventually(function() return #calls() == 60 end, 30, "60 calls")
    local list = calls()
    assert.is_true(most_at_once(list) <= 3, "at once: " .. most_at_once(list))
    assert.are.equal(3, most_at_once(list)) -- the cap is used
    local first, last = math.huge, 0
    for _, c in ipairs(list) do first, last = math.min(first, c[1]), math.max(last, c[2]) end
    local rate = 60 / (last - first)
    -- the cap allows 3 / 0.2 s = 15 calls/s
    assert.is_true(rate >= 15 * 0.7, ("%.1f calls/s"):format(rate))
  end)

  it("a cost of 2 under concurrency 4 runs 2 calls at a time", function()
    start("concurrency = 4, cost = 2,")
    host.enqueue(dir, "W", ids("c", 20), env())
    host.eventually(function() return #calls() == 20 end, 30, "20 calls")
    assert.are.equal(2, most_at_once(calls()))
  end)

  it("cost 0 jobs run while the cap is full", function()
    start([[concurrency = 1, cost = function(id) return id:find("^free") and 0 or 1 end,]], 0.2, 1)
    host.enqueue(dir, "W", { { id = "hog1" } }, env())
    host.eventually(function() return srv.conn:call("ZCARD", "luakiq:{W}:running") == 1 end, 10, "the hog holds the unit")
    host.enqueue(dir, "W", ids("free", 5), env())
    host.enqueue(dir, "W", ids("paid", 2), env())
    host.eventually(function() return #calls("free") == 5 end, 10, "free jobs ran")
    core.sleep(0.5)
    assert.are.equal(0, #calls("paid")) -- they wait for the hog's unit
  end)

  it("a killed host's units come back within lease_ttl", function()
    start("concurrency = 1,", 0.2, 1)
    host.enqueue(dir, "W", { { id = "hog1" } }, env())
    host.eventually(function() return srv.conn:call("ZCARD", "luakiq:{W}:running") == 1 end, 10, "the hog holds the unit")
    core.sleep(2) -- past lease_ttl: the main thread renews the unit meanwhile
    assert.are.equal(1, srv.conn:call("ZCARD", "luakiq:{W}:running"))
    procs[1]:signal("KILL")
    procs[1]:wait(5)
    local killed = core.now()
    procs[2] = host.spawn("run " .. q(dir), env())
    host.enqueue(dir, "W", ids("next", 1), env())
    host.eventually(function() return #calls("next") == 1 end, 10, "next ran")
    local started = calls("next")[1][1]
    assert.is_true(started - killed <= 1.5 + 1.5, ("next started %.2f s after the kill"):format(started - killed))
  end)

  it("throttle: a number requeues the job at that time (no retry, no error); false keeps it waiting in place", function()
    -- "later*" jobs are sent 1.5 s ahead once (t:asked counts the asks);
    -- "wait*" jobs wait while t:gate is unset
    start([[throttle = function(ctx)
      local r = require("luakiq").redis
      if ctx.id:find("^later") and r.call("HINCRBY", "t:asked", ctx.id, 1) == 1 then return ctx.now + 1.5 end
      if ctx.id:find("^wait") then return r.call("GET", "t:gate") == "open" end
      return true
    end,]], 0.05, 1)
    local t0 = core.now()
    host.enqueue(dir, "W", ids("later", 3), env())
    host.enqueue(dir, "W", ids("wait", 3), env())
    host.enqueue(dir, "W", ids("now", 3), env())
    host.eventually(function() return #calls("now") == 3 end, 10, "now* ran")
    core.sleep(0.5)
    assert.are.equal(0, #calls("wait"))
    host.eventually(function() return #calls("later") == 3 end, 10, "later* ran")
    for _, c in ipairs(calls("later")) do assert.is_true(c[1] - t0 >= 1.4, ("ran %.2f s after enqueue"):format(c[1] - t0)) end
    -- not a retry: no failure recorded, retry_count -1. The wait* jobs are
    -- queued, or in a fetch being held (in flight) at the moment of listing.
    -- (two listings: one that moves between them is looked for again)
    host.eventually(function()
      local waiting = 0
      local seen = {}
      for _, what in ipairs { "queue", "busy" } do
        for id, j in pairs(host.jobs(dir, "W", what, env())) do
          assert.truthy(id:find("^wait"), id)
          assert.are.equal(-1, j.retry_count) -- never failed (Lowkiq: -1)
          if not seen[id] then seen[id], waiting = true, waiting + 1 end
        end
      end
      return waiting == 3
    end, 5, "the 3 wait* jobs waiting, never failed")
    srv.conn:call("SET", "t:gate", "open")
    host.eventually(function() return #calls("wait") == 3 end, 10, "wait* ran once the gate opened")
    local failed = 0
    for shard = 0, 19 do failed = failed + tonumber(srv.conn:call("HGET", "luakiq:{W:" .. shard .. "}:counters", "failed") or 0) end
    assert.are.equal(0, failed)
    assert.are.same({}, host.jobs(dir, "W", "morgue", env()))
  end)

  it("throttle: an error in the throttle (or label) fails the call through the retry path", function()
    start([[max_retry_count = 0, label = function(id) return id end,
      throttle = function(ctx) if ctx.label:find("^bad") then error("boom") end return true end,]], 0.05, 1)
    host.enqueue(dir, "W", ids("bad", 1), env())
    host.enqueue(dir, "W", ids("good", 1), env())
    host.eventually(function() return next(host.jobs(dir, "W", "morgue", env())) end, 10, "bad in the morgue")
    local dead = host.jobs(dir, "W", "morgue", env())["bad1"]
    assert.truthy(dead and dead.error:find("throttle failed: .*boom"), tostring(dead and dead.error))
    host.eventually(function() return #calls("good") == 1 end, 10, "good ran")
  end)

  it("refuses a bad concurrency or cost at load (exit 2)", function()
    for src, want in pairs {
      ["concurrency = 0,"] = "concurrency must be a positive integer",
      ['cost = "x",'] = "cost must be a number >= 0 or a function(id, payloads)",
      ["cost = -1,"] = "cost must be",
      ["throttle = 1,"] = "throttle must be a function",
      ["label = function() end,"] = "label goes with throttle",
    } do
      host.refuses_worker(src, want)
    end
  end)
end)
