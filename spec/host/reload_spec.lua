-- Reload (docs/operations.md, "Deploying new worker code"): `kill -HUP` makes
-- `luakiq run` load its script directory again; each worker thread switches
-- to the new code between two calls. A reload that does not load, or that
-- changes what a running host cannot (shards_count, the worker set, the
-- threads' shards, the main thread's settings), is refused with one line and
-- the old code runs on. The real binary and a real redis-server; every
-- perform call records its version and its jobs in Redis.
local core = require "luakiq.core"
local json = require "luakiq.json"
local host = require "helpers.host"
local q = host.quote

local srv, env = host.fixture()

-- Worker W at version V: every payload of the call is recorded as "V ID C"
-- (C: the payload, the enqueue round it came with) in t:ran, in the order
-- perform sees them; one call in three waits 1 ms in luakiq's I/O (it parks).
local function worker(version, shards)
  return ([[
local luakiq = require "luakiq"
local n = 0
return {
  shards_count = SHARDS, batch_size = 5, fetch_size = 20,
  perform = function(batch)
    n = n + 1
    if n %% 3 == 0 then luakiq.sleep(0.001) end
    local ids = {}
    for id in pairs(batch) do ids[#ids + 1] = id end
    table.sort(ids)
    for _, id in ipairs(ids) do
      for _, c in ipairs(batch[id]) do luakiq.redis.call("RPUSH", "t:ran", "VERSION " .. id .. " " .. c) end
    end
  end,
}
]]):gsub("SHARDS", tostring(shards or 4)):gsub("VERSION", version):gsub("%%%%", "%%")
end

local CONFIG = "return { threads_per_node = 2, poll_interval = 0.2 }"

-- The records so far: {version =, id =, c =} in the order they were written.
local function ran()
  local list = {}
  for i, v in ipairs(srv.conn:call("LRANGE", "t:ran", 0, -1)) do
    local version, id, c = v:match("^(%S+) (%S+) (%S+)$")
    list[i] = { version = version, id = id, c = tonumber(c) }
  end
  return list
end

-- Enqueue round c: one job of payload c for each of the ids i1..iN (dir: a
-- script directory of its own, as the host's may hold files that do not load).
local function round(d, c, n)
  local jobs = {}
  for i = 1, n do jobs[i] = { id = "i" .. i, payload = c } end
  host.enqueue(d, "W", jobs, env())
end

local count = host.count

-- Waits until total records are in, and a moment more (a job run twice would
-- add one); returns them.
local function drained(total)
  host.eventually(function() return #ran() >= total end, 30, total .. " jobs ran")
  core.sleep(0.3) -- nothing more comes (a job run twice would)
  return ran()
end

describe("luakiq run: kill -HUP reloads the script directory", function()
  local dir, edir, proc
  before_each(function()
    dir = host.scriptdir { ["config.lua"] = CONFIG, ["workers/W.lua"] = worker("v1") }
    edir = host.scriptdir { ["config.lua"] = CONFIG, ["workers/W.lua"] = worker("v1") }
  end)
  host.stop_after_each(function() return proc, dir, edir end)

  local function start(args)
    proc = host.spawn("run " .. q(dir) .. (args or ""), env())
    host.eventually(function() return count(proc:log(), "thread started") == 2 end, 10, "threads started")
  end

  -- Waits for the reload to be over; returns the log.
  local function reloaded(n)
    return host.eventually(function()
      local log = proc:log()
      return count(log, "reload done: 2 of 2 worker threads run the new code") >= (n or 1) and log
    end, 20, "reload done")
  end

  it("switches every thread to the new perform under load: each job runs once, with one version, in order per id", function()
    local port = core.free_port()
    start(" --web 127.0.0.1:" .. port)
    local ROUNDS, IDS = 40, 50
    local hup_at
    for c = 1, ROUNDS do
      round(edir, c, IDS)
      if c == 15 then
        host.write(dir .. "/workers/W.lua", worker("v2"))
        assert.is_true(proc:signal("HUP"))
        hup_at = c
      end
      core.sleep(0.03)
    end
    local log = reloaded()
    local after = #ran()
    local list = drained(ROUNDS * IDS)
    assert.is_true(proc:alive(), proc:log())
    assert.are.equal(ROUNDS * IDS, #list, "every job ran once")
    local seen, last, version_of, versions = {}, {}, {}, { v1 = 0, v2 = 0 }
    for i, r in ipairs(list) do
      local key = r.id .. " " .. r.c
      assert.is_nil(seen[key], "ran twice: " .. key)
      seen[key] = true
      -- per id: payloads in enqueue order, and never the old code after the new
      assert.is_true((last[r.id] or 0) < r.c, "out of order for " .. r.id)
      last[r.id] = r.c
      assert.is_true(r.version == "v1" or r.version == "v2", r.version)
      assert.is_false(version_of[r.id] == "v2" and r.version == "v1", "v1 ran after v2 for " .. r.id)
      version_of[r.id] = r.version
      versions[r.version] = versions[r.version] + 1
      if i > after then assert.are.equal("v2", r.version, "only v2 runs once the reload is done") end
    end
    for c = 1, ROUNDS do
      for i = 1, IDS do assert.is_true(seen["i" .. i .. " " .. c], "lost: i" .. i .. " " .. c) end
    end
    assert.is_true(versions.v1 > 0 and versions.v2 > 0, json.encode(versions))
    assert.is_true(hup_at ~= nil)
    assert.are.equal(2, count(log, "thread reloaded: "), log)
    assert.are.equal(1, count(log, "HUP: the script directory loaded"), log)
    assert.are.equal(0, count(log, " error "), log)
    -- the web API (the main VM) answers as before
    local function get(path)
      local _, body = host.sh_out("curl -s -S --max-time 10 http://127.0.0.1:" .. port .. path)
      return body
    end
    local body = get("/api/v1/stats")
    assert.are.equal(0, json.decode(body).by_worker.W.length, body)
    assert.truthy(get("/metrics"):find("luakiq_", 1, true))
    -- the process stops as ever
    assert.is_true(proc:signal("TERM"))
    assert.are.equal(0, proc:wait(10), proc:log())
  end)

  it("keeps the old code when the new files do not load (one line each), and a later good reload works", function()
    start()
    local bad = {
      { "workers/W.lua", "return { perform = function(batch) end", "W.lua:%d+: .*expected" },
      { "workers/W.lua", "error('no database here')", "W.lua:1: no database here" },
      { "config.lua", "return { threads_per_node = 2, poll_intervall = 0.2 }", "config.lua: unknown key 'poll_intervall'" },
    }
    local c = 0
    for n, b in ipairs(bad) do
      local file, text, want = b[1], b[2], b[3]
      host.write(dir .. "/" .. file, text)
      assert.is_true(proc:signal("HUP"))
      local line = host.eventually(function()
        local log = proc:log()
        return count(log, "HUP: reload failed: ") == n and log:match("[^\n]*HUP: reload failed: [^\n]*")
      end, 10, "the failure line")
      assert.truthy(proc:log():match("HUP: reload failed: [^\n]*" .. want), proc:log())
      assert.truthy(line:match("the old code keeps running$"), line)
      -- the old code runs on
      c = c + 1
      round(edir, c, 5)
      local list = drained(5 * c)
      assert.are.equal(5 * c, #list)
      for _, r in ipairs(list) do assert.are.equal("v1", r.version) end
      assert.is_true(proc:alive())
      host.write(dir .. "/config.lua", CONFIG)
      host.write(dir .. "/workers/W.lua", worker("v2"))
    end
    local log = proc:log()
    assert.are.equal(#bad, count(log, " error "), log) -- nothing else complained
    assert.are.equal(0, count(log, "thread reloaded"), log)
    host.write(dir .. "/workers/W.lua", worker("v2"))
    assert.is_true(proc:signal("HUP"))
    reloaded()
    round(edir, 100, 5)
    local list = drained(5 * c + 5)
    for i = 5 * c + 1, #list do assert.are.equal("v2", list[i].version) end
  end)

  -- The check loads DIR on the main thread: a file that never finishes
  -- loading must not freeze the main loop (signals, lease renewals, the
  -- watchdog). Its load is bounded (interpreted, a hook with a deadline)
  -- and a TERM that comes meanwhile ends it at once.
  it("bounds a load that never ends: one line, the old code runs on, and a TERM during it stops the host", function()
    start()
    host.write(dir .. "/workers/W.lua", "local x = 0 while true do x = x + 1 end")
    local t0 = core.now()
    assert.is_true(proc:signal("HUP"))
    local line = host.eventually(function() return proc:log():match("[^\n]*HUP: reload failed: [^\n]*") end, 15,
      "the failure line", function() return proc:log() end)
    assert.is_true(core.now() - t0 < 8, ("the check ended %.1f s after the HUP"):format(core.now() - t0))
    assert.truthy(line:find("W%.lua:1: loading took longer than 5 s"), line)
    assert.truthy(line:match("the old code keeps running$"), line)
    round(edir, 1, 5)
    for _, r in ipairs(drained(5)) do assert.are.equal("v1", r.version) end
    -- (with a pcall around the loop, and a TERM while it spins)
    host.write(dir .. "/workers/W.lua", "while true do pcall(function() while true do end end) end")
    assert.is_true(proc:signal("HUP"))
    core.sleep(0.5)
    t0 = core.now()
    assert.is_true(proc:signal("TERM"))
    assert.are.equal(0, proc:wait(5), proc:log())
    assert.is_true(core.now() - t0 < 3, ("TERM took %.1f s"):format(core.now() - t0))
    assert.are.equal(2, count(proc:log(), "HUP: reload failed: "), proc:log())
    proc = nil
  end)

  it("refuses what a running host cannot change (shards_count, a worker added, threads_per_node) with one line", function()
    start()
    local cases = {
      -- (a restart alone is refused too when shards_count changed: the line says what applies it)
      { function() host.write(dir .. "/workers/W.lua", worker("v2", 8)) end,
        "reload refused: [^\n]*W%.lua: shards_count changed from 4 to 8; the old code keeps running %(a restart " ..
        "applies it only after luakiq reshard DIR W 8, see docs/configuration.md, 'Changing shards_count'%)\n" },
      { function() host.write(dir .. "/workers/X.lua", "return { perform = function() end }") end,
        "reload refused: worker X was added; the old code keeps running %(a restart applies it%)\n" },
      { function() host.write(dir .. "/config.lua", "return { threads_per_node = 3, poll_interval = 0.2 }") end,
        "reload refused: config.lua: threads_per_node changed; the old code keeps running %(a restart applies it%)\n" },
    }
    local c = 0
    for n, case in ipairs(cases) do
      case[1]()
      assert.is_true(proc:signal("HUP"))
      host.eventually(function() return count(proc:log(), "HUP: reload refused: ") == n end, 10, "the refusal")
      assert.truthy(proc:log():match(case[2]), proc:log())
      c = c + 1
      round(edir, c, 5)
      for _, r in ipairs(drained(5 * c)) do assert.are.equal("v1", r.version) end
      host.write(dir .. "/config.lua", CONFIG)
      host.write(dir .. "/workers/W.lua", worker("v2"))
      os.remove(dir .. "/workers/X.lua")
    end
    local log = proc:log()
    assert.are.equal(#cases, count(log, " error "), log)
    assert.are.equal(0, count(log, "thread reloaded"), log)
    assert.is_true(proc:alive())
  end)

  it("never dies of a HUP: before the start, while threads start and while stopping it is ignored with a line", function()
    -- the main VM and each worker thread take 1 s to load W
    host.write(dir .. "/workers/W.lua", [[
local core = require "luakiq.core"
local luakiq = require "luakiq"
core.sleep(1)
return { shards_count = 2, perform = function(batch)
  for id in pairs(batch) do
    if id == "slow" then luakiq.sleep(1) end
    luakiq.redis.call("RPUSH", "t:ran", "v1 " .. id .. " 1")
  end
end }]])
    proc = host.spawn("run " .. q(dir), env())
    core.sleep(0.3)
    assert.is_true(proc:signal("HUP"))
    -- (the second HUP only once the first is logged: two HUPs pending at
    -- once are one signal, which once lost this test its second line)
    host.eventually(function()
      local log = proc:log()
      return log:find(" starting: ", 1, true) and log:find("HUP: ignored: it came before the start", 1, true)
    end, 10, "the start and the first HUP's line")
    assert.is_true(proc:signal("HUP"))
    host.eventually(function() return count(proc:log(), "thread started") == 2 end, 10, "threads started")
    assert.truthy(proc:log():find("HUP: ignored: it came before the start", 1, true), proc:log())
    assert.truthy(proc:log():find("HUP: ignored: the worker threads are still starting", 1, true), proc:log())
    host.enqueue(dir, "W", { { id = "slow", payload = 1 } }, env())
    core.sleep(0.3) -- the call runs
    assert.is_true(proc:signal("TERM"), proc:log())
    core.sleep(0.1)
    assert.is_true(proc:signal("HUP"))
    assert.are.equal(0, proc:wait(10), proc:log())
    local log = proc:log()
    assert.truthy(log:find("HUP: ignored: the host is stopping", 1, true), log)
    assert.are.same({ "v1 slow 1" }, srv.conn:call("LRANGE", "t:ran", 0, -1))
  end)
end)
