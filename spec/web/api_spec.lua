-- The HTTP API of `luakiq run --web` against a running host and a real Redis:
-- status codes, shapes, effects in Redis, auth, limits; and that the CLI
-- (stats, jobs, morgue, admin) answers the same as the endpoints.
local core = require "luakiq.core"
local json = require "luakiq.json"
local redis = require "helpers.redis"
local host = require "helpers.host"
local web = require "web.support"
local q = host.quote

local srv, dir, proc, base

local function env() return "REDIS_URL=" .. srv.url end
local function req(method, path, opts) return web.request(base, method, path, opts) end
local function get(path) return req("GET", path) end
local function post(path, body) return req("POST", path, { body = body }) end

local function cli(args)
  local rc, out, err = host.exec(args, nil, env())
  assert.are.equal(0, rc, err)
  return out
end

local FUTURE = core.now() + 86400 -- jobs that will not come due while the spec runs

-- Enqueues Parked jobs through the API; jobs = {{id=, ...}}.
local function push(worker, jobs)
  local st, body, v = post("/api/v1/workers/" .. worker .. "/jobs", json.encode(jobs))
  assert.are.equal(200, st, body)
  return v
end

setup(function()
  srv = redis.start()
  dir = web.scriptdir()
  proc, base = web.start(dir, env())
end)
teardown(function()
  web.stop(proc, dir)
  if srv then srv:stop() end
end)
before_each(function()
  -- Only the Parked queue and the spec's own keys: the host keeps its registry
  -- and leases. Flaky and Slow jobs are drained by the host itself.
  local keys = srv.conn:call("KEYS", "luakiq:{Parked:*")
  for _, k in ipairs(keys) do srv.conn:call("DEL", k) end
  srv.conn:call("DEL", "web:fail", "web:hold", "web:done")
end)

describe("GET /api/v1/stats", function()
  it("answers exactly what `luakiq stats` prints (Lowkiq's shape)", function()
    push("Parked", { { id = "a", perform_in = FUTURE }, { id = "b", perform_in = FUTURE } })
    local st, body, v, headers = get("/api/v1/stats")
    assert.are.equal(200, st)
    assert.truthy(headers:lower():find("content%-type: application/json"))
    assert.are.equal(2, v.by_worker.Parked.length)
    assert.are.equal(0, v.by_worker.Parked.morgue_length)
    assert.are.equal(0, v.by_worker.Parked.lag)
    assert.is_number(v.total.length)
    assert.are.same(json.decode(cli("stats " .. q(dir))), v)
    assert.are.equal(cli("stats " .. q(dir)), body .. "\n")
  end)
end)

