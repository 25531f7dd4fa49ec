-- Hooks outside perform bounded by hook_timeout (docs/configuration.md,
-- hook_timeout), end to end: the real binary, a real redis-server, real
-- signals. Each case has a hook that never returns: an interpreted loop
-- (the count hook stops it: the fallback runs in the thread) or a loop the
-- JIT compiles (the thread is stuck: the host replaces the process and the
-- main VM records the failure with the defaults). Each checks the hook's
-- fallback, that another worker's job runs meanwhile, and that TERM ends
-- the host within a few seconds.
local core = require "luakiq.core"
local host = require "helpers.host"
local q = host.quote

local srv, env = host.fixture()

-- spin(): interpreted (jit.off), so the count hook reaches it; jit_spin():
-- compiled, out of the hook's reach.
local LOOPS = [[
local function spin() while true do end end
jit.off(spin)
local function jit_spin() while true do end end
]]

-- Other: a worker of its own thread, whose job must run while a hook loops.
local OTHER = [[
local luakiq = require "luakiq"
return { shards_count = 1, perform = function(batch)
  for id in pairs(batch) do luakiq.redis.call("RPUSH", "t:other", id) end
end }
]]

local function scriptdir(config, worker)
  return host.scriptdir {
    ["config.lua"] = LOOPS .. "return { threads_per_node = 2, poll_interval = 0.2, hook_timeout = 1, " ..
      "lease_ttl = 30" .. (config or "") .. " }",
    ["workers/W.lua"] = 'local luakiq = require "luakiq"\n' .. LOOPS .. worker,
    ["workers/Other.lua"] = OTHER,
  }
end

local dir, proc
host.stop_after_each(function() return proc, dir end)
before_each(function() srv.conn:call("FLUSHALL") end)

local function start(config, worker)
  dir = scriptdir(config, worker)
  proc = host.spawn("run " .. q(dir), env())
  host.eventually(function() return host.count(proc:log(), "thread started") == 2 end, 10, "the host started")
end

-- Another worker's job runs within a few seconds, then TERM ends the host
-- within a few seconds.
local function other_runs_and_term_ends()
  local t0 = core.now()
  host.enqueue(dir, "Other", { { id = "o" .. t0 } }, env())
  host.eventually(function() return srv.conn:call("LRANGE", "t:other", 0, -1)[1] end, 5, "the other worker's job",
    function() return proc:log() end)
  t0 = core.now()
  assert.is_true(proc:signal("TERM"))
  assert.are.equal(0, proc:wait(8), proc:log())
  assert.is_true(core.now() - t0 < 6, ("TERM took %.1f s"):format(core.now() - t0))
end

-- The queued record of W's job id (retried: back in the queue), or nil.
local function queued(id) return host.jobs(dir, "W", "queue", env())[id] end

