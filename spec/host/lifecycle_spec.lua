-- rickover's job life cycle (docs/guarantees.md, docs/cli.md): job status by
-- id (CLI and HTTP), delivery = "at_most_once", expires_at. The real binary,
-- a real redis-server, real processes and signals.
local core = require "luakiq.core"
local json = require "luakiq.json"
local host = require "helpers.host"
local q = host.quote

local srv, env = host.fixture()

local function job(dir, worker, id)
  local rc, out, err = host.exec("job " .. q(dir) .. " " .. worker .. " " .. q(id), nil, env())
  return rc, out ~= "" and json.decode(out) or nil, err
end

local function list(dir, worker, what) return host.jobs(dir, worker, what, env()) end
local function stats(dir) return host.stats(dir, env()) end

describe("job status by id", function()
  local dir, proc
  before_each(function()
    srv.conn:call("FLUSHALL")
    -- Slow: "hold" waits in perform until t:release is set; "fail" fails
    dir = host.scriptdir {
      ["config.lua"] = "return { threads_per_node = 1, poll_interval = 0.2 }",
      ["workers/Slow.lua"] = [[
local luakiq = require "luakiq"
return {
  shards_count = 1, max_retry_count = 0,
  perform = function(batch)
    for id in pairs(batch) do
      if id == "fail" then error("it broke", 0) end
      if id == "hold" then
        while not luakiq.redis.call("GET", "t:release") do luakiq.sleep(0.05) end
      end
    end
  end,
}
]],
    }
  end)
  host.stop_after_each(function() return proc, dir end)

  it("reports queued, in_flight (host, running) and dead jobs; an unknown id exits 1", function()
    host.enqueue(dir, "Slow", { { id = "q1", payload = { a = 1 }, score = 5, perform_in = core.now() + 3600 } }, env())
    local rc, j, err = job(dir, "Slow", "q1")
    assert.are.equal(0, rc, err)
    assert.are.equal("queued", j.state)
    assert.are.equal(-1, j.retry_count)
    assert.are.same({ { { a = 1 }, 5 } }, j.payloads)
    assert.is_true(j.perform_in > core.now() + 3000)

    proc = host.spawn("run " .. q(dir), env())
    host.enqueue(dir, "Slow", { { id = "hold", payload = 1 } }, env())
    j = host.eventually(function()
      local _, x = job(dir, "Slow", "hold")
      return x and x.state == "in_flight" and x
    end, 10, "hold in flight")
    assert.are.equal(core.hostname() .. ":" .. proc.pid, j.host)
    assert.is_true(j.running >= 0 and j.fetched_at <= core.now())
    assert.are.same({ { 1, j.payloads[1][2] } }, j.payloads)
    -- a payload pushed meanwhile waits behind the running batch
    host.enqueue(dir, "Slow", { { id = "hold", payload = 2 } }, env())
    core.sleep(1.2)
    _, j = job(dir, "Slow", "hold")
    assert.are.equal("in_flight", j.state)
    assert.is_true(j.running >= 1, "running " .. tostring(j.running))
    assert.are.equal(2, j.queued_payloads[1][1])
    srv.conn:call("SET", "t:release", "1")

    host.enqueue(dir, "Slow", { { id = "fail", payload = 1 } }, env())
    j = host.eventually(function()
      local _, x = job(dir, "Slow", "fail")
      return x and x.state == "dead" and x
    end, 10, "fail dead")
    assert.are.equal("it broke", j.error)
    assert.is_number(j.updated_at)

    local out
    rc, out, err = host.exec("job " .. q(dir) .. " Slow nosuch", nil, env())
    assert.are.equal(1, rc)
    assert.are.equal("", out)
    assert.are.equal("luakiq: job nosuch of Slow not found (not queued, in flight, waiting or dead)\n", err)
    rc, _, err = host.exec("job " .. q(dir) .. " Nope x", nil, env())
    assert.are.equal(2, rc, err)
  end)

  it("GET /api/v1/workers/NAME/jobs/ID answers the same; 404 with {error} for an unknown id", function()
    local port = core.free_port()
    proc = host.spawn("run " .. q(dir) .. " --web 127.0.0.1:" .. port, env())
    host.enqueue(dir, "Slow", { { id = "a b/c", payload = "x", perform_in = core.now() + 3600 } }, env())
    local base = "http://127.0.0.1:" .. port .. "/api/v1/workers/Slow/jobs/"
    host.eventually(function() return host.capture("curl -s -o /dev/null -w '%{http_code}' " .. q(base .. "zz")) == "404" end,
      10, "the listener")
    local body = host.capture("curl -s " .. q(base .. "a%20b%2Fc"))
    local j = json.decode(body)
    local _, cli = job(dir, "Slow", "a b/c")
    assert.are.same(cli, j)
    assert.are.equal("queued", j.state)
    body = host.capture("curl -s -w ' %{http_code}' " .. q(base .. "nosuch"))
    assert.are.equal('{"error":"job nosuch of Slow not found (not queued, in flight, waiting or dead)"} 404', body)
    body = host.capture("curl -s -w ' %{http_code}' " .. q("http://127.0.0.1:" .. port .. "/api/v1/workers/Nope/jobs/x"))
    assert.truthy(body:find(" 404$"), body)
  end)
end)

