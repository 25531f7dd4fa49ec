-- luakiq cancel end to end (docs/cli.md, "cancel"; docs/workers.md, "Cancel"):
-- a real host, a real redis-server, a real HTTP server and real child
-- processes. A running job is stopped at its call's next wait within a
-- second, whatever the call catches, and is neither retried nor failed; a
-- job that waits for a reply loses its wait; the CLI says per id what it did.
local core = require "luakiq.core"
local json = require "luakiq.json"
local keys = require "luakiq.lib.keys"
local host = require "helpers.host"
local httpd = require "helpers.httpd"
local q = host.quote

local srv, env = host.fixture()

-- C: what a job does is its payload's "act"; every start and end is
-- recorded ("t:start", "t:after": code after a caught wait, "t:done").
local WORKER = [[
local luakiq = require "luakiq"
local function rec(list, id) luakiq.redis.call("RPUSH", list, id) end
local act = {
  sleep = function() luakiq.sleep(60) end,
  pcall = function(id)
    local ok, err = pcall(luakiq.sleep, 60)
    rec("t:after", id .. " " .. tostring(err)) -- (never: the cancel raises again at once)
  end,
  process = function(id)
    luakiq.process.run { argv = { "sh", "-c", "echo $$ > " .. os.getenv("T_DIR") .. "/" .. id .. ".pgid; " ..
      "sleep 60 & echo $! > " .. os.getenv("T_DIR") .. "/" .. id .. ".pid; wait" } }
  end,
  http = function() luakiq.http.request { url = os.getenv("T_URL") .. "/delay/60000", timeout = 90 } end,
  redis = function() while true do luakiq.redis.call("INCR", "t:n") end end,
  short = function() luakiq.sleep(2) end,
  await = function(id) luakiq.redis.call("SET", "t:token:" .. id, luakiq.await(id).token) end,
}
return {
  shards_count = 1, timeout = 120, max_retry_count = 3, batch_size = 1, keep_done = 3600,
  perform = function(batch)
    for id, payloads in pairs(batch) do
      rec("t:start", id)
      act[payloads[1].act](id)
      rec("t:done", id)
    end
  end,
}
]]

local function list(k) return srv.conn:call("LRANGE", k, 0, -1) end
local function counters()
  local flat = srv.conn:call("HGETALL", keys.prefix("luakiq", "C", 0) .. "counters")
  local t = {}
  for i = 1, #flat, 2 do t[flat[i]] = tonumber(flat[i + 1]) end
  return t
end

