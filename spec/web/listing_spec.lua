-- Deep listings must not starve GET /metrics (issue 38, item 13): the web
-- thread answers one request at a time, so an offset walk linear in its
-- depth held every other request behind it (five at offset 900,000 of 1M
-- jobs: /metrics took 38.5 s). An offset is now capped at 5000 (a 400 that
-- points to the cursor; a walk that deep is one step of 1000 sort keys per
-- shard, ~0.15 s), and a cursor page costs the same at any depth. A real
-- host with 50,000 jobs, five deep requests at once, /metrics timed
-- meanwhile: 5.45 s before the cap at offset 45,000 (2 cores, loaded), 0.00
-- s after; 1.16 s behind five listings at the cap.
local core = require "luakiq.core"
local json = require "luakiq.json"
local redis = require "helpers.redis"
local host = require "helpers.host"
local web = require "web.support"
local q = host.quote

local N = 50000
local srv, dir, proc, base

local function env() return "REDIS_URL=" .. srv.url end

setup(function()
  srv = redis.start()
  dir = web.scriptdir()
  -- N Parked jobs (never processed by this host), not due for a day
  local d = host.tmpdir()
  local f = assert(io.open(d .. "/jobs", "wb"))
  local due = core.now() + 86400
  for i = 1, N do f:write('{"id":"j', i, '","perform_in":', string.format("%.17g", due + i), '}\n') end
  f:close()
  local rc, _, err = host.exec("enqueue " .. q(dir) .. " Parked " .. q(d .. "/jobs"), nil, env())
  assert(rc == 0, err)
  host.sh("rm -rf " .. q(d))
  proc, base = web.start(dir, env())
end)
teardown(function()
  web.stop(proc, dir)
  if srv then srv:stop() end
end)

-- Starts curl on path in the background; returns a function that waits for
-- it and gives its status and seconds.
local function start_get(path)
  local d = host.tmpdir()
  host.sh(("(curl -s -o /dev/null --max-time 120 -w '%%{http_code} %%{time_total}' %s > %s 2>&1; touch %s) &")
    :format(q(base .. path), q(d .. "/out"), q(d .. "/done")))
  return function()
    host.eventually(function() return host.read(d .. "/done") end, 120, path)
    local st, secs = (host.read(d .. "/out") or ""):match("^(%d+) ([%d.]+)")
    host.sh("rm -rf " .. q(d))
    return tonumber(st), tonumber(secs)
  end
end

describe("deep job listings", function()
  it("refuse an offset past the cap with 400 pointing to the cursor, and /metrics stays fast meanwhile", function()
    local deep = "/api/web/workers/Parked/jobs?what=queue&offset=" .. math.floor(N * 0.9)
    local waits = {}
    for i = 1, 5 do waits[i] = start_get(deep) end
    core.sleep(0.05)
    local metrics = start_get("/metrics")
    local st, secs = metrics()
    assert.are.equal(200, st)
    assert.is_true(secs < 1, ("/metrics took %.2f s behind five deep listings"):format(secs))
    for i = 1, 5 do assert.are.equal(400, (waits[i]())) end
    local code, body = web.request(base, "GET", deep)
    assert.are.equal(400, code)
    assert.truthy(body:find("cursor", 1, true), body)
    -- five at the cap (admin.OFFSET_MAX) at once: /metrics waits for them, briefly
    for i = 1, 5 do waits[i] = start_get("/api/web/workers/Parked/jobs?what=queue&offset=5000") end
    core.sleep(0.05)
    st, secs = start_get("/metrics")()
    assert.are.equal(200, st)
    for i = 1, 5 do assert.are.equal(200, (waits[i]())) end
    assert.is_true(secs < 2.5, ("/metrics took %.2f s behind five listings at the cap"):format(secs))
  end)

  it("page by cursor to any depth at the same cost", function()
    local st, _, v = web.request(base, "GET", "/api/web/workers/Parked/jobs?what=queue&offset=5000&limit=500")
    assert.are.equal(200, st)
    assert.are.equal("j5001", v.jobs[1].id)
    for _ = 1, 60 do -- 30,000 deeper
      st, _, v = web.request(base, "GET", "/api/web/workers/Parked/jobs?what=queue&limit=500&cursor=" .. v.next)
      assert.are.equal(200, st)
    end
    assert.are.equal("j35001", v.jobs[1].id)
    local t0 = core.mono()
    st, _, v = web.request(base, "GET", "/api/web/workers/Parked/jobs?what=queue&limit=500&cursor=" .. v.next)
    assert.are.equal(200, st)
    assert.are.equal("j35501", v.jobs[1].id)
    assert.is_true(core.mono() - t0 < 1)
  end)

  it("refuse a negative or too deep --offset in `luakiq jobs` (exit 2, one line)", function()
    for _, off in ipairs { "-1", "1.5", "x", tostring(N) } do
      local rc, out, err = host.exec("jobs " .. q(dir) .. " Parked queue --offset " .. off, nil, env())
      assert.are.equal(2, rc, out)
      assert.is_true(host.one_line(err), err)
      assert.truthy(err:find("offset", 1, true), err)
    end
    local rc, out, err = host.exec("jobs " .. q(dir) .. " Parked queue --offset 5000 --limit 1", nil, env())
    assert.are.equal(0, rc, err)
    assert.are.equal("j5001", json.decode(out).id)
  end)
end)
