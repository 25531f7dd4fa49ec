-- Finished jobs (keep_done, call:result) and stale payloads (monotonic):
-- docs/redis.md "Finished jobs" and "Stale payloads", DESIGN section 10.
-- The real binary, a real redis-server, real processes; `luakiq job`, the
-- HTTP API, `luakiq stats` and /metrics.
local core = require "luakiq.core"
local json = require "luakiq.json"
local host = require "helpers.host"
local q = host.quote

local srv, env = host.fixture()

local function job(dir, worker, id)
  local rc, out, err = host.exec("job " .. q(dir) .. " " .. worker .. " " .. q(id), nil, env())
  return rc, out ~= "" and json.decode(out) or nil, err
end

-- Kept: keep_done 2 s; gives {seen = payload} as each
-- id's result. Plain: the same without keep_done. Capped: keep_done 600 s,
-- at most 3 a shard. Mono / Loose: record
-- every payload they perform in t:seen:NAME, monotonic or not.
local FILES = {
  ["config.lua"] = "return { threads_per_node = 1, poll_interval = 0.1 }",
  ["workers/Kept.lua"] = [[
return {
  shards_count = 1, batch_size = 2, keep_done = 2,
  perform = function(batch, call)
    for id, payloads in pairs(batch) do call:result(id, { seen = payloads[#payloads] }) end
  end,
}
]],
  ["workers/Plain.lua"] = "return { shards_count = 1, perform = function() end }",
  ["workers/Capped.lua"] = "return { shards_count = 1, keep_done = 600, keep_done_max = 3, perform = function() end }",
  -- Asks: each job waits for a reply (key "k-ID"); on_reply gives the reply as its result
  ["workers/Asks.lua"] = [[
local luakiq = require "luakiq"
return {
  shards_count = 1, keep_done = 600,
  perform = function(batch)
    for id in pairs(batch) do luakiq.await(id, { key = "k-" .. id }) end
  end,
  on_reply = function(id, reply, payloads, call) call:result(id, reply) end,
}
]],
}
for name, mono in pairs { Mono = "true", Loose = "false" } do
  FILES["workers/" .. name .. ".lua"] = ([[
local luakiq = require "luakiq"
return {
  shards_count = 1, monotonic = %s,
  perform = function(batch)
    for _, payloads in pairs(batch) do
      for _, p in ipairs(payloads) do luakiq.redis.call("RPUSH", "t:seen:%s", p) end
    end
  end,
}
]]):format(mono, name)
end

describe("finished jobs", function()
  local dir, proc
  before_each(function()
    srv.conn:call("FLUSHALL")
    dir = host.scriptdir(FILES)
  end)
  host.stop_after_each(function() return proc, dir end)

  it("answer done with finished_at, attempts and result (CLI and HTTP), then leave after keep_done", function()
    local port = core.free_port()
    proc = host.spawn("run " .. q(dir) .. " --web 127.0.0.1:" .. port, env())
    local t0 = core.now()
    host.enqueue(dir, "Kept", { { id = "a", payload = "x1" }, { id = "a", payload = "x2" } }, env())
    host.enqueue(dir, "Plain", { { id = "p", payload = 1 } }, env())
    local j = host.eventually(function()
      local _, x = job(dir, "Kept", "a")
      return x and x.state == "done" and x
    end, 10, "a done")
    assert.are.same({ seen = "x2" }, j.result)
    assert.are.equal(1, j.attempts)
    assert.is_true(j.finished_at >= t0 - 1 and j.finished_at <= core.now(), tostring(j.finished_at))
    local body = host.capture("curl -s " .. q("http://127.0.0.1:" .. port .. "/api/v1/workers/Kept/jobs/a"))
    assert.are.same(j, json.decode(body))
    -- without keep_done a job done is not found
    host.eventually(function() return host.stats(dir, env()).by_worker.Plain.length == 0 end, 10, "p performed")
    core.sleep(0.5)
    local rc = job(dir, "Plain", "p")
    assert.are.equal(1, rc)
    -- keep_done 2 s: gone after it
    host.eventually(function() return job(dir, "Kept", "a") == 1 end, 5, "a's record leaves")
    assert.is_true(core.now() - j.finished_at >= 2)
  end)

  it("a job that waited is done when on_reply returns, with on_reply's result", function()
    proc = host.spawn("run " .. q(dir), env())
    host.enqueue(dir, "Asks", { { id = "w1", payload = 1 } }, env())
    host.eventually(function() local _, x = job(dir, "Asks", "w1") return x and x.state == "waiting" end, 10, "w1 waits")
    local rc, _, err = host.exec("reply " .. q(dir) .. " Asks --key k-w1 " .. q('{"paid":true}'), nil, env())
    assert.are.equal(0, rc, err)
    local j = host.eventually(function()
      local _, x = job(dir, "Asks", "w1")
      return x and x.state == "done" and x
    end, 10, "w1 done")
    assert.are.same({ paid = true }, j.result)
    assert.are.equal(1, j.attempts)
  end)

  it("keep at most keep_done_max records a shard (the oldest leave)", function()
    proc = host.spawn("run " .. q(dir), env())
    for i = 1, 5 do
      host.enqueue(dir, "Capped", { { id = "k" .. i, payload = i } }, env())
      host.eventually(function() local _, x = job(dir, "Capped", "k" .. i) return x and x.state == "done" end, 10, "k" .. i)
    end
    local kept = {}
    for i = 1, 5 do
      local _, x = job(dir, "Capped", "k" .. i)
      if x then kept[#kept + 1] = "k" .. i end
    end
    assert.are.same({ "k3", "k4", "k5" }, kept)
  end)
end)

describe("stale payloads", function()
  local dir, proc
  before_each(function()
    srv.conn:call("FLUSHALL")
    dir = host.scriptdir(FILES)
  end)
  host.stop_after_each(function() return proc, dir end)

  local function seen(name) return srv.conn:call("LRANGE", "t:seen:" .. name, 0, -1) end
  -- pushes id o's payload with score
  local function push(name, payload, score)
    host.enqueue(dir, name, { { id = "o", payload = payload, score = score } }, env())
  end

  it("monotonic: a payload not above the highest score performed is dropped, counted, never performed", function()
    local port = core.free_port()
    proc = host.spawn("run " .. q(dir) .. " --web 127.0.0.1:" .. port, env())
    for _, name in ipairs { "Mono", "Loose" } do
      push(name, "s8", 8)
      host.eventually(function() return #seen(name) == 1 end, 10, name .. " s8")
      -- (acked: the ack rides with a later fetch, within poll_interval)
      core.sleep(0.5)
      push(name, "s7", 7)
      core.sleep(0.8)
      push(name, "s9", 9)
      host.eventually(function() return seen(name)[#seen(name)] == "s9" end, 10, name .. " s9")
    end
    assert.are.same({ "s8", "s9" }, seen("Mono"))
    assert.are.same({ "s8", "s7", "s9" }, seen("Loose"))
    local by = host.stats(dir, env()).by_worker
    assert.are.equal(1, by.Mono.stale)
    assert.are.equal(0, by.Mono.length)
    assert.is_nil(by.Loose.stale) -- (shown for monotonic workers)
    local metrics = host.capture("curl -s " .. q("http://127.0.0.1:" .. port .. "/metrics"))
    assert.truthy(metrics:find('luakiq_stale_payloads_total{worker="Mono"} 1\n', 1, true), metrics)
    assert.truthy(metrics:find('luakiq_stale_payloads_total{worker="Loose"} 0\n', 1, true), metrics)
    local dash = json.decode(host.capture("curl -s " .. q("http://127.0.0.1:" .. port .. "/api/web/dashboard")))
    for _, w in ipairs(dash.queues) do
      if w.name == "Mono" then assert.are.equal(1, w.stale) end
    end
    assert.are.equal(1, dash.total.stale)
  end)
end)
