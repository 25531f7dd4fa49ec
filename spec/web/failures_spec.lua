-- Failures grouped by error (docs/operations.md, "Failures"): a running host
-- whose two workers fail with errors that differ in numbers, addresses and
-- ids; `luakiq failures DIR`, GET /api/v1/failures and the dashboard's
-- Failures tab show the same groups and counts per worker; a group is
-- requeued (its dead jobs run again, its waiting ones run now) or deleted
-- whole, and the other groups stay as they were.
local json = require "luakiq.json"
local redis = require "helpers.redis"
local host = require "helpers.host"
local web = require "web.support"
local q = host.quote

-- A job's payload says how it fails: {fail = "timeout", order = N, wait = S,
-- ip = "..."}, {fail = "missing", order = N}, {fail = "disk"}. A kind whose
-- Redis key fixed:KIND is set succeeds and records the id in done:WORKER.
-- max_retry_count 1 and retries an hour away: a new job fails once and waits
-- (queued, retry_count 0); one enqueued with retry_count 0 dies at its first
-- failure.
local WORKER = [[
local luakiq = require "luakiq"
return {
  shards_count = %d, max_retry_count = 1,
  retry_in = function() return 3600 end,
  perform = function(batch)
    for id, payloads in pairs(batch) do
      local p = payloads[1]
      if luakiq.redis.call("GET", "fixed:" .. p.fail) == "1" then
        luakiq.redis.call("RPUSH", "done:%s", id)
      elseif p.fail == "timeout" then
        error(("timeout after %%s s talking to %%s (order %%d)"):format(p.wait, p.ip, p.order), 0)
      elseif p.fail == "missing" then
        error(("order %%d not found"):format(p.order), 0)
      else
        error("disk full", 0)
      end
    end
  end,
}]]

local TIMEOUT = "timeout after <n> s talking to <ip> (order <n>)"
local MISSING = "order <n> not found"
local DISK = "disk full"