describe("delivery", function()
  local dir, proc
  -- Once/Least: the same worker at most / at least once. A job records each
  -- start in t:starts:ID; "hold" waits until t:release; "fail" fails.
  local function worker(delivery)
    return ([[
local luakiq = require "luakiq"
return {
  shards_count = 1, delivery = %q, max_retry_count = 5, retry_in = function() return 0.2 end,
  perform = function(batch)
    for id in pairs(batch) do
      luakiq.redis.call("RPUSH", "t:starts:" .. id, luakiq.now())
      if id == "fail" then error("broken", 0) end
      if id == "hold" then
        while not luakiq.redis.call("GET", "t:release") do luakiq.sleep(0.05) end
      end
    end
  end,
}
]]):format(delivery)
  end
  before_each(function()
    srv.conn:call("FLUSHALL")
    dir = host.scriptdir {
      ["config.lua"] = "return { threads_per_node = 2, poll_interval = 0.2, lease_ttl = 1 }",
      ["workers/Once.lua"] = worker("at_most_once"),
      ["workers/Least.lua"] = worker("at_least_once"),
    }
  end)
  host.stop_after_each(function() return proc, dir end)
  local function starts(id) return srv.conn:call("LLEN", "t:starts:" .. id) end

  it("at_most_once: a failure sends every payload of the call to the morgue at once", function()
    proc = host.spawn("run " .. q(dir), env())
    host.enqueue(dir, "Once", { { id = "fail", payload = 1, score = 1 }, { id = "fail", payload = 2, score = 2 } }, env())
    local dead = host.eventually(function() return list(dir, "Once", "morgue").fail end, 10, "fail in the morgue")
    assert.are.equal("broken", dead.error)
    assert.are.same({ { 1, 1 }, { 2, 2 } }, dead.payloads)
    core.sleep(0.6)
    assert.are.equal(1, starts("fail"))
    assert.are.same({}, list(dir, "Once", "queue"))
    -- at least once (the default): the morgue rule after max_retry_count
    host.enqueue(dir, "Least", { { id = "fail", payload = 1, score = 1 } }, env())
    host.eventually(function() return list(dir, "Least", "morgue").fail end, 15, "Least's fail in the morgue")
    assert.are.equal(1 + 6, starts("fail")) -- 1 for Once, 6 tries for Least (max_retry_count 5)
  end)

  it("at_most_once: after a kill -9 the next holder moves the interrupted jobs to the morgue ('interrupted')", function()
    proc = host.spawn("run " .. q(dir), env())
    host.enqueue(dir, "Once", { { id = "hold", payload = 1 } }, env())
    host.eventually(function() return starts("hold") == 1 end, 10, "hold started")
    proc:signal("KILL")
    proc:wait(5)
    proc = host.spawn("run " .. q(dir), env())
    local dead = host.eventually(function() return list(dir, "Once", "morgue").hold end, 10, "hold in the morgue")
    assert.are.equal("interrupted", dead.error)
    srv.conn:call("SET", "t:release", "1")
    core.sleep(1)
    assert.are.equal(1, starts("hold"))
    local _, j = job(dir, "Once", "hold")
    assert.are.equal("dead", j.state)
  end)

  it("at_least_once (the default): after a kill -9 the interrupted job runs again", function()
    proc = host.spawn("run " .. q(dir), env())
    host.enqueue(dir, "Least", { { id = "hold", payload = 1 } }, env())
    host.eventually(function() return starts("hold") == 1 end, 10, "hold started")
    proc:signal("KILL")
    proc:wait(5)
    srv.conn:call("SET", "t:release", "1")
    proc = host.spawn("run " .. q(dir), env())
    host.eventually(function() return starts("hold") == 2 end, 10, "hold ran again")
    host.eventually(function() return stats(dir).total.length == 0 and next(list(dir, "Least", "busy")) == nil end,
      10, "hold done")
    assert.are.equal(0, stats(dir).total.morgue_length)
  end)

  it("refuses a delivery that is not at_least_once or at_most_once (exit 2, one line)", function()
    local bad = host.scriptdir { ["workers/W.lua"] = 'return { delivery = "exactly_once", perform = function() end }' }
    local rc, _, err = host.exec("plan " .. q(bad))
    host.sh("rm -rf " .. q(bad))
    assert.are.equal(2, rc)
    assert.truthy(err:find('delivery must be "at_least_once" or "at_most_once", got "exactly_once"', 1, true), err)
  end)
end)

