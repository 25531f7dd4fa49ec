-- Timing (issue 15, item 1): wait and run times per worker per UTC day,
-- written by a real host into Redis and read back through `luakiq timing`,
-- GET /api/v1/workers/NAME/timing and /metrics (checked by promtool). The
-- clock is injected (LUAKIQ_CLOCK_OFFSET) so the day is a known one and the
-- waits are hours long without waiting for them.
local core = require "luakiq.core"
local json = require "luakiq.json"
local host = require "helpers.host"
local web = require "web.support"
local timing = require "luakiq.ops.timing"
local q = host.quote

local srv = host.fixture()

-- Each job's payload says how long its call sleeps (batch_size 1: one job,
-- one call).
local WORKER = [[
local luakiq = require "luakiq"
return {
  shards_count = 2, batch_size = 1,
  perform = function(batch)
    for id, payloads in pairs(batch) do
      luakiq.sleep(payloads[1].sleep)
      luakiq.redis.call("RPUSH", "t:ran", id)
    end
  end,
}
]]

local DAY = "2030-03-10"
local NOON = timing.day_start(DAY) + 12 * 3600

local function env_at(at)
  return "REDIS_URL=" .. srv.url .. " LUAKIQ_CLOCK_OFFSET=" .. string.format("%.3f", at - core.now())
end

