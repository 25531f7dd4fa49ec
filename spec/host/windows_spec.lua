-- Time windows (worker keys windows, timezone) on an injected clock
-- (LUAKIQ_CLOCK_OFFSET shifts core.now for the host and the CLI alike), so
-- the spec runs at 09:59:57 in Berlin without waiting for it.
local core = require "luakiq.core"
local json = require "luakiq.json"
local redis = require "helpers.redis"
local host = require "helpers.host"
local q = host.quote

local srv = redis.fixture()

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
  after_each(function()
    if proc then proc:kill() end
    proc = nil
    host.sh("rm -rf " .. q(dir))
  end)

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
