-- Recurring jobs (config.lua schedules; docs/configuration.md): real hosts,
-- a real Redis. Each host logs "schedule NAME enqueued its job" with the
-- tick when its schedule.lua call claimed and enqueued it.
local core = require "luakiq.core"
local json = require "luakiq.json"
local host = require "helpers.host"
local q = host.quote

local srv, env = host.fixture()

local WORKER = [[
local luakiq = require "luakiq"
return {
  shards_count = 4,
  perform = function(batch)
    for id, ps in pairs(batch) do luakiq.redis.call("RPUSH", "t:ran", id .. "=" .. luakiq.json.encode(ps)) end
  end,
}
]]

local function scriptdir(schedules)
  return host.scriptdir {
    ["config.lua"] = "return { threads_per_node = 2, poll_interval = 1, schedules = " .. schedules .. " }",
    ["workers/W.lua"] = WORKER,
  }
end

-- tick -> how many hosts logged enqueuing it
local function enqueued(procs)
  local by_tick = {}
  for _, p in ipairs(procs) do
    for line in p:log():gmatch("[^\n]*schedule every1 enqueued its job[^\n]*") do
      local tick = tonumber(line:match('"tick":"([^"]+)"'))
      by_tick[tick] = (by_tick[tick] or 0) + 1
    end
  end
  return by_tick
end

describe("schedules", function()
  local dir, procs = nil, {}
  host.stop_after_each(function() return procs, dir end)

  it("every = 1 with 3 hosts for 5 s: one job per tick, none twice", function()
    dir = scriptdir([[{ { name = "every1", worker = "W", id = "tick", payload = { job = "report" }, every = 1 } }]])
    local t0 = core.now()
    for i = 1, 3 do procs[i] = host.spawn("run " .. q(dir), env()) end
    core.sleep(5.5)
    for _, p in ipairs(procs) do p:signal("TERM") end
    for _, p in ipairs(procs) do p:wait(10) end
    local span = core.now() - t0 -- the hosts tick until they have stopped
    local by_tick, n = enqueued(procs), 0
    for tick, count in pairs(by_tick) do
      assert.are.equal(1, count, "tick " .. tick .. " enqueued " .. count .. " times")
      assert.are.equal(0, tick % 1)
      n = n + 1
    end
    -- (+2: the tick just before the start fires too, a new schedule's first)
    assert.is_true(n >= 4 and n <= span + 2, ("%d ticks in %.1f s"):format(n, span))
    -- the jobs ran, never more often than ticks were enqueued (a tick enqueued
    -- while the hosts stopped may wait; the same id merges into a waiting job)
    local ran = srv.conn:call("LRANGE", "t:ran", 0, -1)
    assert.is_true(#ran >= 3 and #ran <= n, #ran .. " runs for " .. n .. " ticks")
    assert.are.equal('tick=[{"job":"report"}]', ran[1])
  end)

  it("fires a tick missed while no host ran once, at start; not again after a restart", function()
    dir = scriptdir([[{ { name = "hourly", worker = "W", id = "h", every = 3600 } }]])
    local now = core.now()
    local tick = math.floor(now / 3600) * 3600
    -- a host ran the previous tick, then every host was down for this one
    local P = "luakiq:{W:" .. core.crc32("h") % 4 .. "}:"
    srv.conn:call("HSET", P .. "schedules", "hourly", tick - 3600)
    procs[1] = host.spawn("run " .. q(dir), env())
    host.eventually(function() return srv.conn:call("LLEN", "t:ran") == 1 end, 10, "the missed tick ran")
    assert.are.equal(tostring(tick), srv.conn:call("HGET", P .. "schedules", "hourly"))
    procs[1]:signal("TERM")
    procs[1]:wait(10)
    procs[2] = host.spawn("run " .. q(dir), env())
    core.sleep(1.5)
    assert.are.equal(1, srv.conn:call("LLEN", "t:ran"))
    -- luakiq schedules lists its last and next ticks
    local rc, out, err = host.exec("schedules " .. q(dir), nil, env())
    assert.are.equal(0, rc, err)
    local s = json.decode(out)
    assert.are.same({ name = "hourly", worker = "W", id = "h", every = 3600, last = tick, next = tick + 3600 }, s)
  end)

  it("a new schedule does not fire a tick from before it existed", function()
    dir = scriptdir([[{ { name = "daily", worker = "W", id = "d", cron = "0 0 * * *" } }]])
    procs[1] = host.spawn("run " .. q(dir), env())
    core.sleep(1.5)
    assert.are.equal(0, srv.conn:call("LLEN", "t:ran"))
    local rc, out = host.exec("schedules " .. q(dir), nil, env())
    assert.are.equal(0, rc)
    local s = json.decode(out)
    assert.are.equal("UTC", s.timezone)
    assert.are.equal(0, s.next % 86400)
    assert.is_true(s.next > core.now())
  end)

  it("refuses bad schedules at load with one line naming the schedule (exit 2)", function()
    for src, want in pairs {
      ['{ { name = "n", worker = "W", id = "x", cron = "61 * * * *" } }'] = "schedules[1] ('n'): bad cron '61 * * * *': minute '61' is not in 0-59",
      ['{ { name = "n", worker = "Nope", id = "x", every = 5 } }'] = "schedules[1] ('n'): unknown worker 'Nope'",
      ['{ { name = "n", worker = "W", id = "x", every = 5, cron = "* * * * *" } }'] = "give either cron or every",
      ['{ { name = "n", worker = "W", id = "x", cron = "* * * * *", timezone = "Mars/Base" } }'] = "timezone 'Mars/Base': no such time zone",
      ['{ { name = "n", worker = "W", id = "x", every = 0.5 } }'] = "every must be a number >= 1",
      ['{ { name = "n", worker = "W", id = "x", every = 5, when = 1 } }'] = "unknown key 'when'",
      -- a payload dump_payload cannot dump would morgue a job at every tick
      ['{ { name = "n", worker = "W", id = "x", every = 5, payload = { f = print } } }'] =
        "schedules[1] ('n'): payload cannot be dumped (dump_payload): json: cannot encode a function at $.f",
      ['{ { name = "n", worker = "W", id = "x", every = 5, payload = 0/0 } }'] =
        "schedules[1] ('n'): payload cannot be dumped (dump_payload): json: cannot encode NaN/inf at $",
    } do
      local d = scriptdir(src)
      local rc, _, err = host.exec("plan " .. q(d))
      host.sh("rm -rf " .. q(d))
      assert.are.equal(2, rc, src .. ": " .. err)
      assert.truthy(err:find(want, 1, true), err)
      assert.are.equal(1, select(2, err:gsub("\n", "")), err)
    end
  end)
end)
