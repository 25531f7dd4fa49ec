-- Calls in flight (docs/architecture.md, "Calls in flight"): a perform call
-- that waits in luakiq's I/O parks, and its thread runs other shards' calls
-- meanwhile. The real binary and a real redis-server; every call records its
-- shard, start and end, so the specs check both the overlap they expect
-- (across shards) and the one they forbid (within a shard).
local json = require "luakiq.json"
local host = require "helpers.host"
local q = host.quote

local srv, env = host.fixture()

local SLEEPY = [[
local luakiq = require "luakiq"
local core = require "luakiq.core"
local SHARDS = %d
return {
  shards_count = SHARDS, timeout = %s, %s
  perform = function(batch)
    for id, payloads in pairs(batch) do
      local shard = core.crc32(id) %% SHARDS
      local t0 = luakiq.now()
      luakiq.redis.call("RPUSH", "t:start", id)
      luakiq.sleep(%s)
      luakiq.redis.call("RPUSH", "t:calls", luakiq.json.encode {
        id = id, shard = shard, t0 = t0, t1 = luakiq.now(), n = #payloads, p = payloads[1],
      })
    end
  end,
}
]]

local function scriptdir(opts)
  return host.scriptdir {
    ["config.lua"] = ("return { threads_per_node = 1, poll_interval = 0.2, lease_ttl = 30, dump_path = %q }")
      :format(opts.dump or "/dev/null"),
    ["workers/Sleepy.lua"] = SLEEPY:format(opts.shards, opts.timeout or 30, opts.extra or "", opts.sleep),
  }
end

local function enqueue(dir, jobs) host.enqueue(dir, "Sleepy", jobs, env()) end
local function calls() return srv:json_list("t:calls") end

-- (on a time-out, the error says how far the calls got and what the host
-- logged: a stall under CI load is then diagnosable from its output)
local proc
local function wait_calls(n, timeout)
  return host.eventually(function()
    local c = calls()
    return #c >= n and c
  end, timeout, n .. " calls", function()
    return ("%d started, %d ended; host log:\n%s"):format(srv.conn:call("LLEN", "t:start"),
      srv.conn:call("LLEN", "t:calls"), proc and proc:log() or "(no host)")
  end)
end

