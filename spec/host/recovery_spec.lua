-- Fast recovery on the same machine (docs/operations.md, "Recovery"): a
-- shard leased by a process of this hostname that is gone is taken at once,
-- never one of a live process nor of another hostname; a host that waits
-- for another holder's lease says whose and until when, once. The real
-- binary, a real redis-server, real processes and signals; lease_ttl is 30 s
-- throughout, so anything that runs within a few seconds was not waiting
-- for a lease to expire.
local core = require "luakiq.core"
local host = require "helpers.host"
local q = host.quote

local srv, env = host.fixture()

-- Every call records its ids in t:starts; "hold" waits until t:release is set.
local WORKER = [[
local luakiq = require "luakiq"
return {
  shards_count = 1,
  perform = function(batch)
    for id in pairs(batch) do
      luakiq.redis.call("RPUSH", "t:starts", id)
      if id == "hold" then
        while not luakiq.redis.call("GET", "t:release") do luakiq.sleep(0.05) end
      end
    end
  end,
}
]]

local function config(extra)
  return "return { threads_per_node = 1, poll_interval = 0.2, lease_ttl = 30" .. (extra or "") .. " }"
end

local function starts(id)
  local n = 0
  for _, v in ipairs(srv.conn:call("LRANGE", "t:starts", 0, -1)) do
    if v == id then n = n + 1 end
  end
  return n
end

-- A pid that is gone: that of a process that ran and was reaped.
local function dead_pid()
  local p = host.spawn_cmd("true")
  assert.are.equal(0, p:wait(5))
  return p.pid
end

describe("fast recovery", function()
  local dir, procs = nil, {}
  local function start(files)
    dir = host.scriptdir(files or { ["config.lua"] = config(), ["workers/W.lua"] = WORKER })
  end
  host.stop_after_each(function() return procs, dir end)

  it("kill -9 and an immediate restart: the in-flight job runs again in about a second, not lease_ttl", function()
    start()
    procs[1] = host.spawn("run " .. q(dir), env())
    host.enqueue(dir, "W", { { id = "hold" } }, env())
    host.eventually(function() return starts("hold") == 1 end, 10, "hold started")
    local token = srv.conn:call("GET", "luakiq:{W:0}:lease")
    assert.truthy(token:find("^" .. core.hostname():gsub("%p", "%%%0") .. ":" .. procs[1].pid .. ":"), token)
    procs[1]:signal("KILL")
    assert.is_not_nil(procs[1]:wait(5))
    srv.conn:call("SET", "t:release", "1")
    local t0 = core.now()
    procs[2] = host.spawn("run " .. q(dir), env())
    host.eventually(function() return starts("hold") == 2 end, 10, "hold ran again", function() return procs[2]:log() end)
    local took = core.now() - t0
    assert.is_true(took < 5, ("the job ran again %.2f s after the restart"):format(took))
    local log = procs[2]:log()
    assert.truthy(log:find("took over the shard lease of a process of this machine that is gone", 1, true), log)
    assert.truthy(log:find(token, 1, true), log)
    assert.truthy(log:find("restored 1 in-flight jobs of a previous holder", 1, true), log)
    assert.falsy(log:find("leased by another host", 1, true), log)
  end)

  it("never takes a live holder's lease: the waiting host logs the shard, the holder and until when, once", function()
    start()
    procs[1] = host.spawn("run " .. q(dir), env())
    host.enqueue(dir, "W", { { id = "hold" } }, env())
    host.eventually(function() return starts("hold") == 1 end, 10, "hold started")
    local token = srv.conn:call("GET", "luakiq:{W:0}:lease")
    procs[2] = host.spawn("run " .. q(dir), env())
    host.enqueue(dir, "W", { { id = "next" } }, env())
    local line = host.eventually(function() return procs[2]:log():match("[^\n]*leased by another host[^\n]*") end,
      10, "the waiting line", function() return procs[2]:log() end)
    assert.truthy(line:find(token, 1, true), line)
    assert.truthy(line:find("shard", 1, true) and line:find("W", 1, true), line)
    -- until: about lease_ttl from now, as a UTC time
    local y, mo, d, h, mi, s = line:match("(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)Z")
    assert.truthy(y, line)
    local t = os.time { year = y, month = mo, day = d, hour = h, min = mi, sec = s, isdst = false }
    local utc_now = os.time(os.date("!*t"))
    assert.is_true(t > utc_now + 20 and t <= utc_now + 32, line)
    core.sleep(2) -- (some polls of the waiting host)
    assert.are.equal(1, host.count(procs[2]:log(), "leased by another host"))
    assert.falsy(procs[2]:log():find("took over", 1, true))
    assert.are.equal(token, srv.conn:call("GET", "luakiq:{W:0}:lease"))
    assert.are.equal(0, starts("next") + starts("hold") - 1)
    -- the holder goes on: its shard, its jobs
    srv.conn:call("SET", "t:release", "1")
    host.eventually(function() return starts("next") == 1 end, 10, "next ran")
    assert.are.equal(1, starts("hold"))
  end)

  -- A lease planted on the shard, 30 s long, with a job queued behind it:
  -- whether the host takes it at once (the job runs) or waits (it does not).
  local function planted(token)
    srv.conn:call("SET", "luakiq:{W:0}:lease", token, "PX", "30000")
    srv.conn:call("SET", "luakiq:{W:0}:holder", token)
    host.enqueue(dir, "W", { { id = "j" } }, env())
    procs[1] = host.spawn("run " .. q(dir), env())
  end

  it("takes a gone pid's lease of this hostname at once", function()
    start()
    planted(core.hostname() .. ":" .. dead_pid() .. ":abc")
    host.eventually(function() return starts("j") == 1 end, 5, "j ran", function() return procs[1]:log() end)
  end)

  it("never takes the lease of another hostname, of a live pid, nor with fast_recovery = false", function()
    local cases = {
      { "another hostname", function() return "not-" .. core.hostname() .. ":" .. dead_pid() .. ":abc" end },
      { "a live pid", function() return core.hostname() .. ":" .. core.getpid() .. ":abc" end },
      { "fast_recovery = false", function() return core.hostname() .. ":" .. dead_pid() .. ":abc" end,
        ", fast_recovery = false" },
    }
    for _, c in ipairs(cases) do
      srv.conn:call("FLUSHALL")
      start { ["config.lua"] = config(c[3]), ["workers/W.lua"] = WORKER }
      local token = c[2]()
      planted(token)
      host.eventually(function() return procs[1]:log():find("leased by another host", 1, true) end, 10,
        c[1] .. ": the waiting line", function() return procs[1]:log() end)
      core.sleep(1.5)
      assert.are.equal(0, starts("j"), c[1])
      assert.are.equal(token, srv.conn:call("GET", "luakiq:{W:0}:lease"), c[1])
      procs[1]:kill()
      procs[1] = nil
      host.sh("rm -rf " .. q(dir))
    end
  end)

  it("refuses a fast_recovery that is not a boolean (exit 2, one line)", function()
    start { ["config.lua"] = config(", fast_recovery = 'yes'"), ["workers/W.lua"] = WORKER }
    local rc, _, err = host.exec("plan " .. q(dir), nil, env())
    assert.are.equal(2, rc)
    assert.truthy(host.one_line(err), err)
    assert.truthy(err:find("fast_recovery", 1, true), err)
  end)
end)