describe("timing", function()
  local dir, proc
  before_each(function()
    dir = host.scriptdir { ["config.lua"] = "return { threads_per_node = 1, poll_interval = 0.2 }",
                           ["workers/T.lua"] = WORKER }
  end)
  host.stop_after_each(function() return proc, dir end)

  it("counts, means, deviations and buckets of known waits and runs, by CLI, API and /metrics", function()
    local env = env_at(NOON)
    -- 3 jobs due 3 h ago (wait bucket 3-4 h), 2 due 90 s ago (2nd minute);
    -- calls of 0.3 s (0.25-0.5 s), 0.06 s (0.05-0.1 s) and 1.2 s (1-2 s)
    local jobs = {
      { id = "a", perform_in = NOON - 3 * 3600, payload = { sleep = 0.3 } },
      { id = "b", perform_in = NOON - 3 * 3600, payload = { sleep = 0.06 } },
      { id = "c", perform_in = NOON - 3 * 3600, payload = { sleep = 0.06 } },
      { id = "d", perform_in = NOON - 90, payload = { sleep = 1.2 } },
      { id = "e", perform_in = NOON - 90, payload = { sleep = 0.3 } },
    }
    host.enqueue(dir, "T", jobs, env)
    local port = core.free_port()
    proc = host.spawn("run " .. q(dir) .. " --web 127.0.0.1:" .. port, env)
    host.eventually(function() return srv.conn:call("LLEN", "t:ran") == 5 end, 20, "5 jobs ran")
    local rc, out, err
    local rep = host.eventually(function()
      rc, out, err = host.exec("timing " .. q(dir) .. " T", nil, env)
      assert.are.equal(0, rc, err)
      local r = json.decode(out)
      return r.run.count == 5 and r
    end, 10, "the thread wrote its timing")
    assert.are.equal(DAY, rep.day)
    assert.are.equal("T", rep.worker)
    -- waits: the fetches came a few seconds after NOON (the host's start)
    assert.are.equal(5, rep.wait.count)
    local late = rep.wait.mean - (3 * 10800 + 2 * 90) / 5
    assert.is_true(late >= 0 and late < 15, "mean wait off by " .. late)
    local exact_std = math.sqrt((3 * 10800 ^ 2 + 2 * 90 ^ 2) / 5 - ((3 * 10800 + 2 * 90) / 5) ^ 2)
    assert.is_true(math.abs(rep.wait.std - exact_std) < 10, "std " .. rep.wait.std .. " vs " .. exact_std)
    assert.are.same({ { from = 60, to = 120, count = 2 }, { from = 10800, to = 14400, count = 3 } }, rep.wait.histogram)
    -- runs
    local runs = 0.3 + 0.06 + 0.06 + 1.2 + 0.3
    assert.is_true(rep.run.sum >= runs and rep.run.sum < runs + 0.5, "run sum " .. rep.run.sum)
    assert.is_true(math.abs(rep.run.mean - rep.run.sum / 5) < 1e-9)
    assert.are.same({ { from = 0.05, to = 0.1, count = 2 }, { from = 0.25, to = 0.5, count = 2 },
                      { from = 1, to = 2, count = 1 } }, rep.run.histogram)
    -- another day has nothing; a bad day is bad input (exit 2, one line)
    local _, other = host.exec("timing " .. q(dir) .. " T --day 2030-03-09", nil, env)
    assert.are.same({ count = 0, mean = 0, std = 0, sum = 0, histogram = {} }, json.decode(other).wait)
    rc, _, err = host.exec("timing " .. q(dir) .. " T --day 2030-02-30", nil, env)
    assert.are.equal(2, rc)
    assert.truthy(err:match("^luakiq: day must be YYYY%-MM%-DD, got '2030%-02%-30'\n$"), err)
    rc, _, err = host.exec("timing " .. q(dir) .. " Nope", nil, env)
    assert.are.equal(2, rc)
    assert.truthy(err:match("unknown worker"), err)
    -- kept 30 days after the day (histograms 7): Redis's own expiry times
    local ks, kh = "luakiq:{T}:timing:" .. DAY, "luakiq:{T}:timing:" .. DAY .. ":h"
    local start = timing.day_start(DAY)
    assert.are.equal(start + 31 * 86400, srv.conn:call("EXPIRETIME", ks))
    assert.are.equal(start + 8 * 86400, srv.conn:call("EXPIRETIME", kh))
    -- the API answers the same
    local base = "http://127.0.0.1:" .. port
    local st, text, v = web.request(base, "GET", "/api/v1/workers/T/timing?day=" .. DAY)
    assert.are.equal(200, st, text)
    assert.are.same(json.decode(out), v)
    assert.are.equal(400, (web.request(base, "GET", "/api/v1/workers/T/timing?day=yesterday")))
    assert.are.equal(404, (web.request(base, "GET", "/api/v1/workers/Nope/timing")))
    -- /metrics: cumulative buckets at the Prometheus bounds, today's day
    local _, metrics = web.request(base, "GET", "/metrics")
    local function sample(line) return tonumber(metrics:match(line:gsub("[%-%.%+%[%]%(%)%$%^%%%?%*]", "%%%0") .. " (%S+)")) end
    assert.are.equal(0, sample('luakiq_job_wait_seconds_bucket{worker="T",le="60"}'))
    assert.are.equal(2, sample('luakiq_job_wait_seconds_bucket{worker="T",le="300"}'))
    assert.are.equal(2, sample('luakiq_job_wait_seconds_bucket{worker="T",le="3600"}'))
    assert.are.equal(5, sample('luakiq_job_wait_seconds_bucket{worker="T",le="21600"}'))
    assert.are.equal(5, sample('luakiq_job_wait_seconds_bucket{worker="T",le="+Inf"}'))
    assert.are.equal(5, sample('luakiq_job_wait_seconds_count{worker="T"}'))
    assert.are.equal(0, sample('luakiq_job_run_seconds_bucket{worker="T",le="0.05"}'))
    assert.are.equal(2, sample('luakiq_job_run_seconds_bucket{worker="T",le="0.1"}'))
    assert.are.equal(4, sample('luakiq_job_run_seconds_bucket{worker="T",le="0.5"}'))
    assert.are.equal(4, sample('luakiq_job_run_seconds_bucket{worker="T",le="1"}'))
    assert.are.equal(5, sample('luakiq_job_run_seconds_bucket{worker="T",le="5"}'))
    web.promtool_check(metrics)
    -- the dashboard's Timing tab, in headless Chromium
    web.browser_test("timing", base, "T", DAY,
      json.encode { wait = { count = 5, rows = { 120, 14400 } }, run = { count = 5, rows = { 0.1, 0.5, 2 } } })
  end)

  it("history: jobs processed and failed per minute, by API and on the dashboard's chart", function()
    -- a worker of its own: payload "fail" fails for good (max_retry_count 0)
    host.write(dir .. "/workers/H.lua", [[
return {
  shards_count = 1, batch_size = 1, max_retry_count = 0,
  perform = function(batch)
    for _, payloads in pairs(batch) do if payloads[1] == "fail" then error("no") end end
  end,
}]])
    local at = NOON + 30 -- 12:00:30 of DAY
    local env = env_at(at)
    host.enqueue(dir, "H", { { id = "1", payload = "ok" }, { id = "2", payload = "ok" }, { id = "3", payload = "ok" },
                             { id = "4", payload = "fail" }, { id = "5", payload = "fail" } }, env)
    local port = core.free_port()
    proc = host.spawn("run " .. q(dir) .. " --web 127.0.0.1:" .. port, env)
    local base = "http://127.0.0.1:" .. port
    local v = host.eventually(function()
      local okr, st, _, hv = pcall(web.request, base, "GET", "/api/v1/history?minutes=5")
      if not okr or st ~= 200 then return nil end
      local sum = 0
      for _, n in ipairs(hv.by_worker.H.processed) do sum = sum + n end
      for _, n in ipairs(hv.by_worker.H.failed) do sum = sum + n end
      return sum == 5 and hv
    end, 15, "5 jobs in the history")
    -- 5 points of a minute each, the last the current minute
    assert.are.equal(60, v.step)
    assert.are.equal(5, #v.total.processed)
    local minute = math.floor((at + 0) / 60) * 60
    assert.is_true(v.from == minute - 4 * 60 or v.from == minute - 3 * 60, "from " .. v.from) -- (a minute may pass)
    local p, f = 0, 0
    for i = 1, 5 do p, f = p + v.by_worker.H.processed[i], f + v.by_worker.H.failed[i] end
    assert.are.same({ 3, 2 }, { p, f })
    assert.are.same(v.by_worker.H, v.total) -- T did nothing
    assert.are.same({ 0, 0, 0, 0, 0 }, v.by_worker.T.processed)
    -- steps sum minutes: the last 7 days in hours
    local _, _, week = web.request(base, "GET", "/api/v1/history?minutes=10080&step=60")
    assert.are.equal(168, #week.total.processed)
    assert.are.equal(3600, week.step)
    local wp = 0
    for _, n in ipairs(week.total.processed) do wp = wp + n end
    assert.are.equal(3, wp)
    -- kept 7 days (the key expires 8 days after its day began)
    assert.are.equal(timing.day_start(DAY) + 8 * 86400, srv.conn:call("EXPIRETIME", "luakiq:{H}:history:" .. DAY))
    -- bad parameters
    for _, bad in ipairs { "minutes=0", "minutes=10081", "minutes=x", "step=0", "step=1441", "minutes=1.5" } do
      local st, text = web.request(base, "GET", "/api/v1/history?" .. bad)
      assert.are.equal(400, st, bad .. ": " .. text)
    end
    web.browser_test("history", base, 3, 2)
  end)
end)
