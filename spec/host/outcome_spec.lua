-- One job's outcome inside a call and snoozes (DESIGN.md section 10;
-- docs/lua-api.md): call:fail(id, err), call:fail(id, luakiq.permanent(msg)),
-- call:snooze(id, s) and error(luakiq.snooze(s, msg)), end to end: the real
-- binary, a real redis-server, the counters, `luakiq job`, `luakiq stats`,
-- /metrics and the history.
local core = require "luakiq.core"
local json = require "luakiq.json"
local host = require "helpers.host"
local web = require "web.support"
local q = host.quote

local srv, env = host.fixture()

local function jobs(dir, worker, which) return host.jobs(dir, worker, which, env()) end
local function counter(worker, field)
  return tonumber(srv.conn:call("HGET", "luakiq:{" .. worker .. ":0}:counters", field)) or 0
end
-- A script directory with one worker, NAME.lua = body (after `local luakiq
-- = require "luakiq"`), one thread, poll_interval poll (default 0.2).
local function worker_dir(name, body, poll)
  return host.scriptdir {
    ["config.lua"] = ("return { threads_per_node = 1, poll_interval = %g }"):format(poll or 0.2),
    ["workers/" .. name .. ".lua"] = 'local luakiq = require "luakiq"\n' .. body,
  }
end
local function job(dir, worker, id)
  local rc, out, err = host.exec("job " .. q(dir) .. " " .. worker .. " " .. id, nil, env())
  assert(rc == 0, tostring(err))
  return json.decode(out)
end

