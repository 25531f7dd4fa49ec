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
-- The tokens of the live hosts (luakiq hosts).
local function host_tokens(dir)
  local rc, out = host.exec("hosts " .. q(dir), nil, env())
  assert.are.equal(0, rc)
  local list = {}
  for line in out:gmatch("[^\n]+") do list[#list + 1] = json.decode(line).token end
  return list
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
    host.eventually(function() return #host_tokens(dir) == 2 end, 10, "both hosts listed")
    local t_pause = core.now()
    local out = cli(dir, "pause DIR W")
    assert.are.same({ worker = "W", paused = true, changed = true, hosts = 2 }, out)
    assert.are.same({ worker = "W", paused = true, changed = false, hosts = 2 }, cli(dir, "pause DIR W"))
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
    host.eventually(function() return #host_tokens(dir) == 1 end, 10, "the host listed")
    assert.are.equal('{"changed":true,"hosts":1,"paused":true,"worker":"W"} 200', post("/api/v1/workers/W/pause", true))
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

  -- Fast calls, many per fetch (issue 37: the next jobs still ran after the
  -- command returned): every call records when it started; none may start
  -- after `luakiq pause` returned, and jobs enqueued after it wait for resume.
  local FAST = [[
local luakiq = require "luakiq"
return {
  shards_count = 6, batch_size = 1, fetch_size = 100,
  perform = function(batch)
    luakiq.redis.call("RPUSH", "t:start", luakiq.now())
    luakiq.sleep(0.01)
  end,
}
]]

  it("returns once both hosts acknowledged: no call starts after it returned, later jobs wait for resume", function()
    local fast = host.scriptdir {
      ["config.lua"] = "return { threads_per_node = 2, poll_interval = 0.3 }",
      ["workers/W.lua"] = FAST,
    }
    procs[1] = host.spawn("run " .. q(fast), env())
    procs[2] = host.spawn("run " .. q(fast), env())
    host.eventually(function() return #host_tokens(fast) == 2 end, 10, "both hosts listed")
    host.enqueue(fast, "W", jobs(3000, 0), env())
    host.eventually(function() return #times("t:start") >= 50 end, 10, "calls running")
    local rc, out, err = host.exec("pause " .. q(fast) .. " W", nil, env())
    local returned = core.now()
    assert.are.equal(0, rc, err)
    assert.are.same({ worker = "W", paused = true, changed = true, hosts = 2 }, json.decode(out))
    local before = #times("t:start")
    assert.is_true(before < 3000, "the backlog was not drained before the pause")
    -- jobs enqueued now, and what was left: none starts
    host.enqueue(fast, "W", jobs(20, 5000), env())
    core.sleep(2)
    local starts = times("t:start")
    assert.are.equal(before, #starts, "calls started after the pause returned")
    for _, t in ipairs(starts) do
      assert.is_true(t <= returned, ("a call started %.3f s after the pause returned"):format(t - returned))
    end
    -- resume: every job runs
    assert.are.same({ worker = "W", paused = false, changed = true }, cli(fast, "resume DIR W"))
    host.eventually(function() return #times("t:start") >= 3020 end, 60, "the backlog drained")
    host.sh("rm -rf " .. q(fast))
  end)

  it("names a live host that does not acknowledge within 2 s (SIGSTOP): exit 1, HTTP 504; the pause holds once it answers", function()
    local port = core.free_port()
    procs[1] = host.spawn("run " .. q(dir) .. " --web 127.0.0.1:" .. port, env())
    procs[2] = host.spawn("run " .. q(dir), env())
    local tokens = host.eventually(function() local t = host_tokens(dir) return #t == 2 and t end, 10, "both hosts listed")
    local stopped
    for _, t in ipairs(tokens) do
      if t:find(":" .. procs[2].pid .. ":", 1, true) then stopped = t end
    end
    assert.truthy(stopped, table.concat(tokens, " "))
    procs[2]:signal("STOP")
    local t0 = core.now()
    local rc, out, err = host.exec("pause " .. q(dir) .. " W", nil, env())
    local took = core.now() - t0
    procs[2]:signal("CONT")
    assert.are.equal(1, rc, err)
    assert.is_true(took >= 1.9 and took < 3.5, ("took %.2f s"):format(took))
    assert.are.same({ worker = "W", paused = true, changed = true, hosts = 1, missing = { stopped } }, json.decode(out))
    assert.truthy(host.one_line(err), err)
    assert.truthy(err:find("not acknowledged within 2 s by 1 live host(s): " .. stopped, 1, true), err)
    -- the same over HTTP: 504, the host named
    procs[2]:signal("STOP")
    local res = host.capture("curl -s -w ' %{http_code}' -X POST -H 'Authorization: Bearer tok' " ..
      q("http://127.0.0.1:" .. port .. "/api/v1/workers/W/pause"))
    procs[2]:signal("CONT")
    local body, code = res:match("^(.*) (%d+)$")
    assert.are.equal("504", code, res)
    local r = json.decode(body)
    assert.are.same({ stopped }, r.missing)
    assert.are.equal(1, r.hosts)
    assert.truthy(r.error:find(stopped, 1, true), r.error)
    -- the stopped host, running again, reads the pause and acknowledges it
    host.eventually(function()
      return srv.conn:call("HGET", "luakiq:paused:acks", stopped) == srv.conn:call("HGET", "luakiq:paused", "")
    end, 5, "the late acknowledgement")
    assert.are.same({ worker = "W", paused = true, changed = false, hosts = 2 }, cli(dir, "pause DIR W"))
    -- no call starts on either host
    host.enqueue(dir, "W", jobs(10, 0), env())
    core.sleep(1.5)
    assert.are.same({}, times("t:start"))
  end)
end)