describe("expires_at", function()
  local dir, proc, port
  before_each(function()
    srv.conn:call("FLUSHALL")
    -- Log records every payload perform gets; "Push" enqueues through
    -- perform_async from a worker (the Lua path)
    dir = host.scriptdir {
      ["config.lua"] = "return { threads_per_node = 1, poll_interval = 0.2 }",
      ["workers/Log.lua"] = [[
local luakiq = require "luakiq"
return {
  shards_count = 2, batch_size = 10,
  perform = function(batch)
    for id, ps in pairs(batch) do
      for _, p in ipairs(ps) do luakiq.redis.call("RPUSH", "t:ran", id .. "=" .. luakiq.json.encode(p)) end
    end
  end,
}
]],
      ["workers/Push.lua"] = [[
local luakiq = require "luakiq"
return {
  perform = function(batch)
    for _, ps in pairs(batch) do
      for _, p in ipairs(ps) do luakiq.perform_async("Log", { p }) end
    end
  end,
}
]],
    }
  end)
  host.stop_after_each(function() return proc, dir end)
  local function ran()
    local set = {}
    for _, e in ipairs(srv.conn:call("LRANGE", "t:ran", 0, -1)) do set[e] = (set[e] or 0) + 1 end
    return set
  end

  it("never gives an expired payload to perform: the morgue ('expired'), counted in stats and /metrics", function()
    local now = core.now()
    -- queued while no host runs: by the time one starts, some have expired
    host.enqueue(dir, "Log", {
      { id = "a", payload = "old", score = 1, expires_at = now + 0.5 },   -- expires while waiting
      { id = "a", payload = "fresh", score = 2, expires_at = now + 3600 }, -- merged, keeps its own expiry
      { id = "a", payload = "plain", score = 3 },                       -- never expires
      { id = "b", payload = "gone", expires_at = now - 1 },             -- expired on arrival: whole job
      { id = "c", payload = "late", perform_in = now + 1, expires_at = now + 0.5 }, -- due after its expiry
    }, env())
    core.sleep(1.2)
    port = core.free_port()
    proc = host.spawn("run " .. q(dir) .. " --web 127.0.0.1:" .. port, env())
    host.eventually(function() return ran()['a="plain"'] end, 10, "a ran")
    core.sleep(0.5)
    local r = ran()
    assert.are.same({ ['a="fresh"'] = 1, ['a="plain"'] = 1 }, r)
    local dead = list(dir, "Log", "morgue")
    assert.are.equal("expired", dead.a.error)
    assert.are.same({ { "old", 1 } }, dead.a.payloads)
    assert.are.equal("expired", dead.b.error)
    assert.are.equal("expired", dead.c.error)
    local s = stats(dir)
    assert.are.equal(3, s.by_worker.Log.expired)
    assert.are.equal(3, s.total.expired)
    local metrics = host.capture("curl -s http://127.0.0.1:" .. port .. "/metrics")
    assert.truthy(metrics:find('luakiq_expired_total{worker="Log"} 3', 1, true), metrics)
    -- nothing left over: the expiry entries go with the acked jobs
    host.eventually(function() return srv.conn:call("EXISTS", "luakiq:{Log:" .. core.crc32("a") % 2 .. "}:expires:a") == 0 end,
      5, "a's expiry entries gone")
  end)

  it("an equal payload pushed without expires_at no longer expires; with a later one, the later wins", function()
    local now = core.now()
    host.enqueue(dir, "Log", { { id = "m", payload = "x", expires_at = now + 0.3 } }, env())
    host.enqueue(dir, "Log", { { id = "m", payload = "x" } }, env())
    host.enqueue(dir, "Log", { { id = "n", payload = "y", expires_at = now + 0.3 } }, env())
    host.enqueue(dir, "Log", { { id = "n", payload = "y", expires_at = now + 3600 } }, env())
    host.enqueue(dir, "Log", { { id = "o", payload = "z", expires_at = now + 3600 } }, env())
    host.enqueue(dir, "Log", { { id = "o", payload = "z", expires_at = now + 0.3 } }, env())
    core.sleep(0.8)
    proc = host.spawn("run " .. q(dir), env())
    host.eventually(function() local r = ran() return r['m="x"'] and r['n="y"'] and r['o="z"'] end, 10, "all ran")
    assert.are.equal(0, stats(dir).total.expired)
  end)

  it("is taken by perform_async and by POST /api/v1/workers/NAME/jobs", function()
    local now = core.now()
    port = core.free_port()
    host.enqueue(dir, "Push", { { id = "p", payload = { id = "q", payload = "via-lua", expires_at = now - 1 } } }, env())
    proc = host.spawn("run " .. q(dir) .. " --web 127.0.0.1:" .. port, env())
    host.eventually(function() return list(dir, "Log", "morgue").q end, 10, "q expired")
    local url = "http://127.0.0.1:" .. port .. "/api/v1/workers/Log/jobs"
    local body = json.encode { { id = "h", payload = "via-http", expires_at = now - 1 } }
    local out = host.capture("curl -s -X POST --data-binary " .. q(body) .. " " .. q(url))
    assert.are.equal('{"enqueued":1}', out)
    host.eventually(function() return list(dir, "Log", "morgue").h end, 10, "h expired")
    assert.is_nil(ran()['h="via-http"'])
    assert.is_nil(ran()['q="via-lua"'])
  end)

  it("refuses an expires_at that is not a finite number: exit 2 / HTTP 400, nothing enqueued", function()
    for _, line in ipairs { '{"id":"x","expires_at":"soon"}', '{"id":"x","expires_at":1e999}', '{"id":"x","expires_at":null,"bad":1}' } do
      local rc, _, err = host.exec("enqueue " .. q(dir) .. " Log", '{"id":"ok"}\n' .. line, env())
      assert.are.equal(2, rc, err)
      assert.truthy(err:find("line 2", 1, true), err)
    end
    local rc, _, err = host.exec("enqueue " .. q(dir) .. " Log", '{"id":"x","expires_at":"soon"}', env())
    assert.truthy(err:find("expires_at must be a finite number", 1, true), err)
    assert.are.equal(2, rc)
    assert.are.equal(0, stats(dir).total.length)
    port = core.free_port()
    proc = host.spawn("run " .. q(dir) .. " --web 127.0.0.1:" .. port, env())
    local url = "http://127.0.0.1:" .. port .. "/api/v1/workers/Log/jobs"
    host.eventually(function() return host.capture("curl -s -o /dev/null -w '%{http_code}' " .. q(url)) ~= "000" end, 10, "listener")
    local out = host.capture("curl -s -w ' %{http_code}' -X POST --data-binary " ..
      q('[{"id":"y","perform_in":1},{"id":"z","expires_at":"never"}]') .. " " .. q(url))
    assert.truthy(out:find(" 400$"), out)
    assert.truthy(out:find("expires_at must be a finite number", 1, true), out)
    assert.are.equal(0, stats(dir).total.length)
  end)
end)

describe("jobs performed (/metrics)", function()
  it("counts an id with a comma in it as one job", function()
    srv.conn:call("FLUSHALL")
    local dir = host.scriptdir {
      ["config.lua"] = "return { threads_per_node = 1, poll_interval = 0.2 }",
      ["workers/W.lua"] = "return { shards_count = 1, batch_size = 5, perform = function() end }",
    }
    local port = core.free_port()
    local p = host.spawn("run " .. q(dir) .. " --web 127.0.0.1:" .. port, env())
    host.enqueue(dir, "W", { { id = "a,b" }, { id = "c,d,e" } }, env())
    local total = host.eventually(function()
      local m = host.capture("curl -s http://127.0.0.1:" .. port .. "/metrics")
      local n = 0
      for v in m:gmatch('luakiq_thread_jobs_performed_total{thread="t%d+"} (%d+)') do n = n + tonumber(v) end
      return n > 0 and n
    end, 10, "jobs counted")
    core.sleep(0.5)
    p:kill()
    host.sh("rm -rf " .. q(dir))
    assert.are.equal(2, total)
  end)
end)