describe("luakiq cancel", function()
  local box = host.dir_per_test { ["config.lua"] = "return { threads_per_node = 1, poll_interval = 0.2 }",
                                  ["workers/C.lua"] = WORKER }
  local web

  local function start(extra)
    box.proc = host.spawn("run " .. q(box.dir), env() .. " T_DIR=" .. q(box.dir) .. " " .. (extra or ""))
  end
  local function enqueue(jobs)
    local lines = {}
    for i, j in ipairs(jobs) do lines[i] = json.encode(j) end
    local rc, _, err = host.exec("enqueue " .. q(box.dir) .. " C", table.concat(lines, "\n"), env())
    assert.are.equal(0, rc, err)
  end
  local function cancel(...)
    local rc, out, err = host.exec("cancel " .. q(box.dir) .. " C " .. table.concat({ ... }, " "), nil, env())
    assert.are.equal(0, rc, err)
    return out
  end
  local function started(id)
    host.eventually(function()
      for _, s in ipairs(list("t:start")) do if s == id then return true end end
    end, 15, id .. " started", function() return box.proc:log() end)
  end
  -- Cancels the running id: the call ends within 2 s, is not retried, not
  -- failed, and counts as cancelled; busy is empty.
  local function cancel_running(id)
    started(id)
    core.sleep(0.3) -- (in its wait)
    local t0 = core.now()
    assert.are.equal(id .. ": running (cancel requested)\n", cancel(id))
    local busy = keys.prefix("luakiq", "C", 0) .. "busy"
    host.eventually(function() return srv.conn:call("EXISTS", busy) == 0 end, 5, id .. " out of busy",
      function() return box.proc:log() end)
    assert.is_true(core.now() - t0 < 2, "ended in " .. (core.now() - t0) .. " s")
    core.sleep(0.5)
    assert.are.same({ id }, list("t:start")) -- not retried
    assert.are.same({}, list("t:done"))
    local c = counters()
    assert.are.equal(1, c.cancelled)
    assert.is_nil(c.failed)
    assert.is_nil(c.processed)
    local rc, out = host.exec("job " .. q(box.dir) .. " C " .. id, nil, env())
    assert.are.equal(0, rc, out) -- (keep_done: the record of a cancelled job)
    local rec = json.decode(out)
    assert.are.equal("cancelled", rec.state, out)
    assert.is_true(math.abs(rec.finished_at - core.now()) < 30, out)
    assert.truthy(box.proc:log():find("call cancelled", 1, true))
  end

  after_each(function()
    if web then web.stop() web = nil end
  end)

  it("stops a running job in luakiq.sleep(60) within a second: not retried, counted cancelled", function()
    start()
    enqueue { { id = "s1", payload = { act = "sleep" } } }
    cancel_running("s1")
  end)

  it("stops it through a pcall around the wait: nothing after it runs", function()
    start()
    enqueue { { id = "p1", payload = { act = "pcall" } } }
    cancel_running("p1")
    assert.are.same({}, list("t:after"))
  end)

  it("ends luakiq.process.run's child and its whole process group", function()
    start()
    enqueue { { id = "c1", payload = { act = "process" } } }
    host.eventually(function() return host.read(box.dir .. "/c1.pid") end, 10, "the child's pid")
    local pgid, pid = tonumber(host.read(box.dir .. "/c1.pgid")), tonumber(host.read(box.dir .. "/c1.pid"))
    assert.is_true(host.sh("kill -0 " .. pid))
    cancel_running("c1")
    host.eventually(function() return not host.sh("kill -0 -" .. pgid .. " 2>/dev/null") end, 5, "the group gone")
    assert.is_false(host.sh("kill -0 " .. pid .. " 2>/dev/null"))
  end)

  it("ends a slow luakiq.http request", function()
    web = httpd.start()
    start("T_URL=" .. q(web.url))
    enqueue { { id = "h1", payload = { act = "http" } } }
    cancel_running("h1")
  end)

  it("stops a call at its next luakiq.redis command", function()
    start()
    enqueue { { id = "r1", payload = { act = "redis" } } }
    cancel_running("r1")
  end)

  it("stops a job fetched with the running one before its call begins, and its batch-mate runs", function()
    host.sh("rm -rf " .. q(box.dir))
    box.dir = host.scriptdir { ["config.lua"] = "return { threads_per_node = 1, poll_interval = 5 }",
                               ["workers/C.lua"] = WORKER:gsub("batch_size = 1", "batch_size = 1, fetch_size = 3") }
    start()
    enqueue { { id = "f1", payload = { act = "short" } }, { id = "f2", payload = { act = "sleep" } },
              { id = "f3", payload = { act = "short" } } }
    started("f1")
    assert.are.equal("f2: running (cancel requested)\n", cancel("f2"))
    host.eventually(function() return #list("t:done") == 2 end, 15, "f1 and f3 done", function() return box.proc:log() end)
    assert.are.same({ "f1", "f3" }, list("t:start"))
    assert.are.equal(1, counters().cancelled)
  end)

  it("removes a job that waits for a reply: its token answers STALE, held payloads go too", function()
    start()
    enqueue { { id = "w1", payload = { act = "await" } } }
    local token = host.eventually(function() return srv.conn:call("GET", "t:token:w1") end, 15, "w1's token")
    host.eventually(function()
      local _, out = host.exec("waiting " .. q(box.dir) .. " C", nil, env())
      return out:find('"w1"', 1, true)
    end, 10, "w1 waiting")
    enqueue { { id = "w1", payload = { act = "sleep" } } } -- (held behind the wait)
    assert.are.equal("w1: cancelled waiting\nnope: not found\n", cancel("w1", "nope"))
    local rc, _, err = host.exec("reply " .. q(box.dir) .. " C " .. q(token) .. " '{\"status\":\"succeeded\"}'", nil, env())
    assert.are.equal(1, rc)
    assert.truthy(err:find("STALE", 1, true), err)
    local st = json.decode(select(2, host.exec("stats " .. q(box.dir), nil, env()))).by_worker.C
    assert.are.equal(0, st.length)
    assert.are.equal(0, st.waiting)
    assert.are.equal(1, counters().cancelled)
    core.sleep(0.5)
    assert.are.same({ "w1" }, list("t:start"))
  end)

  it("refuses an unknown worker (exit 2, one line) and a call without ids", function()
    local rc, _, err = host.exec("cancel " .. q(box.dir) .. " Nope x", nil, env())
    assert.are.equal(2, rc)
    assert.truthy(host.one_line(err), err)
    assert.truthy(err:find("unknown worker 'Nope'", 1, true), err)
    rc = host.exec("cancel " .. q(box.dir) .. " C", nil, env())
    assert.are.equal(2, rc)
  end)
end)