-- Greatest number of calls running at one moment.
local function max_overlap(list)
  local ev = {}
  for _, c in ipairs(list) do
    ev[#ev + 1] = { c.t0, 1 }
    ev[#ev + 1] = { c.t1, -1 }
  end
  table.sort(ev, function(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2]) end)
  local cur, best = 0, 0
  for _, e in ipairs(ev) do
    cur = cur + e[2]
    if cur > best then best = cur end
  end
  return best
end

-- Calls of one shard never overlap (per-id order and exclusion).
local function assert_shards_serial(list)
  local by = {}
  for _, c in ipairs(list) do
    by[c.shard] = by[c.shard] or {}
    table.insert(by[c.shard], c)
  end
  for shard, cs in pairs(by) do
    table.sort(cs, function(a, b) return a.t0 < b.t0 end)
    for i = 2, #cs do
      assert.is_true(cs[i].t0 >= cs[i - 1].t1,
        ("shard %d: %s started at %.3f before %s ended at %.3f"):format(shard, cs[i].id, cs[i].t0, cs[i - 1].id, cs[i - 1].t1))
    end
  end
end

local dir
host.stop_after_each(function() return proc, dir end)
before_each(function() srv.conn:call("FLUSHALL") end)

describe("calls in flight", function()
  it("one thread runs many shards' sleeping calls at once, one call per shard at a time", function()
    dir = scriptdir { shards = 20, sleep = 0.5 }
    local jobs = {}
    for i = 1, 60 do jobs[i] = { id = "j" .. i } end
    enqueue(dir, jobs)
    local t0 = os.time()
    proc = host.spawn("run " .. q(dir), env())
    local list = wait_calls(60, 20)
    local first, last = math.huge, 0
    for _, c in ipairs(list) do
      first, last = math.min(first, c.t0), math.max(last, c.t1)
    end
    -- 60 calls of 0.5 s, one thread: 30 s one at a time; with 20 shards in
    -- flight at most 3 rounds of ~0.5 s each (some shards hold more ids)
    assert.is_true(last - first < 6, ("60 calls took %.2f s"):format(last - first))
    assert.is_true(max_overlap(list) >= 10, "overlap " .. max_overlap(list))
    assert_shards_serial(list)
    assert.is_true(os.time() - t0 < 20)
  end)

  it("keeps each id's payloads in order and merges what waits behind a parked call", function()
    dir = scriptdir { shards = 4, sleep = 0.3, extra = "batch_size = 1," }
    proc = host.spawn("run " .. q(dir), env())
    enqueue(dir, { { id = "o", payload = "1" } })
    host.eventually(function() return srv.conn:call("LLEN", "t:start") == 1 end, 10, "o started")
    -- while "o" is parked in its sleep, two more payloads arrive: they wait
    -- and run in one later call, in their order
    enqueue(dir, { { id = "o", payload = "2" }, { id = "o", payload = "3" } })
    local list = wait_calls(2, 10)
    table.sort(list, function(a, b) return a.t0 < b.t0 end)
    assert.are.equal("1", list[1].p)
    assert.are.equal("2", list[2].p)
    assert.are.equal(2, list[2].n)
    assert_shards_serial(list)
  end)

  it("concurrent_shards = 1 runs the worker's calls one at a time", function()
    dir = scriptdir { shards = 8, sleep = 0.2, extra = "concurrent_shards = 1," }
    local jobs = {}
    for i = 1, 8 do jobs[i] = { id = "c" .. i } end
    enqueue(dir, jobs)
    proc = host.spawn("run " .. q(dir), env())
    local list = wait_calls(8, 20)
    assert.are.equal(1, max_overlap(list))
  end)

  it("a parked call still ends at its timeout, and the other shards go on", function()
    dir = scriptdir { shards = 2, sleep = "id == 's0' and 60 or 0.2", timeout = 1 }
    -- s0 sleeps past its timeout; an id of the other shard runs beside it
    local core = require "luakiq.core"
    local other
    for i = 1, 200 do
      if core.crc32("s" .. i) % 2 ~= core.crc32("s0") % 2 then other = "s" .. i break end
    end
    enqueue(dir, { { id = "s0" }, { id = other } })
    proc = host.spawn("run " .. q(dir), env())
    local list = wait_calls(1, 10)
    assert.are_not.equal("s0", list[1].id)
    assert.is_true(list[1].t1 - list[1].t0 < 1)
    local dead = host.eventually(function()
      local rc, out = host.exec("jobs " .. q(dir) .. " Sleepy queue", nil, env())
      return rc == 0 and out:find('"s0"', 1, true) and out
    end, 10, "s0 failed")
    assert.truthy(dead:find("timeout", 1, true), dead)
  end)

  it("parked calls show in TTIN, the dashboard's calls and /metrics, and keep their leases", function()
    local web = require "web.support"
    local dump = host.tmpdir() .. "/dump.txt"
    dir = scriptdir { shards = 4, sleep = 4, dump = dump }
    -- lease_ttl 2 s: the parked calls outlive it, so the main thread must renew their shards
    host.write(dir .. "/config.lua", ("return { threads_per_node = 1, poll_interval = 0.2, lease_ttl = 2, " ..
      "lease_renew = 0.5, dump_path = %q }"):format(dump))
    local jobs = {}
    for i = 1, 4 do jobs[i] = { id = "v" .. i } end
    enqueue(dir, jobs)
    local base
    proc, base = web.start(dir, env())
    host.eventually(function() return srv.conn:call("LLEN", "t:start") >= 3 end, 10, "calls parked")
    host.sh("sleep 2.5") -- past lease_ttl
    proc:signal("TTIN")
    local text = host.eventually(function() return host.read(dump) end, 5, "dump file")
    local parked = 0
    for _ in text:gmatch("\nparked: Sleepy shard %d+, ids v%d+: running %d+%.%d+ s of its timeout 30%.000 s") do
      parked = parked + 1
    end
    assert.is_true(parked >= 3, text)
    local st, _, v = web.request(base, "GET", "/api/web/dashboard")
    assert.are.equal(200, st)
    local waiting = 0
    for _, c in ipairs(v.calls) do
      if c.waiting and c.worker == "Sleepy" and c.running > 2 then waiting = waiting + 1 end
    end
    assert.is_true(waiting >= 3, json.encode(v.calls))
    local _, metrics = web.request(base, "GET", "/metrics")
    local age = tonumber(metrics:match('luakiq_oldest_call_seconds{worker="Sleepy"} ([%d.]+)'))
    assert.is_true(age and age > 2, metrics)
    -- the lease of every shard with a parked call is still this host's: none
    -- lapsed while its call waited
    local core = require "luakiq.core"
    for _, id in ipairs(srv.conn:call("LRANGE", "t:start", 0, -1)) do
      local shard = core.crc32(id) % 4
      assert.truthy(srv.conn:call("GET", "luakiq:{Sleepy:" .. shard .. "}:lease"), "lease of shard " .. shard)
    end
    local list = wait_calls(4, 10)
    assert_shards_serial(list)
    host.sh("rm -rf " .. q(dump:match("^(.*)/")))
  end)

  it("TERM lets the parked calls finish and ack, then exits 0", function()
    dir = scriptdir { shards = 10, sleep = 1.5 }
    local jobs = {}
    for i = 1, 10 do jobs[i] = { id = "t" .. i } end
    enqueue(dir, jobs)
    proc = host.spawn("run " .. q(dir), env())
    host.eventually(function() return srv.conn:call("LLEN", "t:start") >= 5 end, 10, "calls running")
    proc:signal("TERM")
    assert.are.equal(0, proc:wait(10))
    -- every call that started finished (none cut off) and was acked: nothing
    -- left in flight, nothing run twice, the rest still queued
    local started = srv.conn:call("LRANGE", "t:start", 0, -1)
    local list = calls()
    assert.are.equal(#started, #list)
    local done = {}
    for _, c in ipairs(list) do
      assert.is_nil(done[c.id], c.id .. " ran twice")
      done[c.id] = true
    end
    local rc, out, err = host.exec("jobs " .. q(dir) .. " Sleepy busy", nil, env())
    assert.are.equal(0, rc, err)
    assert.are.equal("", out)
    rc, out = host.exec("jobs " .. q(dir) .. " Sleepy queue", nil, env())
    local queued = 0
    for _ in out:gmatch("[^\n]+") do queued = queued + 1 end
    assert.are.equal(10 - #list, queued)
  end)
end)
