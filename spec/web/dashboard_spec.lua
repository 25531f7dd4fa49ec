-- The dashboard page in a real headless Chromium (Debian's), driven by
-- playwright-core from tools/web-test: no console errors, the numbers of a
-- seeded host, and a morgue requeue clicked through its confirm() dialog.
local core = require "luakiq.core"
local json = require "luakiq.json"
local keys = require "luakiq.lib.keys"
local redis = require "helpers.redis"
local host = require "helpers.host"
local web = require "web.support"
local q = host.quote

local TOOLS = "tools/web-test"

local function have(cmd) return host.sh("command -v " .. cmd .. " >/dev/null 2>&1") end

-- Runs a shell command; returns its exit code and combined output.
local function run(cmd)
  local p = assert(io.popen("(" .. cmd .. ") 2>&1; echo \"rc=$?\""))
  local out = p:read("*a")
  p:close()
  local rc = tonumber(out:match("rc=(%d+)%s*$"))
  return rc, out:gsub("rc=%d+%s*$", "")
end

local chromium = os.getenv("CHROMIUM") or "/usr/bin/chromium"
local missing = not host.sh("test -x " .. q(chromium)) and "chromium" or not have("node") and "node" or nil

describe("the dashboard in headless Chromium", function()
  if missing then
    pending(missing .. " is not installed (tools/install-deps.sh installs it): dashboard not checked in a browser")
    return
  end

  local srv, dir, proc, base
  setup(function()
    if not host.sh("test -d " .. TOOLS .. "/node_modules/playwright-core") then
      local rc, out = run("cd " .. TOOLS .. " && npm ci --no-audit --no-fund")
      assert(rc == 0, "npm ci in " .. TOOLS .. " failed:\n" .. out)
    end
    srv = redis.start()
    dir = web.scriptdir()
    proc, base = web.start(dir, "REDIS_URL=" .. srv.url)
  end)
  teardown(function()
    web.stop(proc, dir)
    if srv then srv:stop() end
  end)

  it("shows the seeded numbers and requeues a dead job from its page", function()
    local future = core.now() + 86400
    local function post(path, body)
      local st, text = web.request(base, "POST", path, { body = body })
      assert.are.equal(200, st, text)
    end
    -- Parked is never processed by this host, so what the page shows stays put.
    post("/api/v1/workers/Parked/jobs", json.encode {
      { id = "dead1", retry_count = 0, perform_in = future, payload = { order = 1 } },
      { id = "dead2", retry_count = 1, perform_in = future },
    })
    post("/api/web/workers/Parked/queue/kill_failed", "")
    post("/api/v1/workers/Parked/jobs", json.encode {
      { id = "q1", perform_in = future, payload = "<b>not html</b>" },
      { id = "q2", perform_in = future + 1 }, { id = "q3", perform_in = future + 2 },
    })
    local expect = json.encode { workers = { "Flaky", "Parked", "Slow" }, worker = "Parked",
                                 enqueued = 3, dead = 2, dead_id = "dead1" }
    local rc, out = run("CHROMIUM=" .. q(chromium) .. " node " .. TOOLS .. "/dashboard.test.js " .. q(base) .. " " .. q(expect))
    assert.are.equal(0, rc, out)
    assert.truthy(out:find("dashboard: all checks passed", 1, true), out)
    -- and Redis agrees: dead1 is queued again, dead2 still dead
    local st, _, v = web.request(base, "GET", "/api/v1/stats")
    assert.are.equal(200, st)
    assert.are.same({ lag = v.by_worker.Parked.lag, length = 4, morgue_length = 1, expired = 0, waiting = 0 }, v.by_worker.Parked)
  end)

  it("lists the recurring jobs with their next run", function()
    -- the host's thread 0 records the last tick within a second of starting
    host.eventually(function()
      local _, _, v = web.request(base, "GET", "/api/web/dashboard")
      return v and v.schedules[1] and v.schedules[1].last
    end, 10, "the last tick recorded")
    local y = tonumber(os.date("!%Y"))
    local last, nxt = ("%d-01-01 00:00:00.000 UTC"):format(y), ("%d-01-01 00:00:00.000 UTC"):format(y + 1)
    local rc, out = run("CHROMIUM=" .. q(chromium) .. " node " .. TOOLS .. "/schedules.test.js " .. q(base) .. " " ..
      q(last) .. " " .. q(nxt))
    assert.are.equal(0, rc, out)
    assert.truthy(out:find("schedules: all checks passed", 1, true), out)
  end)

  it("pauses and resumes a worker from its queue page", function()
    local rc, out = run("CHROMIUM=" .. q(chromium) .. " node " .. TOOLS .. "/pause.test.js " .. q(base) .. " Parked")
    assert.are.equal(0, rc, out)
    assert.truthy(out:find("pause: all checks passed", 1, true), out)
    local st, _, v = web.request(base, "GET", "/api/v1/stats")
    assert.are.equal(200, st)
    assert.is_nil(v.by_worker.Parked.paused)
  end)

  it("finds a job by id in every worker, and the jobs of a tag (the search box)", function()
    local function post(path, body)
      local st, text = web.request(base, "POST", path, { body = body })
      assert.are.equal(200, st, text)
    end
    srv.conn:call("SET", "web:fail", "1") -- Flaky's job dies at once
    post("/api/v1/workers/Flaky/jobs", json.encode { { id = "sdup", tags = { "green" } } })
    host.eventually(function()
      local _, _, v = web.request(base, "GET", "/api/v1/workers/Flaky/jobs/sdup")
      return v and v.state == "dead"
    end, 15, "Flaky's sdup dead")
    srv.conn:call("DEL", "web:fail")
    post("/api/v1/workers/Parked/jobs", json.encode {
      { id = "sdup", tags = { "green" }, perform_in = core.now() + 86400 },
      { id = "s2", tags = { "green", "blue" }, perform_in = core.now() + 86400 },
    })
    -- a finished job Parked keeps (lib/done.lua's record, as keep_done writes it)
    local P = keys.prefix("luakiq", "Parked", keys.shard("sdone", 3))
    srv.conn:call("HSET", P .. "done", "sdone", '{"state":"done","finished_at":1795431976.5,"attempts":2,"result":{"rows":3}}')
    web.browser_test("search", base, "sdup", "green", "sdone")
    srv.conn:call("DEL", P .. "done")
    post("/api/web/workers/Flaky/morgue/delete", json.encode { ids = { "sdup" } })
    post("/api/web/workers/Parked/queue/delete", json.encode { ids = { "sdup", "s2" } })
  end)

  it("pages a long queue: next by the API's cursor, previous by offset", function()
    local jobs = {}
    for i = 1, 230 do jobs[i] = { id = ("aa%03d"):format(i), perform_in = core.now() + 86400 } end
    local st = web.request(base, "POST", "/api/v1/workers/Parked/jobs", { body = json.encode(jobs) })
    assert.are.equal(200, st)
    web.browser_test("paging", base, "Parked", "aa", 230)
    local ids = {}
    for i = 1, 230 do ids[i] = jobs[i].id end
    st = web.request(base, "POST", "/api/web/workers/Parked/queue/delete", { body = json.encode { ids = ids } })
    assert.are.equal(200, st)
  end)

  it("signs in with the token (an HttpOnly cookie) and out again", function()
    local token = "tok-" .. core.token()
    local token_proc, token_base = web.start(dir, "REDIS_URL=" .. srv.url .. " LUAKIQ_WEB_TOKEN=" .. token)
    local rc, out = run("CHROMIUM=" .. q(chromium) .. " node " .. TOOLS .. "/login.test.js " .. q(token_base) .. " " ..
      q(token))
    web.stop(token_proc)
    assert.are.equal(0, rc, out)
    assert.truthy(out:find("login: all checks passed", 1, true), out)
  end)

  it("lists running calls and highlights one past 80% of its timeout", function()
    -- A host of its own (namespace "late") whose one call waits until its
    -- timeout (10 s) ends it.
    local late_dir = host.scriptdir {
      ["config.lua"] = 'return { namespace = "late", threads_per_node = 1, poll_interval = 0.2 }',
      ["workers/Late.lua"] = [[
local luakiq = require "luakiq"
return { shards_count = 1, timeout = 10, max_retry_count = 0,
         perform = function() while true do luakiq.sleep(0.05) end end }]],
    }
    local late_proc, late_base = web.start(late_dir, "REDIS_URL=" .. srv.url)
    local st, text = web.request(late_base, "POST", "/api/v1/workers/Late/jobs", { body = '{"id":"l1"}' })
    assert.are.equal(200, st, text)
    local rc, out = run("CHROMIUM=" .. q(chromium) .. " node " .. TOOLS .. "/calls.test.js " .. q(late_base) .. " Late")
    web.stop(late_proc, late_dir)
    assert.are.equal(0, rc, out)
    assert.truthy(out:find("calls: all checks passed", 1, true), out)
  end)

  it("shows the jobs that wait for a reply: the Waiting card and cell, the worker's Waiting view, late replies", function()
    -- waits on Parked (never processed here), made through the Redis scripts
    local W = require("helpers.waits").new(srv.conn, require("luakiq.lib.runtime").load(dir), "Parked")
    local late = W:wait("wd")
    local function reply(token, body)
      local st, text = web.request(base, "POST", "/api/v1/replies/" .. token, { body = body })
      return st, text
    end
    assert.are.equal(200, (reply(late.token, "{}")))
    W:handle("wd")
    assert.are.equal(410, (reply(late.token, '{"late":true}')))
    W:wait("wa", { key = "order-7" })
    W:wait("wb")
    local c = W:wait("wc")
    assert.are.equal(200, (reply(c.token, '{"ok":1}')))
    web.browser_test("waiting", base, "Parked", json.encode { waiting = 3, ids = { "wa", "wb", "wc" },
      keys = { wa = "order-7" }, replied = { "wc" }, late = { "wd" } })
  end)
end)