describe("a hook past hook_timeout", function()
  it("retry_in (interpreted loop): the job is retried by the default formula, in the thread", function()
    start(nil, [[return { shards_count = 1, max_retry_count = 5,
      retry_in = function() spin() end, perform = function() error("boom") end }]])
    local t0 = core.now()
    host.enqueue(dir, "W", { { id = "x" } }, env())
    local j = host.eventually(function()
      local r = queued("x")
      return r and r.retry_count == 0 and r
    end, 8, "x retried")
    assert.truthy(j.error:find("boom", 1, true), j.error)
    -- the default formula for the first retry: a few seconds, not now, not far
    assert.is_true(j.perform_in > t0 and j.perform_in < t0 + 120, tostring(j.perform_in - t0))
    local log = proc:log()
    assert.truthy(log:find("retry_in ran past hook_timeout (1 s): the default retry formula is used", 1, true), log)
    assert.falsy(log:find("replacing the process", 1, true), log)
    other_runs_and_term_ends()
  end)

  it("retry_in (a loop the JIT compiles): the process is replaced and the job retried by the default formula", function()
    start(nil, [[return { shards_count = 1, max_retry_count = 5,
      retry_in = function() jit_spin() end, perform = function() error("boom") end }]])
    host.enqueue(dir, "W", { { id = "x" } }, env())
    local j = host.eventually(function()
      local r = queued("x")
      return r and r.retry_count == 0 and r
    end, 15, "x retried", function() return proc:log() end)
    assert.truthy(j.error:find("retry_in ran past hook_timeout", 1, true), j.error)
    assert.truthy(proc:log():find("replacing the process", 1, true), proc:log())
    host.eventually(function() return host.count(proc:log(), "thread started") >= 4 end, 10, "the new process runs")
    other_runs_and_term_ends()
  end)

  it("load_payload: the payload goes to the morgue as one that does not load; the other payloads run", function()
    start([[, load_payload = function(s)
      -- (only in a worker thread: `luakiq jobs` loads the payloads it lists)
      if s:find("loop", 1, true) and require("luakiq.core").thread_index() then spin() end return require("luakiq.json").decode(s) end]],
      [[return { shards_count = 1, perform = function(batch)
        for id in pairs(batch) do luakiq.redis.call("RPUSH", "t:w", id) end end }]])
    host.enqueue(dir, "W", { { id = "bad", payload = "loop" }, { id = "good", payload = "ok" } }, env())
    local dead = host.eventually(function() return host.jobs(dir, "W", "morgue", env()).bad end, 8, "bad buried")
    assert.truthy(dead.error:find("load_payload ran past hook_timeout", 1, true), dead.error)
    host.eventually(function() return srv.conn:call("LRANGE", "t:w", 0, -1)[1] == "good" end, 5, "good ran")
    other_runs_and_term_ends()
  end)

  it("throttle: the job runs as with no throttle", function()
    start(nil, [[return { shards_count = 1, throttle = function(ctx) spin() end, perform = function(batch)
        for id in pairs(batch) do luakiq.redis.call("RPUSH", "t:w", id) end end }]])
    host.enqueue(dir, "W", { { id = "t1" } }, env())
    host.eventually(function() return srv.conn:call("LRANGE", "t:w", 0, -1)[1] == "t1" end, 8, "t1 ran")
    assert.truthy(proc:log():find("throttle ran past hook_timeout (1 s): the job runs (no throttle)", 1, true))
    other_runs_and_term_ends()
  end)

  it("a config's scheduler: the step is skipped, the schedules still fire", function()
    start([[, scheduler = function(ctx) return function() spin() end end,
      schedules = { { name = "tick", worker = "Other", every = 1, id = "s" } }]], [[return { perform = function() end }]])
    host.eventually(function() return host.count(proc:log(), "schedule tick enqueued its job") >= 2 end, 10,
      "two ticks", function() return proc:log() end)
    assert.truthy(proc:log():find("scheduler ran past hook_timeout (1 s): this step is skipped", 1, true))
    local t0 = core.now()
    assert.is_true(proc:signal("TERM"))
    assert.are.equal(0, proc:wait(8), proc:log())
    assert.is_true(core.now() - t0 < 6)
  end)

  it("a splitter (a loop the JIT compiled before): `luakiq run` and `luakiq plan` refuse to start, one line", function()
    local d = host.scriptdir {
      ["config.lua"] = "local function spin(n) local i = 0 while i < n do i = i + 1 end end\nspin(1e6)\n" ..
        "return { hook_timeout = 1, splitter = function(handlers, n) spin(math.huge) end }",
      ["workers/W.lua"] = OTHER,
    }
    for _, cmd in ipairs { "run " .. q(d), "plan " .. q(d) } do
      local t0 = core.now()
      local rc, _, err = host.exec(cmd, nil, env() .. " timeout -k 2 20") -- (a hang fails, not hangs, the spec)
      assert.is_true(core.now() - t0 < 4, ("%s took %.1f s"):format(cmd, core.now() - t0))
      assert.are.equal(2, rc, err)
      assert.truthy(host.one_line(err), err)
      assert.truthy(err:find("splitter ran past hook_timeout (1 s): the host does not start", 1, true), err)
    end
  end)

  it("a splitter: TERM ends `luakiq run` meanwhile, having taken nothing", function()
    local d = host.scriptdir {
      ["config.lua"] = "return { hook_timeout = 60, splitter = function(handlers, n) while true do end end }",
      ["workers/W.lua"] = OTHER,
    }
    proc = host.spawn("run " .. q(d), env())
    core.sleep(1)
    local t0 = core.now()
    assert.is_true(proc:signal("TERM"))
    assert.are.equal(0, proc:wait(5), proc:log())
    assert.is_true(core.now() - t0 < 4, ("TERM took %.1f s"):format(core.now() - t0))
    assert.truthy(proc:log():find("stopped before the start", 1, true), proc:log())
  end)

  it("load_payload in listings: the web thread, `luakiq jobs` and `luakiq job` show the stored text", function()
    local port = core.free_port()
    -- (a job due in an hour: it stays in the queue, and only listings load it)
    dir = scriptdir([[, load_payload = function(s) if s:find("loop", 1, true) then spin() end
      return require("luakiq.json").decode(s) end]], "return { shards_count = 1, perform = function() end }")
    host.enqueue(dir, "W", { { id = "l", payload = "loop", perform_in = core.now() + 3600 } }, env())
    proc = host.spawn("run " .. q(dir) .. " --web 127.0.0.1:" .. port, env())
    local base = "http://127.0.0.1:" .. port
    local function get(path)
      local t0 = core.now()
      local out = host.capture("curl -s -m 20 -w ' %{http_code}' " .. q(base .. path))
      assert.is_true(core.now() - t0 < 4, ("GET %s took %.1f s"):format(path, core.now() - t0))
      return out
    end
    host.eventually(function() return host.capture("curl -s -o /dev/null -w '%{http_code}' " .. base .. "/metrics") == "200" end,
      10, "the listener")
    local listing = get("/api/web/workers/W/jobs?what=queue")
    assert.truthy(listing:find(' 200$'), listing)
    assert.truthy(listing:find('"\\"loop\\""', 1, true), listing) -- (the stored text, a JSON string)
    assert.truthy(get("/api/v1/workers/W/jobs/l"):find(' 200$'))
    assert.truthy(get("/metrics"):find(' 200$'))
    assert.truthy(proc:log():find("load_payload ran past hook_timeout (1 s): the payload is shown as stored", 1, true),
      proc:log())
    for _, cmd in ipairs { "jobs " .. q(dir) .. " W queue", "job " .. q(dir) .. " W l" } do
      local t0 = core.now()
      local rc, out, err = host.exec(cmd, nil, env() .. " timeout -k 2 20")
      assert.is_true(core.now() - t0 < 4, ("%s took %.1f s"):format(cmd, core.now() - t0))
      assert.are.equal(0, rc, err)
      assert.truthy(out:find('"\\"loop\\""', 1, true), out)
      assert.truthy(err:find("load_payload ran past hook_timeout (1 s)", 1, true), err)
    end
    other_runs_and_term_ends()
  end)

  it("is validated", function()
    local d = host.scriptdir { ["config.lua"] = "return { hook_timeout = 0 }", ["workers/W.lua"] = OTHER }
    local rc, _, err = host.exec("plan " .. q(d))
    assert.are.equal(2, rc)
    assert.truthy(err:find("hook_timeout", 1, true), err)
  end)
end)