describe("call:fail", function()
  local dir, proc
  host.stop_after_each(function() return proc, dir end)

  it("a poison id in a batch of 10 retries alone and ends in the morgue; its 9 batch-mates run once, done", function()
    local out = host.tmpdir()
    dir = worker_dir("W", (([[
return {
  shards_count = 1, batch_size = 10, max_retry_count = 2, retry_in = function() return 0.2 end,
  perform = function(batch, call)
    local n = 0
    for id in pairs(batch) do
      n = n + 1
      luakiq.redis.call("RPUSH", "t:ran", id)
      if id == "poison" then call:fail(id, "bad data in " .. id) end
      if id == "perm" then call:fail(id, luakiq.permanent("no such customer")) end
    end
    luakiq.redis.call("RPUSH", "t:sizes", n)
  end,
  retries_exhausted = function(dead)
    local f = io.open("OUT/dead", "a")
    for _, d in ipairs(dead) do f:write(d.id, "\t", d.error, "\n") end
    f:close()
  end,
}
]]):gsub("OUT", out)))
    local list = {}
    for i = 1, 8 do list[i] = { id = "ok" .. i, payload = i } end
    list[9] = { id = "poison", payload = 9 }
    list[10] = { id = "perm", payload = 10 }
    host.enqueue(dir, "W", list, env())
    proc = host.spawn("run " .. q(dir), env())
    local dead = host.eventually(function()
      local m = jobs(dir, "W", "morgue")
      return m.poison and m.perm and m
    end, 20, "poison and perm in the morgue")
    assert.are.equal("bad data in poison", dead.poison.error)
    assert.are.equal("no such customer", dead.perm.error)
    -- the first call had all 10 ids; the 8 healthy ones ran once and are done
    assert.are.equal("10", srv.conn:call("LINDEX", "t:sizes", 0))
    local ran = {}
    for _, id in ipairs(srv.conn:call("LRANGE", "t:ran", 0, -1)) do ran[id] = (ran[id] or 0) + 1 end
    for i = 1, 8 do assert.are.equal(1, ran["ok" .. i], "ok" .. i) end
    assert.are.equal(3, ran.poison) -- max_retry_count 2: the first try and 2 retries
    assert.are.equal(1, ran.perm) -- permanent: the morgue at once
    assert.are.same({}, jobs(dir, "W", "queue"))
    assert.are.equal(8, counter("W", "processed"))
    assert.are.equal(4, counter("W", "failed")) -- poison 3 times, perm once
    assert.are.equal(0, counter("W", "snoozed"))
    local lines = host.eventually(function()
      local t = host.read(out .. "/dead")
      return t and select(2, t:gsub("\n", "")) == 2 and t
    end, 5, "retries_exhausted for both")
    assert.truthy(lines:find("poison\tbad data in poison\n", 1, true), lines)
    assert.truthy(lines:find("perm\tno such customer\n", 1, true), lines)
  end)

  it("a call that raises: the marked ids keep their own outcome, the others take the raised path", function()
    dir = worker_dir("W", [[
return {
  shards_count = 1, batch_size = 10, max_retry_count = 5, retry_in = function() return 3600 end,
  perform = function(batch, call)
    call:fail("a", luakiq.permanent("a is dead"))
    call:snooze("b", 3600)
    error("the rest failed")
  end,
}
]])
    host.enqueue(dir, "W", { { id = "a" }, { id = "b" }, { id = "c" } }, env())
    proc = host.spawn("run " .. q(dir), env())
    host.eventually(function() return jobs(dir, "W", "morgue").a end, 10, "a in the morgue")
    local queued = host.eventually(function()
      local x = jobs(dir, "W", "queue")
      return x.b and x.c and x.c.retry_count == 0 and x
    end, 10, "b and c back")
    assert.are.equal("the rest failed", queued.c.error:match("the rest failed"))
    assert.are.equal(-1, queued.b.retry_count)
    assert.is_nil(queued.b.error)
    assert.is_true(queued.b.perform_in > core.now() + 3000, "b snoozed for an hour")
    assert.are.equal(2, counter("W", "failed"))
    assert.are.equal(1, counter("W", "snoozed"))
    assert.are.equal(0, counter("W", "processed"))
  end)

  it("refuses an id that is not the call's, a missing error and bad seconds, at the call", function()
    dir = worker_dir("W", [[
return {
  shards_count = 1,
  perform = function(batch, call)
    local tries = {
      function() call:fail("nope", "x") end,
      function() call:fail("x1") end,
      function() call:snooze("x1", -1) end,
      function() call:snooze("x1", 0 / 0) end,
      function() call:snooze("x1", "5") end,
      function() luakiq.snooze(math.huge) end,
      function() luakiq.snooze(11 * 365 * 86400) end,
      function() luakiq.snooze(nil) end,
    }
    for _, f in ipairs(tries) do
      local ok, e = pcall(f)
      luakiq.redis.call("RPUSH", "t:errs", ok and "accepted" or tostring(e))
    end
  end,
}
]])
    host.enqueue(dir, "W", { { id = "x1" } }, env())
    proc = host.spawn("run " .. q(dir), env())
    host.eventually(function() return srv.conn:call("LLEN", "t:errs") == 8 end, 10, "perform ran")
    local e = srv.conn:call("LRANGE", "t:errs", 0, -1)
    assert.truthy(e[1]:find("call:fail: 'nope' is not a job of this call (its ids: x1)", 1, true), e[1])
    assert.truthy(e[2]:find("call:fail: the error must be", 1, true), e[2])
    for i = 3, 5 do assert.truthy(e[i]:find("call:snooze: seconds must be a number from 0 to", 1, true), e[i]) end
    for i = 6, 8 do assert.truthy(e[i]:find("luakiq.snooze: seconds must be a number from 0 to", 1, true), e[i]) end
    -- (raised at the caller: the worker's file and line)
    assert.truthy(e[3]:find("W.lua:%d+:"), e[3])
    assert.truthy(e[6]:find("W.lua:%d+:"), e[6])
    -- nothing was marked: the call is done
    host.eventually(function() return counter("W", "processed") == 1 end, 10, "x1 processed")
  end)
end)

describe("snooze", function()
  local dir, proc
  host.stop_after_each(function() return proc, dir end)

  it("luakiq.snooze and call:snooze: back after s, no retry, no error, counted as snoozed, not failed", function()
    dir = worker_dir("S", [[
return {
  shards_count = 1, batch_size = 10,
  perform = function(batch, call)
    for id in pairs(batch) do
      local n = luakiq.redis.call("INCR", "t:n:" .. id)
      luakiq.redis.call("RPUSH", "t:at:" .. id, string.format("%.3f", luakiq.now()))
      if id == "one" and n == 1 then call:snooze(id, 1) end
      if id == "all" and n == 1 then error(luakiq.snooze(1, "not yet")) end
    end
  end,
}
]], 0.1)
    local base
    proc, base = web.start(dir, env())
    host.enqueue(dir, "S", { { id = "one" }, { id = "mate" } }, env())
    -- call:snooze: one is back after ~1 s, mate is done at once
    host.eventually(function() return srv.conn:call("LLEN", "t:at:one") == 1 end, 10, "one ran")
    local j = host.eventually(function()
      local x = job(dir, "S", "one")
      return x.state ~= "in_flight" and x
    end, 5, "one snoozed")
    assert.are.equal(-1, j.retry_count, json.encode(j))
    assert.is_nil(j.error, json.encode(j))
    host.eventually(function() return srv.conn:call("LLEN", "t:at:one") == 2 end, 10, "one ran again")
    local at = srv.conn:call("LRANGE", "t:at:one", 0, -1)
    local gap = tonumber(at[2]) - tonumber(at[1])
    assert.is_true(gap >= 0.9 and gap < 4, ("one ran again %.2f s later (snooze 1 s)"):format(gap))
    assert.are.equal("1", srv.conn:call("GET", "t:n:mate"))
    -- luakiq.snooze: the whole call
    host.enqueue(dir, "S", { { id = "all" } }, env())
    host.eventually(function() return srv.conn:call("LLEN", "t:at:all") == 2 end, 10, "all ran again")
    at = srv.conn:call("LRANGE", "t:at:all", 0, -1)
    gap = tonumber(at[2]) - tonumber(at[1])
    assert.is_true(gap >= 0.9 and gap < 4, ("all ran again %.2f s later (snooze 1 s)"):format(gap))
    host.eventually(function() return counter("S", "processed") == 3 end, 10, "one, mate and all processed")
    assert.are.equal(2, counter("S", "snoozed"))
    assert.are.equal(0, counter("S", "failed"))
    assert.are.same({}, jobs(dir, "S", "queue"))
    assert.are.same({}, jobs(dir, "S", "morgue"))
    -- luakiq stats, /metrics, the history and the dashboard
    assert.are.equal(2, host.stats(dir, env()).by_worker.S.snoozed)
    local _, metrics = web.request(base, "GET", "/metrics")
    assert.truthy(metrics:find('luakiq_snoozed_total{worker="S"} 2', 1, true), metrics)
    assert.truthy(metrics:find('luakiq_failed_total{worker="S"} 0', 1, true), metrics)
    web.promtool_check(metrics)
    local _, _, d = web.request(base, "GET", "/api/web/dashboard")
    assert.are.equal(2, d.queues[1].snoozed)
    local h = host.eventually(function()
      local _, _, v = web.request(base, "GET", "/api/v1/history?minutes=5")
      local s, f = 0, 0
      for i = 1, #v.by_worker.S.snoozed do
        s, f = s + v.by_worker.S.snoozed[i], f + v.by_worker.S.failed[i]
      end
      return s == 2 and { s = s, f = f, total = v.total.snoozed }
    end, 10, "snoozes in the history")
    assert.are.equal(0, h.f)
  end)
end)

describe("snooze in on_reply", function()
  local dir, proc
  host.stop_after_each(function() return proc, dir end)

  it("the reply is kept and handed to on_reply again after s; not a failure, no new attempt", function()
    local keys = require "luakiq.lib.keys"
    dir = worker_dir("A", [[
return {
  shards_count = 1,
  perform = function(batch)
    for id in pairs(batch) do
      luakiq.redis.call("INCR", "t:p:" .. id)
      luakiq.redis.call("SET", "t:token:" .. id, luakiq.await(id).token)
    end
  end,
  on_reply = function(id, reply, pls, call)
    local n = luakiq.redis.call("INCR", "t:r:" .. id)
    luakiq.redis.call("RPUSH", "t:rat:" .. id, string.format("%.3f %s %s", luakiq.now(), reply.answer, call.attempt))
    if n == 1 then error(luakiq.snooze(1, "later")) end
  end,
}
]], 0.1)
    proc = host.spawn("run " .. q(dir), env())
    host.enqueue(dir, "A", { { id = "a" } }, env())
    local token = host.eventually(function() return srv.conn:call("GET", "t:token:a") end, 10, "a awaited")
    srv.conn:script("reply", keys.prefix("luakiq", "A", 0), "reply", string.format("%.17g", core.now()),
      keys.wake_channel("luakiq"), "", "token", token, json.encode { answer = 42 })
    host.eventually(function() return srv.conn:call("LLEN", "t:rat:a") == 2 end, 10, "on_reply ran again")
    local r = srv.conn:call("LRANGE", "t:rat:a", 0, -1)
    local t1, a1, n1 = r[1]:match("^(%S+) (%S+) (%S+)$")
    local t2, a2, n2 = r[2]:match("^(%S+) (%S+) (%S+)$")
    assert.are.same({ "42", "42" }, { a1, a2 }) -- the same reply
    assert.are.equal(n1, n2) -- the same attempt
    local gap = tonumber(t2) - tonumber(t1)
    assert.is_true(gap >= 0.9 and gap < 4, ("on_reply ran again %.2f s later (snooze 1 s)"):format(gap))
    host.eventually(function() return counter("A", "processed") == 1 end, 10, "a done")
    assert.are.equal(1, counter("A", "snoozed"))
    assert.are.equal(0, counter("A", "failed"))
    assert.are.equal("1", srv.conn:call("GET", "t:p:a")) -- performed once: the snooze was no new attempt
  end)
end)
