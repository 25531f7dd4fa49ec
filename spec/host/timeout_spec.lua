-- Worker timeouts end to end (docs/guarantees.md, "Timeouts"): the real
-- binary, a real redis-server, real signals. Each case starts a call that
-- never ends on its own, with timeout = 1 s, and a second job of the same
-- shard behind it. The call must fail with an error starting with "timeout"
-- within timeout + 2 s, and the next job must run a few seconds later; calls
-- that cannot be interrupted (JIT-compiled loops, a blocking foreign call) are
-- ended by replacing the process (same pid), after the other threads finish.
local core = require "luakiq.core"
local json = require "luakiq.json"
local host = require "helpers.host"
local q = host.quote

local srv, env = host.fixture()

local TIMEOUT = 1

-- Stuck: one shard; ids name what the call does. max_retry_count 0: a failed
-- call's job goes to the morgue at once (with its error and updated_at).
-- Every start and finish is recorded as "id@time" (Redis's clock is this machine's).
local STUCK = [[
local luakiq = require "luakiq"
local ffi = require "ffi"
pcall(ffi.cdef, "int poll(void *, unsigned long, int);")
local function inc(x) return x + 1 end
local swallow = function()
  while true do pcall(function() local t = {} for i = 1, 1e9 do t[i % 100 + 1] = i end end) end
end
jit.off(swallow, true) -- interpreted: the hook fires, the pcall catches, the hook fires again
local act = {
  jit = function() local x = 0 while true do x = x + 1 end end,
  calls = function() local x = 0 while true do x = inc(x) end end,
  alloc = function() local t = {} while true do t[#t + 1] = {} if #t > 1000 then t = {} end end end,
  swallow = swallow,
  sleep = function() luakiq.sleep(60) end,
  redis = function() luakiq.redis.call("BLPOP", "t:never", 0) end,
  exec = function() os.execute("sleep 60") end,
  popen = function() io.popen("sleep 20"):read("*a") end,
  poll = function() ffi.C.poll(nil, 0, -1) end,
}
return {
  shards_count = 1, max_retry_count = 0,
  perform = function(batch)
    for id in pairs(batch) do
      luakiq.redis.call("RPUSH", "t:start", id .. "@" .. luakiq.now())
      local f = act[id] or act[id:match("^(%a+)%z") or ""]
      if f then f() end
      luakiq.redis.call("RPUSH", "t:done", id .. "@" .. luakiq.now())
    end
  end,
}
]]

-- Slow: a call of the other thread that is still running when Stuck's call
-- is found stuck; it must finish and be acked (run once) before the replacement.
local SLOW = [[
local luakiq = require "luakiq"
return {
  shards_count = 1, timeout = 30,
  perform = function(batch)
    for id in pairs(batch) do
      luakiq.redis.call("RPUSH", "t:slow", id)
      luakiq.sleep(2.5)
      luakiq.redis.call("RPUSH", "t:slow_done", id)
    end
  end,
}
]]

local function scriptdir()
  return host.scriptdir {
    ["config.lua"] = ("return { threads_per_node = 2, poll_interval = 0.2, timeout = %d, lease_ttl = 30 }"):format(TIMEOUT),
    ["workers/Stuck.lua"] = STUCK,
    ["workers/Slow.lua"] = SLOW,
  }
end

local function enqueue(dir, worker, ids)
  local lines = {}
  for i, id in ipairs(ids) do lines[i] = json.encode { id = id } end
  local rc, _, err = host.exec("enqueue " .. q(dir) .. " " .. worker, table.concat(lines, "\n"), env())
  assert.are.equal(0, rc, err)
end

-- "id@time" entries of list key -> time of id's first entry
local function time_of(key, id)
  for _, e in ipairs(srv.conn:call("LRANGE", key, 0, -1)) do
    local i, t = e:match("^(.-)@(.*)$")
    if i == id then return tonumber(t) end
  end
end

local function morgue(dir, worker)
  local rc, out, err = host.exec("jobs " .. q(dir) .. " " .. worker .. " morgue", nil, env())
  assert.are.equal(0, rc, err)
  local dead = {}
  for line in out:gmatch("[^\n]+") do
    local j = json.decode(line)
    dead[j.id] = j
  end
  return dead
end

-- id -> how many times its call started
local function start_counts()
  local starts = {}
  for _, e in ipairs(srv.conn:call("LRANGE", "t:start", 0, -1)) do
    local i = e:match("^(.-)@")
    starts[i] = (starts[i] or 0) + 1
  end
  return starts
end

local dir, proc
-- Stops the fixture's host once it runs, for a test that starts its own
-- (a TERM before its signal handling is set up ends it by the signal, 143).
local function stop_fixture()
  host.eventually(function() return select(2, proc:log():gsub("thread started", "")) == 2 end, 10,
    "the fixture's host started")
  assert.is_true(proc:signal("TERM"))
  assert.are.equal(0, proc:wait(10), proc:log())
end
before_each(function()
  srv.conn:call("FLUSHALL")
  dir = scriptdir()
  proc = host.spawn("run " .. q(dir), env())
end)
host.stop_after_each(function() return proc, dir end)

-- Runs id, then "next" in the same shard; checks the failure and the next job.
local function expect_timeout(id, replaced)
  enqueue(dir, "Stuck", { id, "next" })
  local started = host.eventually(function() return time_of("t:start", id) end, 10, id .. " started")
  local dead = host.eventually(function() return morgue(dir, "Stuck")[id] end, TIMEOUT + 5, id .. " failed")
  assert.truthy(dead.error:find("^timeout"), dead.error)
  assert.is_true(dead.updated_at - started <= TIMEOUT + 2, ("failed %.2f s after it started"):format(dead.updated_at - started))
  assert.is_true(dead.updated_at - started >= TIMEOUT - 0.05)
  local nxt = host.eventually(function() return time_of("t:done", "next") end, 10, "the next job")
  assert.is_true(nxt - started <= TIMEOUT + 5, ("next job ran %.2f s after"):format(nxt - started))
  assert.is_nil(time_of("t:done", id))
  assert.are.equal(1, #srv.conn:call("LRANGE", "t:start", 0, -1) - 1) -- the stuck call ran once
  local log = proc:log()
  if replaced then
    assert.truthy(log:find("replacing the process (pid " .. proc.pid .. ")", 1, true), log)
    assert.is_true(proc:alive()) -- the same pid serves on
  else
    assert.falsy(log:find("replacing the process", 1, true), log)
  end
  return dead
end

describe("a perform call past its timeout", function()
  it("fails in a pure Lua loop the JIT compiles (the process is replaced)", function()
    expect_timeout("jit", true)
  end)
  -- The main VM fails the stuck call from its record (host/calls.c, from
  -- core.call_begin's arguments): an id with bytes 0 and 1 fails, the job performed before
  -- it in the same fetch stays acked (not run again), the one after it runs.
  it("fails a call the process replacement ends from its record: odd ids, the fetch's earlier job acked", function()
    local id = "jit\0\1\0\2x"
    enqueue(dir, "Stuck", { "aa", id, "next" })
    local dead = host.eventually(function() return morgue(dir, "Stuck")[id] end, TIMEOUT + 8, "the stuck job failed")
    assert.truthy(dead.error:find("^timeout"), dead.error)
    host.eventually(function() return time_of("t:done", "next") end, 10, "the next job")
    local starts = start_counts()
    assert.are.same({ aa = 1, [id] = 1, next = 1 }, starts)
    assert.truthy(proc:log():find("replacing the process", 1, true), proc:log())
  end)
  -- A call parked in luakiq's I/O on the thread that gets stuck goes back
  -- to the queue from its record (not failed: it was waiting), and the job
  -- performed before it in its fetch stays acked: the thread keeps the done
  -- ids per shard apart from the records (host/calls.c, calls_done).
  it("puts a parked call of the replaced thread back, the job done before it in its fetch acked", function()
    stop_fixture()
    dir = host.scriptdir {
      ["config.lua"] = ("return { threads_per_node = 1, poll_interval = 0.2, timeout = %d, lease_ttl = 30 }"):format(TIMEOUT),
      ["workers/Stuck.lua"] = STUCK,
      ["workers/Waiter.lua"] = [[local luakiq = require "luakiq"
        return { shards_count = 1, timeout = 60, perform = function(batch)
          for id in pairs(batch) do
            luakiq.redis.call("RPUSH", "t:start", id .. "@" .. luakiq.now())
            if id == "w2" and luakiq.redis.call("INCR", "t:w2") == 1 then luakiq.sleep(30) end
          end
        end }]],
    }
    proc = host.spawn("run " .. q(dir), env())
    enqueue(dir, "Waiter", { "w1", "w2" })
    host.eventually(function() return time_of("t:start", "w2") end, 10, "w2 parked")
    enqueue(dir, "Stuck", { "jit" })
    host.eventually(function() return morgue(dir, "Stuck").jit end, TIMEOUT + 8, "the stuck job failed")
    host.eventually(function()
      local n = 0
      for _, e in ipairs(srv.conn:call("LRANGE", "t:start", 0, -1)) do n = n + (e:match("^w2@") and 1 or 0) end
      return n == 2
    end, 10, "w2 again")
    local starts = start_counts()
    assert.are.same({ w1 = 1, w2 = 2, jit = 1 }, starts)
    assert.truthy(proc:log():find("replacing the process", 1, true), proc:log())
  end)
  -- The stuck thread's other shards: a fetch that succeeded just before
  -- has its ack pending (it rides on the thread's next call, which never
  -- comes). The replacement sends it and gives those shards' leases back,
  -- so the new process serves them at once and the acked job never runs
  -- again (before: they stalled for lease_ttl, then the job ran twice).
  it("acks the stuck thread's other shards and releases them before replacing the process", function()
    stop_fixture()
    dir = host.scriptdir {
      -- poll_interval 5: a finished fetch's ack waits up to 0.5 s for a ride
      ["config.lua"] = ("return { threads_per_node = 1, poll_interval = 5, timeout = %d, lease_ttl = 30 }"):format(TIMEOUT),
      ["workers/Two.lua"] = (STUCK:gsub("shards_count = 1", "shards_count = 2")),
    }
    local keys = require "luakiq.lib.keys"
    local a, b, later = "a", nil, nil -- b: a stuck id of the other shard; later: a's shard
    for i = 1, 100 do
      if not b and keys.shard("jit\0" .. i, 2) ~= keys.shard(a, 2) then b = "jit\0" .. i end
      if not later and keys.shard("a" .. i, 2) == keys.shard(a, 2) then later = "a" .. i end
    end
    -- both queued before the host starts: a (the older) is fetched first,
    -- then jit, within the 0.5 s a's ack waits
    local now = core.now()
    local rc, _, err = host.exec("enqueue " .. q(dir) .. " Two", json.encode { id = a, perform_in = now - 20 } .. "\n" ..
      json.encode { id = b, perform_in = now - 10 }, env())
    assert.are.equal(0, rc, err)
    proc = host.spawn("run " .. q(dir), env())
    host.eventually(function() return morgue(dir, "Two")[b] end, TIMEOUT + 8, "the stuck job failed")
    host.eventually(function() return proc:log():find("replacing the process", 1, true) end, 5, "the replacement")
    local t0 = core.now()
    enqueue(dir, "Two", { later })
    host.eventually(function() return time_of("t:done", later) end, 5, "a job of the other shard after the replacement",
      function() return proc:log() end)
    assert.is_true(core.now() - t0 < 5)
    local starts = start_counts()
    assert.are.same({ [a] = 1, [b] = 1, [later] = 1 }, starts)
  end)
  it("fails in a loop that calls functions (compiled too: replaced)", function()
    expect_timeout("calls", true)
  end)
  it("fails in an interpreted loop (the hook raises; the process stays)", function()
    expect_timeout("alloc", false)
  end)
  it("fails even when user code pcalls the timeout away (the hook raises again)", function()
    expect_timeout("swallow", false)
  end)
  it("fails while waiting in luakiq.sleep", function()
    local dead = expect_timeout("sleep", false)
    assert.truthy(dead.error:find("past its timeout of 1 s", 1, true), dead.error)
  end)
  it("fails while waiting in luakiq.redis (and the connection is made again)", function()
    local dead = expect_timeout("redis", false)
    assert.truthy(dead.error:find("waiting for Redis", 1, true), dead.error)
  end)
  it("fails in os.execute (its process group is ended)", function()
    expect_timeout("exec", false)
  end)
  -- The stuck thread holds its popen FILE's lock while it reads: the
  -- replacement must take no stdio lock (no fflush(NULL)), or the host
  -- wedges until the child ends, deaf to TERM, serving nothing.
  it("fails in a foreign blocking call: a read from io.popen (replaced; the new process serves, TERM ends it)", function()
    local stuck_at = expect_timeout("popen", true).updated_at
    enqueue(dir, "Slow", { "after" })
    local ran = host.eventually(function()
      return srv.conn:call("LRANGE", "t:slow", 0, -1)[1] == "after" and core.now()
    end, 5, "another shard's job after the replacement", function() return proc:log() end)
    assert.is_true(ran - stuck_at <= 10, ("another shard's job ran %.1f s after"):format(ran - stuck_at))
    proc:signal("TERM")
    assert.are.equal(0, proc:wait(6), proc:log())
    proc = nil
  end)
  it("fails in a foreign blocking call: FFI poll(NULL, 0, -1) (the signal interrupts it)", function()
    expect_timeout("poll", false)
  end)
  it("lets the other threads finish and ack before replacing the process", function()
    enqueue(dir, "Slow", { "s1" })
    host.eventually(function() return #srv.conn:call("LRANGE", "t:slow", 0, -1) == 1 end, 10, "Slow started")
    expect_timeout("jit", true)
    host.eventually(function() return #srv.conn:call("LRANGE", "t:slow_done", 0, -1) == 1 end, 10, "Slow done")
    core.sleep(1)
    assert.are.same({ "s1" }, srv.conn:call("LRANGE", "t:slow", 0, -1)) -- acked: never rerun
  end)
end)

describe("TERM with a call that does not end", function()
  -- popen: the exit takes no stdio lock (the stuck thread holds its FILE's)
  for _, id in ipairs { "jit", "popen" } do
    it("waits at most until the call's timeout, fails it, exits 0 (" .. id .. ")", function()
      enqueue(dir, "Stuck", { id })
      host.eventually(function() return time_of("t:start", id) end, 10, "started")
      proc:signal("TERM")
      local t0 = core.now()
      local rc = proc:wait(TIMEOUT + 5)
      assert.are.equal(0, rc, proc:log())
      assert.is_true(core.now() - t0 <= TIMEOUT + 3)
      assert.truthy(morgue(dir, "Stuck")[id].error:find("^timeout"))
      proc = nil
    end)
  end
  it("exits at once on an INT after the TERM (130)", function()
    enqueue(dir, "Stuck", { "popen" })
    host.eventually(function() return time_of("t:start", "popen") end, 10, "started")
    proc:signal("TERM")
    core.sleep(0.2)
    assert.is_true(proc:alive())
    proc:signal("INT")
    assert.are.equal(130, proc:wait(2))
    proc = nil
  end)
end)