describe("GET /api/v1/tags/T/jobs", function()
  it("lists every worker's jobs tagged T, queued, in flight and dead, as `luakiq jobs DIR --tag T` does", function()
    push("Parked", { { id = "q1", perform_in = FUTURE, payload = "p", tags = { "red", "blue" } },
                     { id = "q2", perform_in = FUTURE, tags = { "blue" } } })
    -- (f1 dies first: the thread that holds s1 may be Flaky's too)
    srv.conn:call("SET", "web:fail", "1")
    push("Flaky", { { id = "f1", tags = { "red" } } })
    host.eventually(function() return select(3, get("/api/v1/workers/Flaky/jobs/f1")).state == "dead" end, 15, "f1 dead")
    srv.conn:call("SET", "web:hold", "1")
    push("Slow", { { id = "s1", tags = { "red" } } })
    local v, seen
    local ok = pcall(host.eventually, function()
      local st, body
      st, body, v = get("/api/v1/tags/red/jobs")
      assert.are.equal(200, st, body)
      local states = {}
      for i, j in ipairs(v.jobs) do states[i] = j.worker .. "/" .. j.id .. "/" .. j.state end
      seen = table.concat(states, " ")
      return seen == "Flaky/f1/dead Parked/q1/queued Slow/s1/in_flight"
    end, 15)
    assert.is_true(ok, "f1 dead and s1 in flight, got: " .. tostring(seen))
    assert.is_false(v.more)
    assert.are.same({ "blue", "red" }, v.jobs[2].tags)
    assert.are.same({ { "p", v.jobs[2].payloads[1][2] } }, v.jobs[2].payloads)
    assert.truthy(tostring(v.jobs[1].error):find("flaky failed", 1, true))
    -- the CLI prints the same jobs, one a line (s1 still held in flight: two
    -- reads that the end of its call could otherwise tell apart)
    local st, _, now = get("/api/v1/tags/red/jobs")
    assert.are.equal(200, st)
    local lines = {}
    for line in cli("jobs " .. q(dir) .. " --tag red"):gmatch("[^\n]+") do lines[#lines + 1] = json.decode(line) end
    for _, j in ipairs(lines) do j.running = nil end
    for _, j in ipairs(now.jobs) do j.running = nil end
    assert.are.same(now.jobs, lines)
    srv.conn:call("DEL", "web:hold", "web:fail")
    local _, _, b = get("/api/v1/tags/blue/jobs?limit=1")
    assert.are.same({ "q1" }, { b.jobs[1].id })
    assert.is_true(b.more)
    assert.are.same({ jobs = {}, more = false }, select(3, get("/api/v1/tags/none/jobs")))
    -- (the other specs count Flaky's morgue)
    assert.are.same({ deleted = 1 }, select(3, post("/api/web/workers/Flaky/morgue/delete", '{"ids":["f1"]}')))
  end)

  it("GET /api/v1/search?id=ID finds an id in every worker", function()
    push("Parked", { { id = "both", perform_in = FUTURE, tags = { "x" } } })
    srv.conn:call("SET", "web:hold", "1")
    push("Slow", { { id = "both" } })
    local v
    host.eventually(function()
      v = select(3, get("/api/v1/search?id=both"))
      return #v.jobs == 2 and v.jobs[2].state == "in_flight"
    end, 15, "both found")
    srv.conn:call("DEL", "web:hold")
    assert.are.same({ "Parked", "Slow" }, { v.jobs[1].worker, v.jobs[2].worker })
    assert.are.same({ "x" }, v.jobs[1].tags)
    assert.are.same(json.decode(cli("job " .. q(dir) .. " Parked both")), (function()
      local j = v.jobs[1]
      j.worker = nil
      return j
    end)())
    assert.are.same({ jobs = {} }, select(3, get("/api/v1/search?id=nowhere")))
    assert.are.equal(400, (get("/api/v1/search")))
  end)

  it("refuses a bad tag with 400 (the CLI: exit 2, one line)", function()
    local st, body = get("/api/v1/tags/" .. string.rep("x", 65) .. "/jobs")
    assert.are.equal(400, st, body)
    assert.truthy(body:find("over 64 bytes", 1, true), body)
    local rc, _, err = host.exec("jobs " .. q(dir) .. " --tag " .. string.rep("x", 65), nil, env())
    assert.are.equal(2, rc)
    assert.truthy(err:find("over 64 bytes", 1, true), err)
    rc, _, err = host.exec("jobs " .. q(dir) .. " Parked --tag x", nil, env())
    assert.are.equal(2, rc, err)
    rc, _, err = host.exec("jobs " .. q(dir) .. " --tag x --order id", nil, env())
    assert.are.equal(2, rc, err)
    assert.truthy(err:find("does not go with --tag", 1, true), err)
  end)
end)

describe("GET /api/web/dashboard", function()
  it("has every worker's numbers, totals and Redis info", function()
    push("Parked", { { id = "a", perform_in = FUTURE }, { id = "b", perform_in = FUTURE, retry_count = 2 } })
    local st, _, v = get("/api/web/dashboard")
    assert.are.equal(200, st)
    local names = {}
    for i, w in ipairs(v.queues) do
      names[i] = w.name
      for _, f in ipairs { "processed", "failed", "busy", "enqueued", "fresh", "retries", "dead", "lag" } do
        assert.is_number(w[f], w.name .. "." .. f)
      end
    end
    assert.are.same({ "Flaky", "Parked", "Slow" }, names)
    local parked = v.queues[2]
    assert.are.equal(2, parked.enqueued)
    assert.are.equal(1, parked.fresh)
    assert.are.equal(1, parked.retries)
    assert.is_true(v.total.enqueued >= 2)
    assert.truthy(v.redis_info.version:match("^%d+%.%d+"))
    assert.is_string(v.redis_info.used_memory_human)
    assert.is_number(v.redis_info.connected_clients)
    assert.is_number(v.redis_info.uptime_in_seconds)
    assert.are.equal(2, v.host.threads)
    assert.is_false(v.host.auth)
  end)
end)

describe("job listings", function()
  local function jobs(query)
    local st, body, v = get("/api/web/workers/Parked/jobs?" .. query)
    assert.are.equal(200, st, body)
    return v
  end
  local function ids(list)
    local out = {}
    for i, j in ipairs(list) do out[i] = j.id end
    return out
  end

  it("orders queued jobs by id, perform_in and retry_count, both ways", function()
    push("Parked", {
      { id = "b", perform_in = FUTURE + 1, retry_count = 0, payload = { n = 1 } },
      { id = "a", perform_in = FUTURE + 3, retry_count = 2 },
      { id = "c", perform_in = FUTURE + 2 },
    })
    assert.are.same({ "a", "b", "c" }, ids(jobs("what=queue&order=id").jobs))
    assert.are.same({ "c", "b", "a" }, ids(jobs("what=queue&order=id&dir=desc").jobs))
    assert.are.same({ "b", "c", "a" }, ids(jobs("what=queue&order=perform_in").jobs))
    assert.are.same({ "a", "c", "b" }, ids(jobs("order=perform_in&dir=desc").jobs))
    assert.are.same({ "c", "b", "a" }, ids(jobs("what=queue&order=retry_count").jobs))
    assert.are.same({ "a", "b" }, ids(jobs("what=queue&order=retry_count&min=0&dir=desc").jobs))
    assert.are.same({ "c" }, ids(jobs("what=queue&order=retry_count&max=-1").jobs))
    assert.are.same({ "b", "c" }, ids(jobs("what=queue&order=id&min=b&max=%5Bc").jobs))
    local v = jobs("what=queue&order=id&max=a")
    assert.are.same({ id = "a", perform_in = FUTURE + 3, retry_count = 2, payloads = { { "", v.jobs[1].payloads[1][2] } } },
      v.jobs[1])
    assert.are.same({ n = 1 }, jobs("what=queue&order=id&min=b&max=b").jobs[1].payloads[1][1])
  end)

  it("pages by 100 and says whether there is more", function()
    local list = {}
    for i = 1, 150 do list[i] = { id = string.format("j%03d", i), perform_in = FUTURE + i } end
    push("Parked", list)
    local p1 = jobs("what=queue&order=id")
    assert.are.equal(100, #p1.jobs)
    assert.is_true(p1.more)
    assert.are.equal("j001", p1.jobs[1].id)
    local p2 = jobs("what=queue&order=id&offset=100")
    assert.are.equal(50, #p2.jobs)
    assert.is_false(p2.more)
    assert.are.equal("j101", p2.jobs[1].id)
    assert.is_nil(p2.next)
    -- next: the cursor of the following page (the same page as offset=100)
    local c2 = jobs("what=queue&order=id&cursor=" .. p1.next)
    assert.are.same(p2, c2)
    assert.are.equal("j150", jobs("what=queue&order=perform_in&dir=desc").jobs[1].id)
    -- and the CLI names the cursor of its next page on stderr
    local rc, out, err = host.exec("jobs " .. q(dir) .. " Parked queue --order id --limit 100", nil, env())
    assert.are.equal(0, rc, err)
    assert.are.equal(100, select(2, out:gsub("\n", "")))
    assert.truthy(err:find("--cursor " .. p1.next, 1, true), err)
    local _, out2, err2 = host.exec("jobs " .. q(dir) .. " Parked queue --order id --cursor " .. p1.next, nil, env())
    assert.are.equal(50, select(2, out2:gsub("\n", "")))
    assert.are.equal("", err2)
    -- a cursor of another order is refused (400, one line)
    local st, body = get("/api/web/workers/Parked/jobs?what=queue&order=perform_in&cursor=" .. p1.next)
    assert.are.equal(400, st, body)
    -- the cursor alone continues its listing: order, dir and range come with it
    local d1 = jobs("what=queue&order=id&dir=desc&max=j120&limit=10")
    assert.are.same({ "j120", "j111" }, { d1.jobs[1].id, d1.jobs[10].id })
    local d2 = jobs("what=queue&cursor=" .. d1.next .. "&limit=10")
    assert.are.same(jobs("what=queue&order=id&dir=desc&max=j120&limit=10&offset=10").jobs, d2.jobs)
    assert.are.same({ "j110", "j101" }, { d2.jobs[1].id, d2.jobs[10].id })
    local rc3, out3, err3 = host.exec("jobs " .. q(dir) .. " Parked queue --order id --desc --max '[j120' --limit 10",
      nil, env())
    assert.are.equal(0, rc3, err3)
    local cur = assert(err3:match("%-%-cursor (%S+)"), err3)
    local _, out4, err4 = host.exec("jobs " .. q(dir) .. " Parked queue --limit 10 --cursor " .. cur, nil, env())
    assert.are.equal("", err4:gsub("luakiq: more: [^\n]*\n", ""))
    assert.are.same(ids(d2.jobs), ids(web.lines(out4)))
    assert.are_not.equal(out3, out4)
    -- another range than the cursor's is refused (exit 2, one line)
    local rc5, _, err5 = host.exec("jobs " .. q(dir) .. " Parked queue --max '[j130' --cursor " .. cur, nil, env())
    assert.are.equal(2, rc5)
    assert.are.equal("luakiq: the cursor is for the range - to [j120, not - to [j130\n", err5)
  end)

  it("gives the same records as `luakiq jobs` and `luakiq morgue list`", function()
    push("Parked", { { id = "x", perform_in = FUTURE, retry_count = 1, payload = "p" }, { id = "y", perform_in = FUTURE } })
    assert.are.same(web.lines(cli("jobs " .. q(dir) .. " Parked queue --order id --desc")),
      jobs("what=queue&order=id&dir=desc").jobs)
    assert.are.equal(200, (post("/api/web/workers/Parked/queue/kill_failed", "")))
    local morgue = jobs("what=morgue&order=id").jobs
    assert.are.same({ "x" }, ids(morgue))
    assert.is_number(morgue[1].updated_at)
    assert.are.same({ { "p", morgue[1].payloads[1][2] } }, morgue[1].payloads)
    assert.are.same(web.lines(cli("jobs " .. q(dir) .. " Parked morgue --order updated_at")), jobs("what=morgue").jobs)
    assert.are.same(web.lines(cli("morgue " .. q(dir) .. " Parked list")), jobs("what=morgue&order=id").jobs)
  end)

  it("lists jobs in flight", function()
    srv.conn:call("SET", "web:hold", "1")
    push("Slow", { { id = "s1", payload = "held" } })
    local v = host.eventually(function()
      local st, _, r = get("/api/web/workers/Slow/jobs?what=busy")
      return st == 200 and #r.jobs == 1 and r
    end, 10, "the held job in flight")
    assert.are.equal("s1", v.jobs[1].id)
    assert.are.same(web.lines(cli("jobs " .. q(dir) .. " Slow busy")), v.jobs)
    -- when the call's batch was fetched, and whole seconds since
    local t = core.now()
    assert.is_number(v.jobs[1].fetched_at)
    assert.is_true(v.jobs[1].fetched_at <= t and v.jobs[1].fetched_at > t - 10, tostring(v.jobs[1].fetched_at))
    assert.are.equal(math.floor(v.jobs[1].running), v.jobs[1].running)
    assert.is_true(v.jobs[1].running >= 0 and v.jobs[1].running <= t - v.jobs[1].fetched_at + 1)
    core.sleep(1.2)
    local _, _, later = get("/api/web/workers/Slow/jobs?what=busy")
    assert.are.equal(v.jobs[1].fetched_at, later.jobs[1].fetched_at)
    assert.is_true(later.jobs[1].running >= 1, tostring(later.jobs[1].running))
    local line = web.lines(cli("jobs " .. q(dir) .. " Slow busy"))[1]
    assert.are.equal(v.jobs[1].fetched_at, line.fetched_at)
    assert.is_true(line.running >= 1, tostring(line.running))
    srv.conn:call("DEL", "web:hold")
    host.eventually(function()
      local _, _, r = get("/api/web/workers/Slow/jobs?what=busy")
      return #r.jobs == 0
    end, 10, "the held job done")
  end)

  it("refuses bad parameters with 400 and unknown workers with 404", function()
    for _, query in ipairs { "what=nope", "what=queue&order=updated_at", "what=morgue&order=perform_in",
                             "dir=sideways", "order=perform_in&min=soon", "offset=-1", "limit=0", "limit=501" } do
      local st, _, v = get("/api/web/workers/Parked/jobs?" .. query)
      assert.are.equal(400, st, query)
      assert.is_string(v.error)
    end
    local st, _, v = get("/api/web/workers/Nope/jobs")
    assert.are.equal(404, st)
    assert.truthy(v.error:find("unknown worker"))
  end)
end)

describe("admin actions", function()
  local function kill_all()
    local st, _, v = post("/api/web/workers/Parked/queue/kill_failed", "")
    assert.are.equal(200, st)
    return v
  end
  local function stats() return select(3, get("/api/v1/stats")).by_worker.Parked end

  it("morgue requeue and delete by ids and all, with counts", function()
    push("Parked", { { id = "1", retry_count = 0, perform_in = FUTURE }, { id = "2", retry_count = 0, perform_in = FUTURE },
                     { id = "3", retry_count = 0, perform_in = FUTURE }, { id = "4", retry_count = 0, perform_in = FUTURE } })
    assert.are.same({ killed = 4 }, kill_all())
    assert.are.same({ length = 0, morgue_length = 4 }, { length = stats().length, morgue_length = stats().morgue_length })
    local st, _, v = post("/api/web/workers/Parked/morgue/requeue", '{"ids":["1","nope"]}')
    assert.are.equal(200, st)
    assert.are.same({ requeued = 1 }, v)
    assert.are.equal(1, stats().length)
    assert.are.same({ deleted = 1 }, select(3, post("/api/web/workers/Parked/morgue/delete", '{"ids":[2]}')))
    assert.are.equal(2, stats().morgue_length)
    assert.are.same({ requeued = 2 }, select(3, post("/api/web/workers/Parked/morgue/requeue", '{"all":true}')))
    assert.are.same({ length = 3, morgue_length = 0 }, { length = stats().length, morgue_length = stats().morgue_length })
    -- the requeued job is due now, fresh again
    local j = select(3, get("/api/web/workers/Parked/jobs?order=id&min=1&max=1")).jobs[1]
    assert.are.equal(-1, j.retry_count)
    assert.is_true(j.perform_in <= core.now())
    push("Parked", { { id = "5", retry_count = 1, perform_in = FUTURE } })
    assert.are.same({ killed = 1 }, kill_all())
    assert.are.same({ deleted = 1 }, select(3, post("/api/web/workers/Parked/morgue/delete", '{"all":true}')))
    assert.are.equal(0, stats().morgue_length)
  end)

  it("perform all now, delete all failed, delete queued ids; the CLI agrees", function()
    push("Parked", { { id = "f1", perform_in = FUTURE }, { id = "f2", perform_in = FUTURE },
                     { id = "r1", retry_count = 3, perform_in = FUTURE }, { id = "r2", retry_count = 0, perform_in = FUTURE } })
    assert.are.same({ changed = 4 }, select(3, post("/api/web/workers/Parked/queue/perform_now", "")))
    for _, j in ipairs(select(3, get("/api/web/workers/Parked/jobs?order=id")).jobs) do
      assert.is_true(j.perform_in <= core.now(), j.id)
    end
    assert.are.same({ deleted = 2 }, select(3, post("/api/web/workers/Parked/queue/delete_failed", "")))
    assert.are.same({ deleted = 1 }, select(3, post("/api/web/workers/Parked/queue/delete", '{"ids":["f1","zz"]}')))
    assert.are.same({ "f2" }, (function()
      local out = {}
      for i, j in ipairs(select(3, get("/api/web/workers/Parked/jobs?order=id")).jobs) do out[i] = j.id end
      return out
    end)())
    -- the same actions from the CLI print the same JSON
    assert.are.same({ deleted = 1 }, json.decode(cli("admin " .. q(dir) .. " Parked delete f2")))
    assert.are.same({ changed = 0 }, json.decode(cli("admin " .. q(dir) .. " Parked perform-now")))
    assert.are.same({ killed = 0 }, json.decode(cli("admin " .. q(dir) .. " Parked kill-failed")))
    assert.are.same({ requeued = 0 }, json.decode(cli("morgue " .. q(dir) .. " Parked requeue --all")))
  end)

  it("requeued dead jobs run again", function()
    srv.conn:call("SET", "web:fail", "1")
    push("Flaky", { { id = "d1" }, { id = "d2" } })
    host.eventually(function()
      local _, _, v = get("/api/web/workers/Flaky/jobs?what=morgue")
      return #v.jobs == 2
    end, 10, "both jobs dead")
    srv.conn:call("DEL", "web:fail")
    assert.are.same({ requeued = 1 }, select(3, post("/api/web/workers/Flaky/morgue/requeue", '{"ids":["d1"]}')))
    host.eventually(function() return srv.conn:call("LRANGE", "web:done", 0, -1)[1] == "d1" end, 10, "d1 performed")
    assert.are.same({ deleted = 1 }, select(3, post("/api/web/workers/Flaky/morgue/delete", '{"ids":["d2"]}')))
  end)

  it("refuses bad bodies (400), unknown workers and routes (404), wrong methods (405)", function()
    for _, b in ipairs { "", "{", "[]", '{"ids":[]}', '{"ids":"1"}', '{"ids":[{}]}', '{"all":true,"ids":["1"]}' } do
      local st, _, v = post("/api/web/workers/Parked/morgue/requeue", b)
      assert.are.equal(400, st, b)
      assert.is_string(v.error, b)
    end
    assert.are.equal(400, (post("/api/web/workers/Parked/queue/delete", '{"all":true}')))
    assert.are.equal(404, (post("/api/web/workers/Nope/queue/perform_now", "")))
    assert.are.equal(404, (post("/api/web/workers/Parked/queue/explode", "")))
    assert.are.equal(404, (get("/api/v2/stats")))
    assert.are.equal(404, (get("/nothing/here")))
    local st, _, v = get("/api/web/workers/Parked/queue/perform_now")
    assert.are.equal(405, st)
    assert.is_string(v.error)
    assert.are.equal(405, (post("/api/v1/stats", "")))
  end)
end)

describe("POST /api/v1/workers/NAME/jobs", function()
  local function parked()
    return select(3, get("/api/web/workers/Parked/jobs?order=id&limit=500")).jobs
  end

  it("enqueues a JSON array through the client middlewares", function()
    local st, _, v = post("/api/v1/workers/Parked/jobs",
      json.encode { { id = "e1", payload = "tag:one", perform_in = FUTURE }, { id = 7, payload = { k = 1 }, score = 5 } })
    assert.are.equal(200, st)
    assert.are.same({ enqueued = 2 }, v)
    local list = parked()
    assert.are.equal(2, #list)
    assert.are.same({ "7", "e1" }, { list[1].id, list[2].id })
    assert.are.same({ { { k = 1 }, 5 } }, list[1].payloads)
    assert.are.equal("tag:one:mw", list[2].payloads[1][1])
  end)

  it("accepts JSON lines like `luakiq enqueue`", function()
    local st, _, v = post("/api/v1/workers/Parked/jobs", '{"id":"l1"}\n\n{"id":"l2","payload":2}\n')
    assert.are.equal(200, st)
    assert.are.same({ enqueued = 2 }, v)
  end)

  it("enqueues nothing from a bad request (400) and 404s unknown workers", function()
    local cases = {
      '[{"id":"ok1"},{"payload":1}]',            -- missing id
      '[{"id":"ok1"},{"id":"x","bogus":1}]',     -- unknown field
      '[{"id":"ok1"}',                           -- bad JSON
      '{"id":"ok1"}\n{"id":',                    -- bad JSON line
      '{"id":"ok1","perform_in":"soon"}',        -- bad field type
      '"just a string"',
      '',
    }
    for _, b in ipairs(cases) do
      local st, _, v = post("/api/v1/workers/Parked/jobs", b)
      assert.are.equal(400, st, b)
      assert.is_string(v.error, b)
    end
    assert.are.equal(0, #parked())
    local st, _, v = post("/api/v1/workers/Nope/jobs", '[{"id":"1"}]')
    assert.are.equal(404, st)
    assert.truthy(v.error:find("unknown worker 'Nope'", 1, true))
    assert.are.equal(0, #parked())
  end)

  it("turns a Lua error into a 500 with a JSON body and keeps serving", function()
    local st, _, v = post("/api/v1/workers/Parked/jobs", '[{"id":"1","payload":"explode"}]')
    assert.are.equal(500, st)
    assert.truthy(v.error:find("middleware exploded", 1, true))
    assert.are.equal(0, #parked())
    assert.are.equal(200, (get("/api/v1/stats")))
    assert.truthy(proc:log():find("middleware exploded", 1, true))
  end)

  it("refuses bodies over 1 MiB with 413", function()
    local big = '[{"id":"big","payload":"' .. string.rep("x", 1100000) .. '"}]'
    assert.are.equal(413, (post("/api/v1/workers/Parked/jobs", big)))
    assert.are.equal(413, (req("POST", "/api/v1/workers/Parked/jobs",
      { body = big, headers = { "Transfer-Encoding: chunked" } })))
    assert.are.equal(200, (get("/api/v1/stats")))
    assert.are.equal(0, #parked())
  end)
end)

describe("GET /metrics", function()
  it("is Prometheus text with queue, morgue, lag, processed, failed, busy, RSS and threads", function()
    push("Parked", { { id = "m1", perform_in = FUTURE }, { id = "m2", perform_in = FUTURE } })
    push("Flaky", { { id = "ok" } })
    host.eventually(function() return srv.conn:call("LLEN", "web:done") == 1 end, 10, "Flaky performed")
    local st, body, _, headers = get("/metrics")
    assert.are.equal(200, st)
    assert.truthy(headers:find("text/plain; version=0.0.4", 1, true))
    assert.truthy(body:find('\nluakiq_queue_length{worker="Parked"} 2\n', 1, true))
    for _, name in ipairs { "luakiq_morgue_length", "luakiq_queue_lag_seconds", "luakiq_busy_jobs",
                            "luakiq_processed_total", "luakiq_failed_total" } do
      assert.truthy(body:find("# TYPE " .. name .. " ", 1, true), name)
      assert.truthy(body:find("\n" .. name .. '{worker="Flaky"} [%d.]+\n'), name)
    end
    assert.truthy(tonumber(body:match('\nluakiq_processed_total{worker="Flaky"} (%d+)')) >= 1)
    assert.truthy(tonumber(body:match("\nprocess_resident_memory_bytes (%d+)")) > 1e6)
    assert.truthy(body:find('\nluakiq_thread_lua_memory_bytes{thread="web"} %d+'))
    assert.truthy(body:find('\nluakiq_thread_lua_memory_bytes{thread="t1"} %d+'))
    local done = 0
    for n in body:gmatch('\nluakiq_thread_jobs_performed_total{thread="t%d"} (%d+)') do done = done + tonumber(n) end
    assert.is_true(done >= 1)
    assert.truthy(body:find("\nluakiq_redis_up 1\n", 1, true))
    -- every sample line is NAME{labels} VALUE
    for line in body:gmatch("[^\n]+") do
      if not line:match("^#") then assert.truthy(line:match("^[%w_]+{?[^}]*}? %-?[%d.e+]+$"), line) end
    end
  end)
end)

describe("stalls in /metrics and the dashboard", function()
  it("show the oldest running call per worker, its timeout, and the timeouts counter", function()
    srv.conn:call("SET", "web:hold", "1")
    push("Slow", { { id = "held" } })
    host.eventually(function()
      local _, _, v = get("/api/web/dashboard")
      return #v.calls == 1 and v.calls[1].running > 0.3
    end, 10, "a running call")
    local _, _, v = get("/api/web/dashboard")
    assert.truthy(v.calls[1].thread:match("^t%d+$"), v.calls[1].thread)
    assert.are.same({ "Slow", 600 }, { v.calls[1].worker, v.calls[1].timeout })
    local _, body = get("/metrics")
    local age = tonumber(body:match('\nluakiq_oldest_call_seconds{worker="Slow"} ([%d.e+-]+)\n'))
    assert.is_true(age > 0.3 and age < 30, tostring(age))
    assert.truthy(body:find('\nluakiq_oldest_call_seconds{worker="Parked"} 0\n', 1, true))
    assert.truthy(body:find('\nluakiq_timeouts_total{worker="Slow"} 0\n', 1, true))
    srv.conn:call("DEL", "web:hold")
    host.eventually(function() return #select(3, get("/api/web/dashboard")).calls == 0 end, 10, "the call ended")
  end)
end)

describe("luakiq_thread_jobs_performed_total", function()
  local function performed()
    local _, body = get("/metrics")
    local n = 0
    for v in body:gmatch('\nluakiq_thread_jobs_performed_total{thread="t%d"} (%d+)') do n = n + tonumber(v) end
    return n
  end
  it("counts a job whose id has a comma as one job", function()
    local before = performed()
    push("Flaky", { { id = "x,y" } })
    host.eventually(function() return srv.conn:call("LLEN", "web:done") == 1 end, 10, "Flaky performed")
    host.eventually(function() return performed() > before end, 10, "counted")
    core.sleep(0.3)
    assert.are.equal(before + 1, performed())
  end)
end)

describe("GET / (the dashboard page)", function()
  it("is one self-contained HTML page", function()
    local st, body, _, headers = get("/")
    assert.are.equal(200, st)
    assert.truthy(headers:lower():find("content%-type: text/html"))
    assert.truthy(body:find("<title>luakiq</title>", 1, true))
    -- nothing loaded from elsewhere: no script or style files, no external URLs
    assert.falsy(body:find("<script src", 1, true))
    assert.falsy(body:find("stylesheet", 1, true))
    assert.falsy(body:find('src="http', 1, true))
    assert.falsy(body:find('href="http', 1, true))
    local hst, hbody = req("HEAD", "/", { head = true })
    assert.are.equal(200, hst)
    assert.falsy(hbody:find("<html", 1, true)) -- curl -I writes the headers only
  end)
end)

describe("security", function()
  it("refuses other Host names and cross-site mutations without a token", function()
    assert.are.equal(403, (req("GET", "/api/v1/stats", { headers = { "Host: evil.example" } })))
    assert.are.equal(200, (req("GET", "/api/v1/stats", { headers = { "Host: localhost:1" } })))
    -- two Host headers: a 400, whichever comes first (RFC 9112; sent raw:
    -- curl sends one)
    local port = base:match(":(%d+)$")
    for _, two in ipairs { "Host: localhost:1\r\nHost: evil.example", "Host: evil.example\r\nHost: localhost:1",
                           "Host: localhost:1\r\nhost: localhost:1" } do
      local raw = "GET /api/v1/stats HTTP/1.1\r\n" .. two .. "\r\nConnection: close\r\n\r\n"
      local _, out = host.sh_out("bash -c " .. q("exec 3<>/dev/tcp/127.0.0.1/" .. port ..
        "; printf '%s' \"$1\" >&3; timeout 5 cat <&3") .. " sh " .. q(raw))
      assert.truthy(out:find("^HTTP/1%.1 400"), out)
      assert.truthy(out:find("more than one Host header", 1, true), out)
    end
    local st = req("POST", "/api/web/workers/Parked/queue/perform_now",
      { body = "", headers = { "Origin: http://evil.example" } })
    assert.are.equal(403, st)
    st = req("POST", "/api/web/workers/Parked/queue/perform_now",
      { body = "", headers = { "Origin: " .. base } })
    assert.are.equal(200, st)
  end)

  it("with a token, every endpoint needs it, reads included: bearer or the sign-in cookie", function()
    local p, b = web.start(dir, env() .. " LUAKIQ_WEB_TOKEN=s3cret")
    local ok, err = pcall(function()
      local function call(method, path, headers, body)
        return web.request(b, method, path, { headers = headers, body = body })
      end
      -- every endpoint, with a body that would succeed
      local endpoints = {
        { "POST", "/api/v1/workers/Parked/jobs", '[{"id":"t1","perform_in":' .. FUTURE .. ',"payload":"secret"}]' },
        { "GET", "/api/v1/stats" }, { "GET", "/api/web/dashboard" }, { "GET", "/metrics" },
        { "GET", "/api/web/workers/Parked/jobs?what=queue" }, { "GET", "/api/web/workers/Parked/jobs?what=morgue" },
        { "GET", "/api/web/workers/Parked/jobs?what=busy" }, { "GET", "/api/v1/workers/Parked/jobs/t1" },
        { "POST", "/api/web/workers/Parked/morgue/requeue", '{"all":true}' },
        { "POST", "/api/web/workers/Parked/morgue/delete", '{"all":true}' },
        { "POST", "/api/web/workers/Parked/queue/perform_now", "" },
        { "POST", "/api/web/workers/Parked/queue/kill_failed", "" },
        { "POST", "/api/web/workers/Parked/queue/delete_failed", "" },
        { "POST", "/api/web/workers/Parked/queue/delete", '{"ids":["nope"]}' },
        { "POST", "/api/v1/workers/Parked/pause", "" }, { "POST", "/api/v1/workers/Parked/resume", "" },
        { "POST", "/api/web/workers/Parked/queue/pause", "" }, { "POST", "/api/web/workers/Parked/queue/resume", "" },
        { "GET", "/api/v1/failures" }, { "GET", "/api/v1/failures/jobs?error=x" },
        { "POST", "/api/v1/failures/requeue", '{"error":"x"}' }, { "POST", "/api/v1/failures/delete", '{"error":"x"}' },
        { "GET", "/api/v1/tags/t/jobs" }, { "GET", "/api/v1/search?id=t1" },
      }
      local wrong = { {}, { "Authorization: Bearer wrong" }, { "Authorization: Bearer s3creT" },
                      { "Authorization: Basic czNjcmV0" }, { "Authorization: Bearer s3cret2" },
                      { "Authorization: s3cret" }, { "Cookie: luakiq_token=wrong" }, { "Cookie: other=s3cret" },
                      -- a rebound DNS name (Host of another site) gets nothing either
                      { "Host: evil.example" } }
      for _, e in ipairs(endpoints) do
        for _, h in ipairs(wrong) do
          local st, _, v, headers = call(e[1], e[2], h, e[3])
          assert.are.equal(401, st, e[1] .. " " .. e[2] .. " " .. (h[1] or "no auth"))
          assert.are.equal("missing or wrong token", v.error)
          assert.truthy(headers:find("WWW-Authenticate: Bearer", 1, true))
        end
      end
      assert.are.equal(0, #srv.conn:call("KEYS", "luakiq:{Parked:*}:payloads:t1"), "nothing was enqueued")
      -- the bearer token opens each of them, from any Host name
      for _, e in ipairs(endpoints) do
        local st, text = call(e[1], e[2], { "Authorization: Bearer s3cret", "Host: jobs.example" }, e[3])
        assert.are.equal(200, st, e[1] .. " " .. e[2] .. ": " .. text)
      end
      -- the page itself holds no data and is served to anyone (it signs in)
      local st, page = call("GET", "/")
      assert.are.equal(200, st)
      assert.falsy(page:find("secret", 1, true))
      -- signing in: a wrong token is 401 and sets no cookie; the right one sets
      -- an HttpOnly, SameSite=Strict cookie (Secure behind a TLS proxy)
      local v, headers
      st, _, v, headers = call("POST", "/api/web/login", nil, '{"token":"s3cre"}')
      assert.are.equal(401, st)
      assert.are.equal("wrong token", v.error)
      assert.falsy(headers:lower():find("set-cookie", 1, true))
      assert.are.equal(400, (call("POST", "/api/web/login", nil, '{"tok":"s3cret"}')))
      st, _, v, headers = call("POST", "/api/web/login", nil, '{"token":"s3cret"}')
      assert.are.equal(200, st)
      assert.are.same({ signed_in = true }, v)
      local cookie = headers:match("[Ss]et%-[Cc]ookie: ([^\r\n]*)")
      assert.are.equal("luakiq_token=s3cret; Path=/; HttpOnly; SameSite=Strict", cookie)
      st, _, _, headers = call("POST", "/api/web/login", { "X-Forwarded-Proto: https" }, "token=s3cret")
      assert.are.equal(200, st)
      assert.truthy(headers:find("HttpOnly; SameSite=Strict; Secure", 1, true), headers)
      -- the cookie opens every endpoint (as the browser sends it: same origin)
      local jar = { "Cookie: theme=dark; luakiq_token=s3cret", "Origin: " .. b }
      for _, e in ipairs(endpoints) do
        local st2, text = call(e[1], e[2], jar, e[3])
        assert.are.equal(200, st2, e[1] .. " " .. e[2] .. ": " .. text)
      end
      assert.truthy(select(2, call("GET", "/api/v1/workers/Parked/jobs/t1", jar)):find("secret", 1, true))
      -- another site's page cannot use it (SameSite, and the Origin check)
      assert.are.equal(403, (call("POST", "/api/web/workers/Parked/queue/perform_now",
        { "Cookie: luakiq_token=s3cret", "Origin: http://evil.example" }, "")))
      -- signing out clears it
      st, _, v, headers = call("POST", "/api/web/logout", jar, "")
      assert.are.equal(200, st)
      assert.are.same({ signed_in = false }, v)
      assert.truthy(headers:find("luakiq_token=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0", 1, true), headers)
      assert.is_true(select(3, call("GET", "/api/web/dashboard", { "Authorization: Bearer s3cret" })).host.auth)
    end)
    web.stop(p)
    assert(ok, err)
  end)

  it("metrics_public = true serves /metrics without the token, and nothing else", function()
    local d2 = host.scriptdir {
      ["config.lua"] = "return { threads_per_node = 1, web_token = 'tok', metrics_public = true }",
      ["workers/W.lua"] = "return { perform = function() end }",
    }
    local p, b = web.start(d2, env())
    local ok, err = pcall(function()
      local st, text = web.request(b, "GET", "/metrics")
      assert.are.equal(200, st)
      assert.truthy(text:find("luakiq_queue_length{worker=\"W\"}", 1, true), text)
      assert.are.equal(401, (web.request(b, "GET", "/api/v1/stats")))
      assert.are.equal(401, (web.request(b, "GET", "/api/web/dashboard")))
    end)
    web.stop(p, d2)
    assert(ok, err)
    -- not a boolean: refused at load, one line, exit 2
    local d3 = host.scriptdir {
      ["config.lua"] = "return { metrics_public = 'yes' }",
      ["workers/W.lua"] = "return { perform = function() end }",
    }
    local rc, _, e = host.exec("plan " .. q(d3), nil, env())
    host.sh("rm -rf " .. q(d3))
    assert.are.equal(2, rc)
    assert.truthy(e:match("^luakiq: [^\n]*metrics_public[^\n]*true or false[^\n]*\n$"), e)
  end)

  it("never shows the Redis password: answers, errors and the log", function()
    local pw = "pw-" .. core.token()
    local own = redis.start()
    own.conn:call("CONFIG", "SET", "requirepass", pw)
    own.conn:call("AUTH", pw)
    local url = own.url:gsub("^redis://", "redis://:" .. pw .. "@")
    local p, b = web.start(dir, "REDIS_URL=" .. url .. " LUAKIQ_WEB_TOKEN=tok")
    local ok, err = pcall(function()
      local auth = { "Authorization: Bearer tok" }
      local seen = {}
      for _, path in ipairs { "/api/v1/stats", "/api/web/dashboard", "/metrics", "/api/web/workers/Parked/jobs",
                              "/api/web/workers/Parked/jobs?what=busy", "/" } do
        local st, text = web.request(b, "GET", path, { headers = auth })
        assert.are.equal(200, st, path)
        seen[#seen + 1] = text
      end
      own:down() -- now every read fails: the errors must not show it either
      for _, path in ipairs { "/api/v1/stats", "/api/web/dashboard", "/api/web/workers/Parked/jobs" } do
        local st, text = web.request(b, "GET", path, { headers = auth })
        assert.are.equal(500, st, path .. ": " .. text)
        seen[#seen + 1] = text
      end
      local _, text = web.request(b, "GET", "/metrics", { headers = auth })
      assert.truthy(text:find("luakiq_redis_up 0", 1, true), text)
      seen[#seen + 1] = text
      for _, text2 in ipairs(seen) do assert.falsy(text2:find(pw, 1, true), text2) end
      assert.falsy(p:log():find(pw, 1, true), p:log())
    end)
    web.stop(p)
    own:stop()
    assert(ok, err)
  end)

  it("refuses a non-loopback address without a token at start-up (exit 2, one line)", function()
    local rc, out, err = host.exec("run " .. q(dir) .. " --web 0.0.0.0:" .. core.free_port(), nil, env())
    assert.are.equal(2, rc)
    assert.are.equal("", out)
    assert.truthy(err:match("^luakiq: [^\n]*not a loopback address[^\n]*\n$"), err)
    rc, _, err = host.exec("run " .. q(dir) .. " --web localhost", nil, env())
    assert.are.equal(2, rc)
    assert.truthy(err:find("ADDR:PORT", 1, true))
  end)

  it("exits 1 with one error line when the port is taken", function()
    local port = base:match(":(%d+)$")
    local rc, _, err = host.exec("run " .. q(dir) .. " --web 127.0.0.1:" .. port, nil, env())
    assert.are.equal(1, rc)
    assert.truthy(err:find("cannot listen on 127.0.0.1:" .. port, 1, true), err)
  end)

  it("takes web from config.lua", function()
    local d2 = host.scriptdir {
      ["config.lua"] = "return { threads_per_node = 1, web = '127.0.0.1:" .. core.free_port() .. "' }",
      ["workers/W.lua"] = "return { perform = function() end }",
    }
    local p = host.spawn("run " .. q(d2), env())
    local url = "http://" .. host.read(d2 .. "/config.lua"):match("'([^']+)'")
    local ok = pcall(host.eventually, function()
      local okr, st = pcall(web.request, url, "GET", "/api/v1/stats")
      return okr and st == 200
    end, 15, "web from config")
    p:signal("TERM")
    p:wait(10)
    host.sh("rm -rf " .. q(d2))
    assert.is_true(ok, p:log())
  end)
end)