describe("failures", function()
  local srv, dir, proc, base
  local function env() return "REDIS_URL=" .. srv.url end
  local function cli(args)
    local rc, out, err = host.exec(args, nil, env())
    return rc, out, err
  end
  local function groups_cli(extra)
    local rc, out, err = cli("failures " .. q(dir) .. (extra or ""))
    assert.are.equal(0, rc, err)
    return web.lines(out)
  end
  local function enqueue(worker, jobs)
    local rc, out, err = host.exec("enqueue " .. q(dir) .. " " .. worker, json.encode(jobs), env())
    assert.are.equal(0, rc, out .. err)
  end
  local function counts()
    local st, body, v = web.request(base, "GET", "/api/v1/failures")
    assert.are.equal(200, st, body)
    local out = {}
    for _, g in ipairs(v.failures) do
      local per = {}
      for name, pw in pairs(g.workers) do per[name] = { pw.queued, pw.dead } end
      out[g.error] = per
    end
    return out, v
  end

  setup(function()
    srv = redis.start()
    dir = host.scriptdir {
      ["config.lua"] = "return { threads_per_node = 2, poll_interval = 0.2 }",
      ["workers/A.lua"] = WORKER:format(3, "A"),
      ["workers/B.lua"] = WORKER:format(2, "B"),
    }
    proc, base = web.start(dir, env())
    -- A: timeouts 1-4 (1, 2 dead), missing orders 5-7 (5 dead)
    enqueue("A", {
      { id = 1, retry_count = 0, payload = { fail = "timeout", wait = "3.2", ip = "10.0.0.7:5432", order = 123 } },
      { id = 2, retry_count = 0, payload = { fail = "timeout", wait = "12", ip = "10.0.0.9:5433", order = 9 } },
      { id = 3, payload = { fail = "timeout", wait = "0.25", ip = "[fe80::2]:5432", order = 77 } },
      { id = 4, payload = { fail = "timeout", wait = "30", ip = "192.168.1.1:6543", order = 4 } },
      { id = 5, retry_count = 0, payload = { fail = "missing", order = 77 } },
      { id = 6, payload = { fail = "missing", order = 123456 } },
      { id = 7, payload = { fail = "missing", order = 8 } },
    })
    -- B: timeouts 11 (dead), 12; missing 13 (dead); disk 14 (dead), 15
    enqueue("B", {
      { id = 11, retry_count = 0, payload = { fail = "timeout", wait = "1.5", ip = "10.1.2.3:80", order = 11 } },
      { id = 12, payload = { fail = "timeout", wait = "2", ip = "10.1.2.4:80", order = 12 } },
      { id = 13, retry_count = 0, payload = { fail = "missing", order = 13 } },
      { id = 14, retry_count = 0, payload = { fail = "disk" } },
      { id = 15, payload = { fail = "disk" } },
    })
    -- (every job ran once: 6 dead, and 6 queued with their error; a queued
    -- job that has not run yet is counted by stats but has no error)
    host.eventually(function()
      local s = json.decode(select(2, cli("stats " .. q(dir))))
      if not (s.total.morgue_length == 6 and s.total.length == 6) then return false end
      local queued, dead = 0, 0
      for _, per in pairs(counts()) do
        for _, qd in pairs(per) do queued, dead = queued + qd[1], dead + qd[2] end
      end
      return queued == 6 and dead == 6
    end, 20, "6 jobs dead, 6 waiting for a retry")
  end)
  teardown(function()
    web.stop(proc, dir)
    if srv then srv:stop() end
  end)

  it("lists one group per normalized error with counts per worker; the CLI prints the same", function()
    local got, v = counts()
    assert.are.same({
      [TIMEOUT] = { A = { 2, 2 }, B = { 1, 1 } },
      [MISSING] = { A = { 2, 1 }, B = { 0, 1 } },
      [DISK] = { B = { 1, 1 } },
    }, got)
    -- most jobs first, totals, a few ids per worker
    assert.are.same({ TIMEOUT, MISSING, DISK }, { v.failures[1].error, v.failures[2].error, v.failures[3].error })
    assert.are.same({ 6, 3, 3 }, { v.failures[1].count, v.failures[1].queued, v.failures[1].dead })
    assert.are.same({ "1", "2", "3", "4" }, v.failures[1].workers.A.ids)
    assert.are.same(v.failures, groups_cli())
    -- one worker only
    local only_b = groups_cli(" --worker B")
    -- (2 jobs each: ties by text)
    assert.are.same({ DISK, TIMEOUT, MISSING }, { only_b[1].error, only_b[2].error, only_b[3].error })
    for _, g in ipairs(only_b) do assert.are.same({ "B" }, (function()
      local t = {}
      for k in pairs(g.workers) do t[#t + 1] = k end
      return t
    end)()) end
    local st, _, vb = web.request(base, "GET", "/api/v1/failures?worker=B")
    assert.are.equal(200, st)
    assert.are.same(only_b, vb.failures)
  end)

  it("lists the jobs of a group, paged, in the CLI and the API", function()
    local rc, out, err = cli("failures " .. q(dir) .. " jobs " .. q(MISSING))
    assert.are.equal(0, rc, err)
    local jobs = web.lines(out)
    table.sort(jobs, function(a, b) return a.worker .. a.id < b.worker .. b.id end)
    assert.are.same({
      { worker = "A", id = "5", state = "dead" }, { worker = "A", id = "6", state = "queued" },
      { worker = "A", id = "7", state = "queued" }, { worker = "B", id = "13", state = "dead" },
    }, jobs)
    -- pages of one: the cursor walks every shard and list of both workers
    local seen, cursor, pages = {}, nil, 0
    repeat
      local path = "/api/v1/failures/jobs?limit=1&error=" .. MISSING:gsub("[^%w]", function(c)
        return ("%%%02X"):format(c:byte())
      end) .. (cursor and ("&cursor=" .. cursor) or "")
      local st, body, v = web.request(base, "GET", path)
      assert.are.equal(200, st, body)
      for _, j in ipairs(v.jobs) do seen[#seen + 1] = j.worker .. j.id end
      cursor, pages = v.next, pages + 1
    until not cursor or pages > 50
    table.sort(seen)
    assert.are.same({ "A5", "A6", "A7", "B13" }, seen)
    assert.is_true(pages >= 4, "paged: " .. pages)
    -- bad input: one line, exit 2 / 400 / 404
    rc, _, err = cli("failures " .. q(dir) .. " jobs " .. q(MISSING) .. " --worker Nope")
    assert.are.same({ 2, "luakiq: unknown worker 'Nope'\n" }, { rc, err })
    rc, _, err = cli("failures " .. q(dir) .. " retry " .. q(MISSING))
    assert.are.equal(2, rc)
    assert.are.equal(1, select(2, err:gsub("\n", "")), err)
    rc = cli("failures " .. q(dir) .. " delete")
    assert.are.equal(2, rc)
    assert.are.equal(400, (web.request(base, "GET", "/api/v1/failures/jobs")))
    assert.are.equal(400, (web.request(base, "GET", "/api/v1/failures/jobs?error=x&cursor=junk")))
    assert.are.equal(404, (web.request(base, "GET", "/api/v1/failures?worker=Nope")))
    assert.are.equal(400, (web.request(base, "POST", "/api/v1/failures/delete", { body = '{"err":"x"}' })))
    assert.are.equal(405, (web.request(base, "GET", "/api/v1/failures/delete")))
  end)

  it("the dashboard's Failures tab shows the groups and requeues one through its confirm()", function()
    srv.conn:call("SET", "fixed:disk", "1")
    web.browser_test("failures", base, DISK, TIMEOUT)
    host.eventually(function() return srv.conn:call("LLEN", "done:B") == 2 end, 15, "both disk jobs ran")
    local got = counts()
    assert.is_nil(got[DISK])
    srv.conn:call("DEL", "done:B")
  end)

  it("requeues a group: dead jobs run again, waiting ones run now; others untouched", function()
    srv.conn:call("SET", "fixed:missing", "1")
    local rc, out, err = cli("failures " .. q(dir) .. " requeue " .. q(MISSING))
    assert.are.equal(0, rc, err)
    assert.are.same({ requeued = 2, due_now = 2 }, json.decode(out))
    host.eventually(function()
      return srv.conn:call("LLEN", "done:A") == 3 and srv.conn:call("LLEN", "done:B") == 1
    end, 15, "the missing orders ran")
    local done = srv.conn:call("LRANGE", "done:A", 0, -1)
    table.sort(done)
    assert.are.same({ "5", "6", "7" }, done)
    assert.are.same({ "13" }, srv.conn:call("LRANGE", "done:B", 0, -1))
    local got = counts()
    assert.are.same({ [TIMEOUT] = { A = { 2, 2 }, B = { 1, 1 } } }, got)
    -- nothing left of the group: acting again changes nothing
    local st, _, v = web.request(base, "POST", "/api/v1/failures/requeue", { body = json.encode { error = MISSING } })
    assert.are.equal(200, st)
    assert.are.same({ requeued = 0, due_now = 0 }, v)
  end)

  it("deletes a group, one worker or all", function()
    srv.conn:call("SET", "fixed:timeout", "1") -- so nothing of it may run unseen
    local st, body, v = web.request(base, "POST", "/api/v1/failures/delete",
      { body = json.encode { error = TIMEOUT, worker = "B" } })
    assert.are.equal(200, st, body)
    assert.are.same({ deleted = 2 }, v)
    assert.are.same({ [TIMEOUT] = { A = { 2, 2 } } }, (counts()))
    local rc, out, err = cli("failures " .. q(dir) .. " delete " .. q(TIMEOUT))
    assert.are.equal(0, rc, err)
    assert.are.same({ deleted = 4 }, json.decode(out))
    assert.are.same({}, groups_cli())
    for _, id in ipairs { "1", "3" } do
      assert.are.equal(1, (cli("job " .. q(dir) .. " A " .. id)), "job " .. id .. " is gone")
    end
    local s = json.decode(select(2, cli("stats " .. q(dir))))
    assert.are.same({ 0, 0 }, { s.total.length, s.total.morgue_length })
    assert.are.equal(3, srv.conn:call("LLEN", "done:A")) -- the missing orders only
  end)
end)
