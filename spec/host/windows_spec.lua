-- Time windows (worker keys windows, timezone) on an injected clock
-- (LUAKIQ_CLOCK_OFFSET shifts core.now for the host and the CLI alike), so
-- the spec runs at 09:59:57 in Berlin without waiting for it.
local core = require "luakiq.core"
local json = require "luakiq.json"
local host = require "helpers.host"
local q = host.quote

local srv = host.fixture()

local WORKER = [[
local luakiq = require "luakiq"
return {
  shards_count = 2, windows = { "10:00-10:01" }, timezone = "Europe/Berlin",
  perform = function(batch)
    for id in pairs(batch) do luakiq.redis.call("RPUSH", "t:ran", id .. "@" .. luakiq.now()) end
  end,
}
]]

-- env with the clock set so that core.now() is `at` (Unix time) now
local function env_at(at)
  return "REDIS_URL=" .. srv.url .. " LUAKIQ_CLOCK_OFFSET=" .. string.format("%.3f", at - core.now())
end
local OPEN = 1795510800 -- 2026-11-24 10:00:00 CET (09:00:00 UTC)

describe("time windows", function()
  local dir, proc
  before_each(function() dir = host.scriptdir { ["config.lua"] = "return { threads_per_node = 1, poll_interval = 1 }",
                                                  ["workers/W.lua"] = WORKER } end)
  host.stop_after_each(function() return proc, dir end)

  it("a job enqueued before the window is due at its opening and runs then, not before", function()
    local env = env_at(OPEN - 3)
    proc = host.spawn("run " .. q(dir), env)
    host.enqueue(dir, "W", { { id = "a" } }, env)
    local rc, out, err = host.exec("job " .. q(dir) .. " W a", nil, env)
    assert.are.equal(0, rc, err)
    assert.are.equal(OPEN, json.decode(out).perform_in)
    local ran = host.eventually(function() return srv.conn:call("LRANGE", "t:ran", 0, -1)[1] end, 10, "a ran")
    local at = tonumber(ran:match("@(.*)$"))
    assert.is_true(at >= OPEN and at < OPEN + 3, ("ran at %.2f, the window opens at %d"):format(at, OPEN))
  end)

  it("outside its windows a due job waits (no perform, no retry, no error) for the next opening", function()
    local env = env_at(OPEN + 65) -- 10:01:05: closed until tomorrow 10:00
    proc = host.spawn("run " .. q(dir), env)
    host.enqueue(dir, "W", { { id = "b", perform_in = OPEN + 60 } }, env) -- due, explicitly
    core.sleep(2)
    assert.are.equal(0, srv.conn:call("LLEN", "t:ran"))
    local rc, out = host.exec("job " .. q(dir) .. " W b", nil, env)
    assert.are.equal(0, rc)
    local j = json.decode(out)
    assert.are.equal("queued", j.state)
    assert.are.equal(-1, j.retry_count)
    assert.is_nil(j.error)
    -- and without perform_in: due at tomorrow's opening
    host.enqueue(dir, "W", { { id = "c" } }, env)
    local _, out2 = host.exec("job " .. q(dir) .. " W c", nil, env)
    assert.are.equal(OPEN + 86400, json.decode(out2).perform_in)
  end)

  it("refuses a bad window or time zone at load, naming the worker and the string (exit 2)", function()
    for src, want in pairs {
      ['windows = { "25:00-03:00" }'] = "worker W: windows: '25:00-03:00' must be HH:MM-HH:MM",
      ['windows = { "10:00-11:00" }, timezone = "Mars/Base"'] = "worker W: timezone 'Mars/Base': no such time zone",
      ['timezone = "UTC"'] = "worker W: timezone goes with windows",
    } do
      host.refuses_worker(src .. ",", want)
    end
  end)
end)

