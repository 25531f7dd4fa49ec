-- Pause / resume (docs/operations.md, "Pause"): real hosts, a real Redis.
-- Every perform call records "start@time" and "end@time" in Redis (the
-- hosts run on this machine: one clock).
local core = require "luakiq.core"
local json = require "luakiq.json"
local host = require "helpers.host"
local q = host.quote

local srv, env = host.fixture()

local WORKER = [[
local luakiq = require "luakiq"
return {
  shards_count = 6,
  perform = function(batch)
    luakiq.redis.call("RPUSH", "t:start", luakiq.now())
    luakiq.sleep(0.2)
    luakiq.redis.call("RPUSH", "t:end", luakiq.now())
  end,
}
]]

local function times(key)
  local t = {}
  for i, v in ipairs(srv.conn:call("LRANGE", key, 0, -1)) do t[i] = tonumber(v) end
  return t
end
local function cli(dir, args)
  local rc, out, err = host.exec(args:gsub("DIR", q(dir)), nil, env())
  assert.are.equal(0, rc, err)
  return out ~= "" and json.decode(out) or nil
end
local function jobs(n, from)
  local list = {}
  for i = 1, n do list[i] = { id = "j" .. (from + i) } end
  return list
end

describe("pause and resume", function()
  local dir, procs = nil, {}
  before_each(function()
    dir = host.scriptdir {
      ["config.lua"] = "return { threads_per_node = 2, poll_interval = 0.3, web_token = 'tok' }",
      ["workers/W.lua"] = WORKER,
    }
  end)
  host.stop_after_each(function() return procs, dir end)

  it("stops new calls on every host within 1 s, lets running ones finish, keeps enqueue, holds for a new host, drains on resume", function()
    procs[1] = host.spawn("run " .. q(dir), env())
    procs[2] = host.spawn("run " .. q(dir), env())
    host.enqueue(dir, "W", jobs(200, 0), env())
    host.eventually(function() return #times("t:start") >= 10 end, 10, "calls running")
    local t_pause = core.now()
    local out = cli(dir, "pause DIR W")
    assert.are.same({ worker = "W", paused = true, changed = true }, out)
    assert.are.same({ worker = "W", paused = true, changed = false }, cli(dir, "pause DIR W"))
    core.sleep(2)
    local starts, ends = times("t:start"), times("t:end")
    for _, t in ipairs(starts) do
      assert.is_true(t <= t_pause + 1, ("a call started %.2f s after the pause"):format(t - t_pause))
    end
    assert.are.equal(#starts, #ends) -- the running calls finished
    local s = cli(dir, "stats DIR")
    assert.is_true(s.by_worker.W.paused)
    local left = s.by_worker.W.length
    assert.is_true(left > 0)
    -- enqueue goes on while paused
    host.enqueue(dir, "W", jobs(10, 1000), env())
    assert.are.equal(left + 10, cli(dir, "stats DIR").by_worker.W.length)
    -- a host started now stays paused
    procs[3] = host.spawn("run " .. q(dir), env())
    core.sleep(1.5)
    assert.are.equal(#starts, #times("t:start"))
    -- resume: the backlog drains
    assert.are.same({ worker = "W", paused = false, changed = true }, cli(dir, "resume DIR W"))
    host.eventually(function() return cli(dir, "stats DIR").by_worker.W.length == 0 end, 30, "the backlog drained")
    assert.is_nil(cli(dir, "stats DIR").by_worker.W.paused)
  end)

  it("POST /api/v1/workers/NAME/pause|resume needs the token; the dashboard shows paused", function()
    local port = core.free_port()
    procs[1] = host.spawn("run " .. q(dir) .. " --web 127.0.0.1:" .. port, env())
    local base = "http://127.0.0.1:" .. port
    -- with a token, reads need it too (401 without it)
    host.eventually(function() return host.capture("curl -s -o /dev/null -w '%{http_code}' " .. base .. "/metrics") == "401" end,
      10, "the listener")
    local function post(path, auth)
      return host.capture("curl -s -w ' %{http_code}' -X POST " .. (auth and "-H 'Authorization: Bearer tok' " or "") ..
        q(base .. path))
    end
    assert.truthy(post("/api/v1/workers/W/pause"):find(" 401$"))
    assert.are.equal('{"changed":true,"paused":true,"worker":"W"} 200', post("/api/v1/workers/W/pause", true))
    local function dashboard()
      return json.decode(host.capture("curl -s -H 'Authorization: Bearer tok' " .. base .. "/api/web/dashboard"))
    end
    local d = dashboard()
    assert.is_true(d.queues[1].paused)
    assert.truthy(post("/api/v1/workers/Nope/pause", true):find(" 404$"))
    assert.are.equal('{"changed":true,"paused":false,"worker":"W"} 200', post("/api/v1/workers/W/resume", true))
    d = dashboard()
    assert.is_false(d.queues[1].paused)
  end)
end)
