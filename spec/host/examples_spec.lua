-- The shipped example directories, run as they are by the real binary against a
-- private redis-server: examples/orders, examples/by_node, examples/migration.
-- Run from the source tree (ctest's working directory), like the docs show.
local redis = require "helpers.redis"
local host = require "helpers.host"
local json = require "luakiq.json"
local keys = require "luakiq.lib.keys"
local q = host.quote

local srv = host.fixture()

local function env(extra) return "REDIS_URL=" .. srv.url .. (extra and (" " .. extra) or "") end

-- luakiq ARGS; asserts exit 0 and returns stdout.
local function ok(args, stdin, extra)
  local rc, out, err = host.exec(args, stdin, env(extra))
  assert.are.equal(0, rc, "luakiq " .. args .. ": " .. tostring(err))
  return out
end

local function json_lines(out)
  local list = {}
  for line in out:gmatch("[^\n]+") do list[#list + 1] = json.decode(line) end
  return list
end

-- luakiq jobs DIR WORKER queue|morgue -> array of records; by id.
local function jobs(dir, worker, what)
  local list = json_lines(ok("jobs " .. q(dir) .. " " .. worker .. " " .. what))
  local by_id = {}
  for _, r in ipairs(list) do by_id[r.id] = r end
  return list, by_id
end

local function stats(dir) return json.decode(ok("stats " .. q(dir))) end

local function hget(key, field)
  local v = srv.conn:call("HGET", key, field)
  return v and tonumber(v) or nil
end

-- Starts `luakiq run DIR` and stops it (TERM, exit 0 expected) when the test ends.
local function run(dir, extra)
  local p = host.spawn("run " .. q(dir), env(extra))
  finally(function() if p:alive() then p:kill() end end)
  return p
end

local function stop(p)
  assert.is_true(p:signal("TERM"))
  assert.are.equal(0, p:wait(15), p:log())
end

local function snapshot(id, version, status)
  return json.encode { id = id, score = version, payload = { version = version, status = status } }
end

-- The README's first command, with the binary under test (LUAKIQ_BIN: no
-- build) and a private redis-server of its own, as on a fresh machine.
describe("tools/run-example.sh", function()
  it("enqueues the sample orders, runs them and shows the broken one retrying", function()
    local rc, out, err = host.sh_out("env -u REDIS_URL LUAKIQ_BIN=" .. q(host.bin) .. " tools/run-example.sh examples/orders 5")
    assert.are.equal(0, rc, out .. err)
    local all = out .. err
    assert.truthy(out:find("enqueued 101 jobs", 1, true), all)
    assert.truthy(out:find('before:\n{"by_worker":{"Orders":{"expired":0,"lag":[%d.e-]+,"length":21,'), all)
    local after = assert(out:match('after:\n({[^\n]*})'), all)
    local retrying = out:match("retrying:.-\n.-\n(.*)$") or ""
    local listed = {}
    for line in retrying:gmatch("[^\n]+") do
      local job = json.decode(line)
      listed[job.id] = job
      -- (what fails is order-99's call: its own error, on every id of it)
      assert.truthy(job.error:find("order order-99: cannot apply a broken snapshot", 1, true), line)
      -- (failed together, so retried together: one count; 1 within 5 s unless the start was slow)
      assert.is_true(job.retry_count >= 0, line)
      listed.rc = listed.rc or job.retry_count
      assert.are.equal(listed.rc, job.retry_count, line)
    end
    listed.rc = nil
    assert.truthy(listed["order-99"], all)
    assert.are.equal(json.decode(after).by_worker.Orders.length, (function()
      local n = 0
      for _ in pairs(listed) do n = n + 1 end
      return n
    end)())
    -- every other order ran once, its five snapshots merged, the newest applied
    for i = 1, 20 do
      local id = "order-" .. i
      if not listed[id] then
        assert.truthy(all:find("order " .. id .. " -> version 5 (v5), 5 snapshot(s) merged", 1, true), id .. ":\n" .. all)
      end
    end
  end)
end)

describe("examples/orders", function()
  local DIR = "examples/orders"

  it("enqueues snapshots, merges them while they wait and applies only the newest", function()
    local lines = {}
    for _, v in ipairs { 5, 3, 1, 4, 2 } do          -- out of order: the score sorts them
      for id = 1, 20 do lines[#lines + 1] = snapshot("order-" .. id, v, "v" .. v) end
    end
    assert.are.equal("enqueued 100 jobs\n", ok("enqueue " .. q(DIR) .. " Orders", table.concat(lines, "\n")))
    local queued = jobs(DIR, "Orders", "queue")
    assert.are.equal(20, #queued)                      -- one job per id, 5 payloads each
    for _, r in ipairs(queued) do
      assert.are.equal(5, #r.payloads)
      assert.are.same({ 1, 2, 3, 4, 5 }, { r.payloads[1][2], r.payloads[2][2], r.payloads[3][2],
                                            r.payloads[4][2], r.payloads[5][2] })
    end

    local p = run(DIR)
    host.eventually(function()
      for id = 1, 20 do if hget("example:orders", "order-" .. id) ~= 5 then return false end end
      return true
    end, 15, "every order at version 5")
    host.eventually(function() return stats(DIR).total.length == 0 end, 10, "an empty queue")
    assert.truthy(p:log():find("5 snapshot(s) merged", 1, true), p:log())

    -- an older snapshot arriving late never overwrites a newer one
    ok("enqueue " .. q(DIR) .. " Orders", snapshot("order-1", 2, "late"))
    host.eventually(function() return stats(DIR).total.length == 0 end, 10, "the late snapshot performed")
    assert.are.equal(5, hget("example:orders", "order-1"))
    stop(p)
    assert.are.equal(0, stats(DIR).total.morgue_length)
  end)

  it("retries a broken snapshot, then moves it to the morgue; a newer snapshot fixes an order", function()
    ok("enqueue " .. q(DIR) .. " Orders", snapshot("order-b", 1, "broken") .. "\n" .. snapshot("order-x", 1, "broken"))
    local p = run(DIR)
    local function retry_count(id)
      local _, by_id = jobs(DIR, "Orders", "queue")
      return by_id[id] and by_id[id].retry_count
    end
    host.eventually(function() return retry_count("order-b") == 0 and retry_count("order-x") == 0 end, 10,
      "the first failure")
    local _, by_id = jobs(DIR, "Orders", "queue")
    assert.truthy(by_id["order-b"].error:find(": cannot apply a broken snapshot", 1, true), by_id["order-b"].error)
    assert.is_true(by_id["order-b"].perform_in > require("luakiq.core").now())   -- retry_in(0) = 2 s
    assert.is_nil(hget("example:orders", "order-b"))

    -- order-x (another shard than order-b: a failing batch fails all its ids): a fixed
    -- snapshot merges into the failed job and is applied on its retry
    ok("enqueue " .. q(DIR) .. " Orders", snapshot("order-x", 2, "paid"))
    -- order-b: max_retry_count = 5; make every retry due now instead of waiting 2, 4, ... s
    host.eventually(function()
      ok("admin " .. q(DIR) .. " Orders perform-now")
      return #jobs(DIR, "Orders", "morgue") == 1 and hget("example:orders", "order-x") == 2
    end, 30, "order-b in the morgue, order-x applied")

    local dead = jobs(DIR, "Orders", "morgue")
    assert.are.equal("order-b", dead[1].id)
    assert.are.same({ { { status = "broken", version = 1 }, 1 } }, dead[1].payloads)
    assert.truthy(dead[1].error:find("cannot apply a broken snapshot", 1, true))
    local listed = json_lines(ok("morgue " .. q(DIR) .. " Orders list"))
    assert.are.equal("order-b", listed[1].id)
    assert.are.same({ length = 0, morgue_length = 1 },
      { length = stats(DIR).total.length, morgue_length = stats(DIR).total.morgue_length })
    stop(p)
    assert.are.equal('{"deleted":1}\n', ok("morgue " .. q(DIR) .. " Orders delete order-b"))
    assert.are.equal(0, stats(DIR).total.morgue_length)
  end)
end)

describe("examples/by_node", function()
  local DIR = "examples/by_node"

  -- `luakiq plan` for node k of n -> { shard name -> thread }, thread count.
  local function plan(n, k)
    local extra = n and ("LUAKIQ_NODES=" .. n .. " LUAKIQ_NODE=" .. k) or nil
    local out = ok("plan " .. q(DIR), nil, extra)
    local set, threads = {}, 0
    for t, list in out:gmatch("t(%d+): ([^\n]*)") do
      threads = threads + 1
      for name in list:gmatch("[^, ]+") do
        assert.is_nil(set[name], name .. " twice in one plan")
        set[name] = tonumber(t)
      end
    end
    return set, threads
  end

  local function count(set)
    local n = 0
    for _ in pairs(set) do n = n + 1 end
    return n
  end

  it("gives each node a disjoint set of shards, together covering every shard", function()
    local all = plan()                                  -- node 0 of 1: everything
    assert.are.equal(8, count(all))
    for _, n in ipairs { 2, 3 } do
      local union = {}
      for k = 0, n - 1 do
        local set, threads = plan(n, k)
        assert.is_true(threads >= 1 and threads <= 2)   -- threads_per_node = 2
        for name in pairs(set) do
          assert.is_nil(union[name], name .. " on two nodes")
          assert.truthy(all[name], name)
          union[name] = k
        end
      end
      assert.are.equal(count(all), count(union))
    end
    local zero, one = plan(2, 0), plan(2, 1)
    assert.are.same({ Events0 = 0, Events4 = 0, Events2 = 1, Events6 = 1 }, zero)
    assert.are.same({ Events1 = 0, Events5 = 0, Events3 = 1, Events7 = 1 }, one)
  end)

  it("refuses a node number outside 0..LUAKIQ_NODES-1 with exit 2", function()
    local rc, _, err = host.exec("plan " .. q(DIR), nil, env("LUAKIQ_NODES=2 LUAKIQ_NODE=2"))
    assert.are.equal(2, rc)
    assert.truthy(err:find("node_number must be an integer in 0..1", 1, true), err)
  end)

  it("two nodes on one Redis process every job once, each on the node owning its shard", function()
    local p0 = run(DIR, "LUAKIQ_NODES=2 LUAKIQ_NODE=0")
    local p1 = run(DIR, "LUAKIQ_NODES=2 LUAKIQ_NODE=1")
    local lines = {}
    for i = 1, 200 do lines[i] = ('{"id":"e%d","payload":%d}'):format(i, i) end
    ok("enqueue " .. q(DIR) .. " Events", table.concat(lines, "\n"))
    host.eventually(function() return srv.conn:call("HLEN", "example:events") == 200 end, 15, "200 ids performed")
    for i = 1, 200 do
      local id = "e" .. i
      assert.are.equal(keys.shard(id, 8) % 2, hget("example:events", id), id)
    end
    assert.are.equal(200, (hget("example:events:count", "0") or 0) + (hget("example:events:count", "1") or 0))
    stop(p0)
    stop(p1)
  end)
end)

describe("examples/migration", function()
  local DIR = "examples/migration"
  -- The application before the migration: Orders with 5 shards on queue "Orders".
  local OLD = [[return { shards_count = %d, perform = function() error("the old version must not run") end }]]

  it("moves the jobs of the old queue to the new worker", function()
    local old = host.scriptdir { ["workers/Orders.lua"] = OLD:format(5) }
    -- the old version ran once (registering Orders = 5 shards), then jobs piled up
    local p = run(old)
    host.eventually(function() return p:log():find("thread started", 1, true) end, 10, "the old host")
    stop(p)
    assert.are.equal("5", srv.conn:call("HGET", "luakiq:queues", "Orders"))
    local lines = {}
    for v = 1, 3 do
      for id = 1, 30 do lines[#lines + 1] = snapshot("order-" .. id, v, "v" .. v) end
    end
    ok("enqueue " .. q(old) .. " Orders", table.concat(lines, "\n"))
    assert.are.equal(30, stats(old).by_worker.Orders.length)

    -- a new count on the old queue is refused, with a pointer to the recipe
    local rc, _, err = host.exec("run " .. q(host.scriptdir { ["workers/Orders.lua"] = OLD:format(10) }), nil, env())
    assert.are.equal(2, rc)
    assert.truthy(err:find("shards_count is 10 but queue 'Orders' already has 5 shards", 1, true), err)
    assert.truthy(err:find("'Changing shards_count'", 1, true), err)

    p = run(DIR)
    host.eventually(function()
      for id = 1, 30 do if hget("example:migration", "order-" .. id) ~= 3 then return false end end
      return true
    end, 15, "every order at version 3, applied by the new worker")
    -- producers not yet redeployed keep pushing into the old queue; new ones push into Orders_V2
    ok("enqueue " .. q(old) .. " Orders", snapshot("order-1", 4, "v4"))
    ok("enqueue " .. q(DIR) .. " Orders", snapshot("order-2", 5, "v5"))
    host.eventually(function()
      return hget("example:migration", "order-1") == 4 and hget("example:migration", "order-2") == 5
    end, 10, "late jobs of both queues")
    host.eventually(function()
      local s = stats(DIR)
      return s.total.length == 0 and s.total.morgue_length == 0
    end, 10, "both queues empty")
    stop(p)
    assert.are.equal("10", srv.conn:call("HGET", "luakiq:queues", "Orders_V2"))
    assert.are.equal("5", srv.conn:call("HGET", "luakiq:queues", "Orders"))
    assert.are.equal(0, stats(old).by_worker.Orders.length)
  end)
end)

-- hipq's throttle: 100 slots, east 40 %, north 30 %, west 30 %, on two hosts.
describe("examples/throttle", function()
  local DIR = "examples/throttle"

  it("never lets a region take more than its share of the 100 slots, while every region has work waiting", function()
    local a, b = run(DIR), run(DIR)
    local lines = {}
    for i = 1, 400 do lines[#lines + 1] = json.encode { id = "e" .. i, payload = { region = "east" } } end
    for i = 1, 150 do lines[#lines + 1] = json.encode { id = "n" .. i, payload = { region = "north" } } end
    for i = 1, 150 do lines[#lines + 1] = json.encode { id = "w" .. i, payload = { region = "west" } } end
    ok("enqueue " .. q(DIR) .. " Regions", table.concat(lines, "\n"))
    host.eventually(function() return srv.conn:call("LLEN", "example:throttle:calls") >= 700 end, 120, "700 calls")
    stop(a)
    stop(b)
    -- per region: the most calls at once, and when its last call ended
    local ev, last_end = {}, {}
    for _, rec in ipairs(srv.conn:call("LRANGE", "example:throttle:calls", 0, -1)) do
      local region, t0, t1 = rec:match("^(%S+) (%S+) (%S+)$")
      t0, t1 = tonumber(t0), tonumber(t1)
      ev[#ev + 1] = { t0, 1, region }
      ev[#ev + 1] = { t1, -1, region }
      last_end[region] = math.max(last_end[region] or 0, t1)
    end
    assert.are.equal(700 * 2, #ev)
    table.sort(ev, function(x, y) if x[1] ~= y[1] then return x[1] < y[1] end return x[2] < y[2] end)
    local cur, most, all, all_most = {}, {}, 0, 0
    local waiting_end = math.min(last_end.north, last_end.west) -- until then every region had work
    for _, e in ipairs(ev) do
      cur[e[3]] = (cur[e[3]] or 0) + e[2]
      all = all + e[2]
      if e[1] < waiting_end then
        most[e[3]] = math.max(most[e[3]] or 0, cur[e[3]])
        all_most = math.max(all_most, all)
      end
    end
    local share = { east = 40, north = 30, west = 30 }
    for region, n in pairs(share) do
      assert.is_true(most[region] <= n, region .. " ran " .. tostring(most[region]) .. " at once, share " .. n)
      -- and the share is used: the throttle is a limit, not a slowdown
      assert.is_true(most[region] >= n / 2, region .. " ran only " .. tostring(most[region]) .. " at once")
    end
    assert.is_true(all_most <= 100, "all regions: " .. all_most)
    assert.are.same({ length = 0, morgue_length = 0, lag = 0, expired = 0, waiting = 0 }, stats(DIR).by_worker.Regions)
  end)
end)

-- The benchmark tool itself, tiny and without Sidekiq: it must keep running
-- (its figures are not checked here; speed is measured by running it).
describe("examples/benchmark", function()
  it("runs a small benchmark end to end and prints the tables and targets", function()
    local rc, out, err = host.exec("lua examples/benchmark/bench.lua --jobs 2000 --shapes lag1,lag1x,b100 --latency 20 --io 200 --sidekiq no --rounds 2")
    assert.are.equal(0, rc, tostring(out) .. tostring(err))
    out = out .. err -- (the progress lines are on stderr)
    for _, want in ipairs { "luakiq lag, 5 shards, batch 1 ", "luakiq lag, 5 shards, batch 1, fetch 1 ",
                            "luakiq lag, 24 shards, batch 100 ", "enqueue floor: ", "enqueue by the CLI: ", "20/20",
                            "Redis calls per job (worst shape)", "Redis CPU per job drained, lag, 5 shards, batch 1",
                            "I/O-bound, 100 ms HTTP: lost, duplicated, out of order, left",
                            -- a second round: lag1 and b100 again (no Sidekiq: only Redis CPU is judged on it)
                            "round 2: luakiq lag, 24 shards, batch 100 ...", "us (median of 2)" } do
      assert.truthy(out:find(want, 1, true), want .. " missing in:\n" .. out)
    end
    -- every shape drained all of its jobs: calls/job printed as a number, no error line
    assert.falsy(out:find("error", 1, true), out)
  end)

  -- bench.lua --await (await_shape.lua): jobs that wait for a reply, every
  -- phase at a tiny size (replies by reply.lua and by wrk over HTTP, their
  -- handling, latency, one shard with 1,000 ids waiting, the callback shape)
  it("runs the waits' benchmark end to end: every reply accepted and handled once", function()
    local rc, out, err = host.exec("lua examples/benchmark/bench.lua --await 300 --rounds 1 --sidekiq no")
    assert.are.equal(0, rc, tostring(out) .. tostring(err))
    out = out .. err
    for _, want in ipairs { "Jobs that wait for a reply: 300 jobs waiting on one host",
                            "accepted 300 of 300; on_reply: lost 0, duplicated 0", "30/30",
                            "host RSS growth, 300 waiting, over idle", "replies/s through POST /api/v1/replies/TOKEN",
                            "I/O-bound with a 1 s callback, jobs/s", "0 / 0 / 0" } do
      assert.truthy(out:find(want, 1, true), want .. " missing in:\n" .. out)
    end
    assert.truthy(out:find("on_reply calls: lost / duplicated%s+0 / 0%s+0%s+%-%s+met"), out)
    assert.falsy(out:find("error", 1, true), out)
  end)
end)

-- The examples with real services, run as their READMEs say (with the binary
-- under test): a private PostgreSQL and Redis, a real webhook receiver.
describe("examples/postgres", function()
  it("ends with every order's newest snapshot under 5 threads and injected failures", function()
    local rc, out, err = host.sh_out("LUAKIQ_BIN=" .. host.quote(host.bin) ..
      " examples/postgres/run.sh 200 20")
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find("200 orders, 200 at version 20", 1, true), out)
    assert.truthy(out:find("OK: every order holds its newest snapshot", 1, true), out)
    -- the late snapshots (version 19 of 10 orders after 20): dropped, not written
    assert.truthy(out:find("late snapshots (version 19) pushed for 10 orders: 10 dropped as stale", 1, true), out)
    local failures = tonumber(out:match("failures injected and retried: (%d+)"))
    assert.is_true(failures > 0, out)
  end)
end)

describe("examples/webhook", function()
  it("delivers signed POSTs, retries a failing order, sends rejected and forged jobs to the morgue", function()
    local rc, out, err = host.sh_out("LUAKIQ_BIN=" .. host.quote(host.bin) .. " examples/webhook/run.sh")
    assert.are.equal(0, rc, out .. err)
    for i = 1, 5 do assert.truthy(out:find("processed order-" .. i .. " ", 1, true), out) end
    -- order-6's two failed attempts carried one delivery id (the receiver
    -- skips a delivery it processed: a retry must not look new)
    local d1 = out:match("failed order%-6 %(attempt 1, delivery (%x+)%)")
    local d2 = out:match("failed order%-6 %(attempt 2, delivery (%x+)%)")
    assert.truthy(d1, out)
    assert.are.equal(d1, d2)
    assert.truthy(out:find('processed order-6 [{"fail_times": 2, "total": 60}] (attempt 3)', 1, true), out)
    assert.truthy(out:find('processed order-6 [{"fail_times": 2, "total": 60}]', 1, true), out)
    assert.falsy(out:find("processed order-7", 1, true), out)
    assert.truthy(out:find("rejected: bad signature", 1, true), out)
    assert.truthy(out:find('"error":"webhook: HTTP 400: bad data in order-7","id":"order-7"', 1, true), out)
    assert.truthy(out:find('"error":"webhook: HTTP 401: bad signature","id":"forged-1"', 1, true), out)
  end)

  -- The receiver of docs/workers.md (its `signed`, taken from the page as it
  -- is) and the example's receiver (a real server): a fresh signature passes,
  -- a tampered body, a wrong secret, a 6-minute-old or a future t, and the old
  -- "sha256=" form are refused (401 from the server).
  it("the docs' and the example's receivers refuse tampered and old signatures", function()
    local doc = host.read("docs/workers.md")
    local snippet = assert(doc:match("```python\n(import hashlib, hmac, time\n.-)\nif not signed"), "no signed() in docs/workers.md")
    local tmp = host.tmpdir()
    local secret = "example-secret"
    local recv = host.spawn_cmd("env WEBHOOK_SECRET=" .. secret .. " python3 examples/webhook/receiver.py " .. q(tmp .. "/port"))
    local port = host.eventually(function() return host.read(tmp .. "/port") end, 10, "the receiver's port")
    host.write(tmp .. "/check.py", snippet .. "\n" .. ([[
import json, sys, urllib.error, urllib.request
secret, url = b"%s", "http://127.0.0.1:%s/orders"
body = b'{"jobs":[{"id":"x","payloads":[{"total":1}]}],"worker":"Orders"}'
def sig(t, b, key=secret):
    return "t=%%d,v1=%%s" %% (t, hmac.new(key, str(t).encode() + b"." + b, hashlib.sha256).hexdigest())
now = int(time.time())
cases = [("fresh", sig(now, body), body), ("tampered", sig(now, body), body.replace(b"1", b"2")),
         ("wrong secret", sig(now, body, b"nope"), body), ("6 minutes old", sig(now - 360, body), body),
         ("from the future", sig(now + 360, body), body), ("no t", sig(now, body).split(",")[1], body),
         ("old form", "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest(), body)]
out = {}
for name, header, b in cases:
    req = urllib.request.Request(url, data=b, method="POST", headers={"X-Luakiq-Signature": header,
        "X-Luakiq-Delivery": name, "X-Luakiq-Attempt": "1"})
    try:
        status = urllib.request.urlopen(req, timeout=10).status
    except urllib.error.HTTPError as e:
        status = e.code
    out[name] = [signed(header, b, secret), status]
print(json.dumps(out))
]]):format(secret, port))
    local rc, got, err = host.sh_out("python3 " .. q(tmp .. "/check.py"))
    recv:signal("TERM")
    assert.are.equal(0, rc, got .. err)
    local res = json.decode(got)
    assert.are.same({ true, 200 }, res.fresh)
    for _, name in ipairs { "tampered", "wrong secret", "6 minutes old", "from the future", "no t", "old form" } do
      assert.are.same({ false, 401 }, res[name], name)
    end
  end)
end)

-- Jobs that wait for a reply (issue 36): the example's report, with real
-- processes (a provider over HTTP, a consumer replying by key through the
-- Redis scripts) and the binary under test.
describe("examples/callback", function()
  it("completes or times out every job as its plan says, keeps per-id order, runs other ids meanwhile", function()
    local rc, out, err = host.sh_out("LUAKIQ_BIN=" .. host.quote(host.bin) .. " examples/callback/run.sh")
    assert.are.equal(0, rc, out .. err)
    local pay = assert(out:match("\nPayments (.-)\nShipments "), out)
    local ship = assert(out:match("\nShipments (.-)\nPer%-id order"), out)
    for section, want in pairs {
      [pay] = { "ok      12/12 completed", "twice   4/4 completed", "accepted, then duplicate (200)",
                "late    3/3 completed on the retry", "refused as stale (410)",
                "never   3/3 timed out as designed: reply timeout after 2 s", "seq     5/5 completed in order",
                "cached  20/20 done at once" },
      [ship] = { "ok      10/10 completed", "twice   4/4 completed", "late    3/3 completed on the retry",
                 "refused as stale (STALE)", "never   2/2 timed out as designed", "seq     4/4 completed in order" },
    } do
      for _, w in ipairs(want) do assert.truthy(section:find(w, 1, true), w .. " missing in:\n" .. out) end
    end
    assert.truthy(out:find("Per-id order: 9 ids got steps 2 and 3 pushed", 1, true), out)
    -- the 9 held ids and others waited at once; the cached payments ran on their shards meanwhile
    local waited, median, most = out:match("Shards never blocked: (%d+) jobs waited for a reply at once on 8 shards " ..
      "served by 2 threads; meanwhile 20 cached payments %(other ids, on Payments shards [%d, ]+, where held ids " ..
      "waited%) were pushed and done in (%d+) ms median, (%d+) ms at most")
    assert.truthy(waited, out)
    assert.is_true(tonumber(waited) >= 9 and tonumber(median) <= tonumber(most), out)
    local late_pay, late_ship = out:match("Late replies kept for operators %(luakiq waiting %-%-late%): " ..
      "Payments (%d+), Shipments (%d+)")
    assert.are.equal("3", late_pay, out)
    assert.is_true(tonumber(late_ship) >= 3 and tonumber(late_ship) <= 7, out) -- 3 late, and the twice copies handled already
    assert.truthy(out:find("\nOK: every job completed or timed out as designed", 1, true), out)
  end)
end)

-- docs/redis.md's Python producer, taken from the page as it is (the block
-- after "A Python producer (redis-py)") and run with redis-py (Debian's
-- python3-redis) into database 1: what it queues must list as what
-- `luakiq enqueue` of the same jobs queues in database 0 (ids, shards,
-- payload bytes, scores, merges), and a host must run it.
describe("docs/redis.md, enqueue from another language", function()
  -- the python3 that has redis-py (a pyenv's may shadow Debian's)
  local function python()
    for _, py in ipairs { "python3", "/usr/bin/python3" } do
      if host.sh(py .. " -c 'import redis' 2>/dev/null") then return py end
    end
    error("no python3 with redis-py: apt-get install python3-redis (tools/install-deps.sh --test)", 0)
  end

  local function example()
    local page = assert(host.read("docs/redis.md"))
    local at = assert(page:find("A Python producer (redis-py)", 1, true), "the example's heading moved")
    local code = page:match("```python\n(.-)```", at)
    return assert(code, "no python block after the heading")
  end

  it("queues what luakiq enqueue queues, and the host runs it", function()
    local dir = host.scriptdir {
      ["workers/A.lua"] = "return { shards_count = 4, perform = function() end }",
    }
    -- a server of its own, one server even on the cluster variant: the
    -- example is a single-server client (redis.Redis)
    local own = redis.start({})
    finally(function() own:stop() host.sh("rm -rf " .. q(dir)) end)
    local url0 = "REDIS_URL=" .. own.url
    local now = os.time()
    -- two calls: the second merges into the first's jobs
    local calls = {
      { { id = 1, payload = { b = 1, a = { 1, 2.5, -0.1 } }, perform_in = now - 5, score = now - 5 },
        { id = "x y:{z}", payload = "p", perform_in = now + 3600, score = now },
        { id = "ü-2", payload = { s = "é\n\"\1", t = true, n = 12345678901 }, perform_in = now - 5, score = now - 4 },
        { id = 7, payload = 1, perform_in = now - 5, score = 5 } },
      { { id = 1, payload = "second", perform_in = now - 9, score = now - 3 },
        { id = 1, payload = { a = { 1, 2.5, -0.1 }, b = 1 }, perform_in = now - 5, score = now - 1 },
        { id = 7, payload = 1, perform_in = now - 5, score = 4 }, -- the same payload: one, lowest score
        { id = 9, perform_in = now - 5, score = now - 2 } },       -- no payload: ""
    }
    local url1 = own.url:gsub("/%d+$", "") .. "/1"
    -- "start luakiq once": a host registers the queue in database 1
    local first = run(dir, "REDIS_URL=" .. url1)
    host.eventually(function()
      local c = assert(require("luakiq.core").connect(url1, 5))
      local n = c:call("HGET", "luakiq:queues", "A")
      c:close()
      return n == "4"
    end, 15, "the host to register A")
    stop(first)
    for _, c in ipairs(calls) do
      local lines = {}
      for i, j in ipairs(c) do lines[i] = json.encode(j) end
      ok("enqueue " .. q(dir) .. " A", table.concat(lines, "\n"), url0)
    end
    -- the page's code, then one perform_async per call of calls.json
    host.write(dir .. "/calls.json", json.encode(calls))
    host.write(dir .. "/producer.py", example() ..
      "\nimport sys\nfor call in json.load(open(sys.argv[1])):\n    perform_async('A', call)\n")
    local rc, out, err = host.sh_out("REDIS_URL=" .. q(url1) .. " " .. python() .. " " .. q(dir .. "/producer.py")
      .. " " .. q(dir .. "/calls.json"))
    assert.are.equal(0, rc, out .. err)
    local mine = json_lines(ok("jobs " .. q(dir) .. " A queue", nil, url0))
    local theirs = json_lines(ok("jobs " .. q(dir) .. " A queue", nil, "REDIS_URL=" .. url1))
    assert.are.equal(5, #mine)
    assert.are.same(mine, theirs)
    local by_id = {}
    for _, r in ipairs(theirs) do by_id[r.id] = r end
    -- (the same table twice is one payload, at its lowest score)
    assert.are.same({ { a = { 1, 2.5, -0.1 }, b = 1 }, now - 5 }, by_id["1"].payloads[1])
    assert.are.same({ "second", now - 3 }, by_id["1"].payloads[2])
    assert.are.equal(2, #by_id["1"].payloads)
    assert.are.same({ 1, 4 }, by_id["7"].payloads[1])
    assert.are.equal(1, #by_id["7"].payloads)
    -- byte for byte: every shard's job records (payloads in canonical JSON)
    local c1 = assert(require("luakiq.core").connect(url1, 5))
    for shard = 0, 3 do
      local key = keys.prefix("luakiq", "A", shard) .. "jobs"
      assert.are.same(own.conn:call("ZRANGE", key, 0, -1), c1:call("ZRANGE", key, 0, -1))
    end
    c1:close()
    -- a host on database 1 runs the four due jobs; the future one waits
    local p = run(dir, "REDIS_URL=" .. url1)
    host.eventually(function()
      local s = json.decode(ok("stats " .. q(dir), nil, "REDIS_URL=" .. url1)).by_worker.A
      return s.length == 1 and s.morgue_length == 0
    end, 15, "the due jobs to run")
    stop(p)
  end)
end)