-- A job's own windows (job fields windows, timezone): the job runs only when
-- they are open (and its worker's, if it has any).
local PLAIN = [[
local luakiq = require "luakiq"
return {
  shards_count = 1,
  perform = function(batch)
    for id in pairs(batch) do luakiq.redis.call("RPUSH", "t:ran", id .. "@" .. luakiq.now()) end
  end,
}
]]

describe("a job's own windows", function()
  local box = host.dir_per_test({ ["config.lua"] = "return { threads_per_node = 1, poll_interval = 1 }",
                                   ["workers/P.lua"] = PLAIN, ["workers/W.lua"] = WORKER },
                                 function() srv.conn:call("DEL", "t:ran") end)

  local function ran()
    local out = {}
    for _, v in ipairs(srv.conn:call("LRANGE", "t:ran", 0, -1)) do
      local id, at = v:match("^(.-)@(.*)$")
      out[id] = tonumber(at)
    end
    return out
  end

  it("are kept by a worker without windows: due at their opening, a due job fetched early goes back to it", function()
    local env = env_at(OPEN - 3)
    host.enqueue(box.dir, "P", {
      { id = "w", windows = { "10:00-10:01" }, timezone = "Europe/Berlin" },               -- due at OPEN
      { id = "early", perform_in = OPEN - 100, windows = { "09:00-09:01" } },               -- UTC: due, closed
      { id = "free" },                                                                       -- runs at once
    }, env)
    local _, out = host.exec("job " .. q(box.dir) .. " P w", nil, env)
    local j = json.decode(out)
    assert.are.equal(OPEN, j.perform_in)
    assert.are.same({ "10:00-10:01" }, j.windows)
    assert.are.equal("Europe/Berlin", j.timezone)
    box.proc = host.spawn("run " .. q(box.dir), env)
    host.eventually(function() return ran().free end, 10, "free ran")
    local r = host.eventually(function() local x = ran() return x.w and x.early and x end, 15, "w and early ran")
    for _, id in ipairs { "w", "early" } do
      assert.is_true(r[id] >= OPEN and r[id] < OPEN + 3, ("%s ran at %.2f, its window opens at %d"):format(id, r[id], OPEN))
    end
    assert.is_true(r.free < OPEN, "free waited for nothing")
    -- requeued, not failed: no retry, no error, each ran once
    -- (perform wrote t:ran before its ack counted it: wait for the count)
    local keys = srv.conn:call("KEYS", "*{P:*counters")
    assert.are.equal(1, #keys)
    host.eventually(function() return srv.conn:call("HGET", keys[1], "processed") == "3" end, 5, "3 processed")
    assert.is_falsy(srv.conn:call("HGET", keys[1], "failed"))
    assert.are.equal(3, srv.conn:call("LLEN", "t:ran"))
  end)

  it("narrow the worker's windows: the job runs when both are open", function()
    local env = env_at(OPEN - 3)
    -- the worker: 10:00-10:01 Berlin (09:00-09:01 UTC); the job: 08:59-09:01
    -- UTC, open now (08:59:57 UTC): both are open at OPEN
    host.enqueue(box.dir, "W", { { id = "both", windows = { "08:59-09:01" }, timezone = "UTC" } }, env)
    local _, out = host.exec("job " .. q(box.dir) .. " W both", nil, env)
    assert.are.equal(OPEN, json.decode(out).perform_in)
    -- windows that never meet the worker's are refused at enqueue
    local rc, _, err = host.exec("enqueue " .. q(box.dir) .. " W", '{"id":"never","windows":["12:00-13:00"],"timezone":"UTC"}',
      env)
    assert.are.equal(2, rc)
    assert.truthy(err:find("line 1 (id never): windows never meet worker W's windows", 1, true), err)
  end)

  it("bad job windows are refused at enqueue with one line (exit 2), nothing enqueued", function()
    for line, want in pairs {
      ['{"id":"a","windows":["25:00-03:00"]}'] = "line 2 (id a): windows: '25:00-03:00' must be HH:MM-HH:MM",
      ['{"id":"a","windows":["10:00-11:00"],"timezone":"Mars/Base"}'] = "line 2 (id a): windows: timezone 'Mars/Base'",
      ['{"id":"a","timezone":"UTC"}'] = "line 2 (id a): timezone goes with windows",
      ['{"id":"a","windows":[]}'] = "line 2 (id a): windows must be a non-empty array",
      ['{"id":"a","windows":"10:00-11:00"}'] = "line 2 (id a): windows must be a non-empty array",
    } do
      local rc, _, err = host.exec("enqueue " .. q(box.dir) .. " P", '{"id":"ok"}\n' .. line, "REDIS_URL=" .. srv.url)
      assert.are.equal(2, rc, line)
      assert.truthy(err:find(want, 1, true), "want '" .. want .. "' in: " .. err)
      assert.are.equal(1, select(2, err:gsub("\n", "")), "one line: " .. err)
    end
    assert.are.equal(0, host.stats(box.dir, "REDIS_URL=" .. srv.url).by_worker.P.length)
  end)
end)
