-- Online reshard (issue 14, item 5; docs/operations.md, "Resharding"):
-- `luakiq reshard DIR WORKER N` against real hosts and a real Redis.
--   1. tools/soak.lua --reshard: elastic hosts run while a steady stream is
--      pushed, the queue goes 4 -> 7 -> 3 shards; the soak's checker finds
--      nothing lost, no overlap, no order violation, and after each reshard
--      every job (queued, in flight, dead) is in shard crc32(id) % N.
--   2. kill -9 of the reshard half-way, then run it again: every job as it
--      was (payloads and scores, perform_in, retry_count, error, priority,
--      windows, expiries, tags, the morgue), in its new shard; jobs a dead
--      holder left in flight are restored and moved; a second reshard while
--      one runs, and one to another count while one is unfinished: refused.
--   3. a call in flight holds the reshard until it ends; a job of its id
--      pushed meanwhile (under the new count) runs after it, not beside it;
--      the schedules' last ticks move; bad input: one line, exit 2.
--   4. stale hosts: a host started with the old count is refused (exit 2);
--      a running host with a fixed plan stops with one line and exit 1, and
--      started again with the new count serves it; an elastic one follows.
-- ctest runs 2-4 once more on a Redis Cluster (label cluster), where every
-- script call must touch one slot.
local core = require "luakiq.core"
local json = require "luakiq.json"
local keys = require "luakiq.lib.keys"
local client = require "luakiq.client"
local errors = require "luakiq.lib.errors"
local queue = require "luakiq.runner.queue"
local redis = require "helpers.redis"
local host = require "helpers.host"
local q = host.quote

local srv, env = host.fixture()

local function reshard(dir, args) return host.exec("reshard " .. q(dir) .. " " .. args, nil, env()) end
local one_line = host.one_line

-- Everything Redis holds of id in queue W under `count` shards (raw, as
-- strings): its queued job, its dead job, tags, expiries; nil parts absent.
-- Layout 2 (docs/redis.md): the jobs' records are read through jobs.lua (by
-- id); `placed`: the job is where fetch finds it (P later or its level at its
-- perform_in, or else an entry in P ready).
local function snap(conn, count, id)
  local P = keys.prefix("luakiq", "W", keys.shard(id, count))
  local r = conn:pipeline {
    { script = "jobs", P, "queue", "id", "asc", "[" .. id, "[" .. id, "0", "1" }, { "HGET", P .. "prio", id },
    { "ZSCORE", P .. "retries", id }, { "HGET", P .. "errors", id }, { "HGET", P .. "windows", id },
    { "HGETALL", P .. "expires:" .. id }, { script = "jobs", P, "morgue", "id", "asc", "[" .. id, "[" .. id, "0", "1" },
    { "HGET", P .. "tags", id }, { "ZSCORE", P .. "later", id }, { "LPOS", P .. "ready", id },
    { "HEXISTS", P .. "busy", id },
  }
  for _, x in ipairs(r) do
    if type(x) == "table" and x.err then error(x.err) end
  end
  -- (jobs.lua: n, id, perform_in or updated_at, [retry_count,] error, npayloads, payload, score, ...)
  local function payloads(rec, from)
    local out = {}
    for i = from, #rec do out[#out + 1] = rec[i] end
    return out
  end
  local q, d = r[1], r[7]
  local queued, dead
  if q[1] == "1" or q[1] == 1 then
    local pin = q[3]
    local lv = r[2] and conn:pipeline({ { "ZSCORE", P .. "queue:" .. r[2], id } })[1] or nil
    local placed = r[9] == pin or lv == pin or (not r[9] and not lv and r[10] ~= nil and r[10] ~= false)
    queued = { pin = pin, prio = r[2], rc = r[3], err = r[4], win = r[5], payloads = payloads(q, 7), exp = {},
               placed = placed }
    local ex = r[6]
    for i = 1, #ex, 2 do queued.exp[ex[i]] = ex[i + 1] end
  end
  if d[1] == "1" or d[1] == 1 then
    dead = { at = d[3], err = d[4] ~= "" and d[4] or nil, payloads = payloads(d, 6) }
  end
  local tags = {}
  if r[8] then for t in r[8]:gmatch("[^\n]+") do tags[#tags + 1] = t .. "=" .. tostring(conn:call("SISMEMBER", P .. "tag:" .. t, id)) end end
  return { queued = queued, dead = dead, tags = tags, busy = r[11] }
end

local function all_snaps(conn, count, n)
  local out = {}
  for i = 1, n do out[i] = snap(conn, count, "id" .. i) end
  return out
end

-- Keys of queue W in shards 0..upto-1 whose ids are not in their shard.
local function misplaced(conn, count, upto)
  local bad = {}
  for s = 0, upto - 1 do
    local P = keys.prefix("luakiq", "W", s)
    for _, k in ipairs { "jobs", "morgue:jobs" } do
      for _, m in ipairs(conn:call("ZRANGE", P .. k, 0, -1)) do
        local id = keys.member_id(m)
        if keys.shard(id, count) ~= s then bad[#bad + 1] = k .. " " .. id .. " in " .. s end
      end
    end
    for _, id in ipairs(conn:call("HKEYS", P .. "busy")) do bad[#bad + 1] = "busy " .. id .. " in " .. s end
    -- (thawed: P reshard is gone)
    assert.are.equal(0, conn:call("EXISTS", P .. "reshard"), "shard " .. s .. " thawed")
    assert.are.equal(0, conn:call("EXISTS", P .. "reshard:out"), "leftovers in shard " .. s)
  end
  return bad
end

describe("luakiq reshard", function()
  it("up and down under a steady stream with elastic hosts: nothing lost, no overlap, in order, every job in its shard",
    function()
      -- (the soak starts a server of its own, never a cluster: run once)
      if redis.on_cluster() then return end
      local rc, out, err = host.exec("lua tools/soak.lua --reshard 7,3 --shards 4 --hosts 2 --threads 2 --rate 300" ..
        " --ids 200 --work 2 --batch 5 --fail 0.1 --max-retry 2 --lease-ttl 3 --timeout 60 --quiet")
      assert.are.equal(0, rc, (out or "") .. (err or ""))
      assert.truthy(out:match("soak PASSED"), out)
      assert.truthy(out:match("lost 0"), out)
      assert.truthy(out:match("overlaps 0, order violations 0"), out)
      assert.truthy(out:match("shard overlaps 0"), out)
      assert.truthy(out:match("4 %-> 7: exit 0, moved %d+, paused [%d.]+ s.-misplaced 0; 7 %-> 3: exit 0, moved %d+, " ..
        "paused [%d.]+ s.-misplaced 0"), out)
    end)

  describe("on a queue of 4 shards", function()
    local dir
    -- (each performed id is recorded: t:done)
    local W = [[return { shards_count = %d, perform = function(b)
      for id in pairs(b) do require("luakiq").redis.call("RPUSH", "t:done", id) end end }]]
    before_each(function()
      srv.conn:call("FLUSHALL")
      dir = host.scriptdir {
        ["config.lua"] = "return { poll_interval = 0.2, lease_ttl = 1 }",
        ["workers/W.lua"] = W:format(4),
        ["workers/V.lua"] = (W:gsub("%%d", "2")),
      }
      srv.conn:call("HSET", "luakiq:queues", "W", "4", "V", "2")
      -- (a namespace registered by hand is marked layout 2 as a host marks a new one)
      srv.conn:call("SET", "luakiq:{luakiq:queues}:layout", "2")
    end)
    after_each(function()
      host.cleanup()
      host.sh("rm -rf " .. q(dir))
    end)

    it("killed with -9 half-way, then run again: every job, payload, score, retry_count, error and morgue entry intact",
      function()
        local runtime = require "luakiq.lib.runtime"
        local client = require "luakiq.client"
        local cfg = runtime.load(dir)
        local conn = srv.conn
        local now = core.now()
        local N = 3000
        -- dead jobs: pushed with a retry_count and an error, then kill-failed
        local jobs = {}
        for i = 1, N, 7 do
          jobs[#jobs + 1] = { id = "id" .. i, payload = { dead = i }, score = i, retry_count = 2, perform_in = now + 500 }
        end
        client.push(conn, cfg, "W", jobs)
        for i = 1, N, 7 do
          conn:call("HSET", keys.prefix("luakiq", "W", keys.shard("id" .. i, 4)) .. "errors", "id" .. i, "boom " .. i)
        end
        local rc, _, err = host.exec("admin " .. q(dir) .. " W kill-failed", nil, env())
        assert.are.equal(0, rc, err)
        -- queued jobs of every kind (several payloads an id, some due now)
        jobs = {}
        for i = 1, N do
          local job = { id = "id" .. i, payload = { n = i }, score = now - i, perform_in = now + 100 + i }
          if i % 5 == 0 then job.perform_in = now - 10 end
          if i % 3 == 0 then job.retry_count = i % 4 end
          if i % 11 == 0 then job.priority = 7 end
          if i % 13 == 0 then job.tags = { "t" .. (i % 2), "x" } end
          if i % 17 == 0 then job.expires_at = now + 3600 end
          if i % 19 == 0 then job.windows, job.timezone = { "00:00-24:00" }, "UTC" end
          jobs[#jobs + 1] = job
          if i % 2 == 0 then jobs[#jobs + 1] = { id = "id" .. i, payload = "second", score = now + i } end
        end
        client.push(conn, cfg, "W", jobs)
        for i = 2, N, 9 do
          conn:call("HSET", keys.prefix("luakiq", "W", keys.shard("id" .. i, 4)) .. "errors", "id" .. i, "failed " .. i)
        end
        local before = all_snaps(conn, 4, N)
        -- (the snapshots see every job: N queued, each where fetch finds it, and the dead ones)
        local nq, nd, np = 0, 0, 0
        for i = 1, N do
          if before[i].queued then nq = nq + 1 end
          if before[i].queued and before[i].queued.placed then np = np + 1 end
          if before[i].dead then nd = nd + 1 end
        end
        assert.are.same({ N, N, math.ceil(N / 7) }, { nq, np, nd })
        -- a holder that died with a batch in flight (its lease lapses in 0.3 s)
        local P1 = keys.prefix("luakiq", "W", 1)
        local r = conn:pipeline({ queue.fetch_cmd(P1, "dead:1:x", 300, 40) })[1]
        assert.are.equal(40, #queue.parse_fetch(r, { prefix = P1, worker = "W", shard = 1 }).jobs)

        -- paced, so that it is surely mid-way when killed
        local p = host.spawn("reshard " .. q(dir) .. " W 7 --batch 20 --pace 0.02", env())
        host.eventually(function()
          return tonumber(conn:call("HGET", "luakiq:{W}:reshard", "moved") or 0) >= 200
        end, 30, "the reshard moving")
        -- a second reshard meanwhile: refused, one line
        local rc2, out2, err2 = reshard(dir, "W 7")
        assert.are.equal(2, rc2, out2)
        assert.truthy(err2:match("^luakiq: a reshard of queue 'W' is already running %(.+%); wait for it to finish\n$"), err2)
        p:signal("KILL")
        assert.is_not_nil(p:wait(5))
        assert.is_true(tonumber(conn:call("HGET", "luakiq:{W}:reshard", "moved")) < 2000, "killed too late")
        -- another count while it is unfinished: refused (once its lock lapsed)
        host.eventually(function() return conn:call("EXISTS", "luakiq:{W}:reshard:lock") == 0 end, 10, "lock lapse")
        -- the queue stays frozen, its leases lapsed too: no holder gets a shard
        local P0 = keys.prefix("luakiq", "W", 0)
        r = conn:pipeline({ queue.fetch_cmd(P0, "other:2:y", 1000, 10) })[1]
        assert.are.same({ leased = true, pttl = -2, reshard = true },
          queue.parse_fetch(r, { prefix = P0, worker = "W", shard = 0 }))
        local rc3, _, err3 = reshard(dir, "W 5")
        assert.are.equal(2, rc3)
        assert.are.equal("luakiq: an interrupted reshard of queue 'W' from 4 to 7 shards must finish first: " ..
          "luakiq reshard DIR W 7\n", err3)
        -- run again: it finishes
        local rc4, out4, err4 = reshard(dir, "W 7")
        assert.are.equal(0, rc4, err4)
        local st = json.decode(out4)
        assert.are.equal(4, st.from)
        assert.are.equal(7, st.to)
        assert.are.equal("7", conn:call("HGET", "luakiq:queues", "W"))
        assert.are.same({}, misplaced(conn, 7, 7))
        local after = all_snaps(conn, 7, N)
        for i = 1, N do
          -- (the 40 restored jobs are no longer in flight: as before the fetch)
          assert.are.same(before[i], after[i], "id" .. i)
        end
        assert.are.equal(0, conn:call("EXISTS", "luakiq:{W}:reshard", "luakiq:{W}:reshard:lock"))
        -- the read commands find a job in its new shard with the old worker file
        local moved_id
        for i = 1, N do
          if keys.shard("id" .. i, 4) ~= keys.shard("id" .. i, 7) then moved_id = "id" .. i break end
        end
        local rcj, outj, errj = host.exec("job " .. q(dir) .. " W " .. moved_id, nil, env())
        assert.are.equal(0, rcj, errj)
        assert.are.equal(moved_id, json.decode(outj).id)
        -- and down to 3, unpaced: the same jobs again
        local rc5, _, err5 = reshard(dir, "W 3")
        assert.are.equal(0, rc5, err5)
        assert.are.same({}, misplaced(conn, 3, 7))
        local down = all_snaps(conn, 3, N)
        for i = 1, N do assert.are.same(before[i], down[i], "id" .. i) end
        -- a push routed with an old count is refused by the shard (nothing written)
        local e = conn:pipeline({ { script = "push", keys.prefix("luakiq", "W", 5), "", "1", "z", "1", "-1", "1", "p",
                                    "", "shards", "7" } })[1]
        assert.are.same({ "RESHARDED", "3 7" }, { errors.redis_code(e.err) }, tostring(e.err))
      end)

    it("moves the jobs that wait for a reply with their ids: the wait, its held job, its token still good", function()
      local conn = srv.conn
      local runtime = require "luakiq.lib.runtime"
      local replies = require "luakiq.lib.replies"
      local cfg = runtime.load(dir)
      local W = require("helpers.waits").new(conn, cfg, "W")
      -- ids whose shard changes from 4 to 9 shards, and one that stays
      local movers, stayer = {}, nil
      for i = 1, 200 do
        local id = "w" .. i
        if keys.shard(id, 4) ~= keys.shard(id, 9) then
          if #movers < 3 then movers[#movers + 1] = id end
        elseif not stayer then stayer = id end
      end
      local w = {}
      for _, id in ipairs(movers) do w[id] = W:wait(id, { timeout = 600 }) end
      w[stayer] = W:wait(stayer, { timeout = 600 })
      -- a payload pushed for a waiting id is held behind its wait
      client.push(conn, cfg, "W", { { id = movers[1], payload = "later" } })
      -- (the spec's lease token gives the shards back, as a host's stop does)
      for s = 0, 3 do conn:script("release", keys.prefix("luakiq", "W", s), require("helpers.waits").TOKEN) end
      local rc, _, err = reshard(dir, "W 9")
      assert.are.equal(0, rc, err)
      for _, id in ipairs(movers) do
        local old, new = keys.prefix("luakiq", "W", keys.shard(id, 4)), keys.prefix("luakiq", "W", keys.shard(id, 9))
        assert.are.equal(0, conn:call("HEXISTS", old .. "waits", id), id .. " left its old shard")
        assert.are.equal(1, conn:call("HEXISTS", new .. "waits", id), id .. " waits in its new shard")
        local j = conn:script("job", new, id)
        assert.are.equal("waiting", j[1])
      end
      -- the held payload moved with its id, still behind the wait
      local P1 = keys.prefix("luakiq", "W", keys.shard(movers[1], 9))
      assert.are.equal(1, #conn:call("ZRANGE", P1 .. "held", 0, -1))
      assert.are.same({}, misplaced(conn, 9, 9))
      -- the tokens made before the reshard are good after it (a per-queue
      -- secret; the reply routed by the new count)
      cfg = runtime.load(dir)
      for id, x in pairs(w) do
        assert.are.equal("accepted", (replies.by_token(conn, cfg, x.token, '{"status":"succeeded"}')), id)
      end
    end)

    it("moves the schedules' last ticks; a tick routed with the old count is refused", function()
      local conn = srv.conn
      local id = "sched-1"
      for i = 1, 50 do
        if keys.shard("sched-" .. i, 4) ~= keys.shard("sched-" .. i, 9) then id = "sched-" .. i break end
      end
      host.write(dir .. "/config.lua", "return { poll_interval = 0.2, lease_ttl = 1, schedules = { " ..
        "{ name = 's1', worker = 'W', id = '" .. id .. "', every = 3600 } } }")
      local old, new = keys.shard(id, 4), keys.shard(id, 9)
      assert.are_not.equal(old, new)
      conn:call("HSET", keys.prefix("luakiq", "W", old) .. "schedules", "s1", "1800000000")
      local rc, _, err = reshard(dir, "W 9")
      assert.are.equal(0, rc, err)
      assert.are.equal("1800000000", conn:call("HGET", keys.prefix("luakiq", "W", new) .. "schedules", "s1"))
      local r = conn:pipeline({ { script = "schedule", keys.prefix("luakiq", "W", old), "s1", "1800003600",
                                  "1800003600", "", id, "p", "4" } })[1]
      assert.are.same({ "RESHARDED", "9 4" }, { errors.redis_code(r.err) }, tostring(r.err))
      r = conn:pipeline({ { script = "schedule", keys.prefix("luakiq", "W", new), "s1", "1800000000",
                            "1800000000", "", id, "p", "9" } })[1]
      assert.are.equal(0, r) -- claimed before the reshard: not again
    end)

    it("waits for a call in flight: its job runs once, the reshard after it", function()
      local conn = srv.conn
      local edir = host.scriptdir {
        ["config.lua"] = "return { poll_interval = 0.2, lease_ttl = 1, splitter = 'elastic' }",
        ["workers/W.lua"] = [[return { shards_count = 4, perform = function(b)
          local luakiq = require "luakiq"
          for id in pairs(b) do
            luakiq.redis.call("RPUSH", "t:done", "start " .. id)
            if id == "slow" then luakiq.sleep(2) end
            luakiq.redis.call("RPUSH", "t:done", "end " .. id)
          end
        end }]],
        ["workers/V.lua"] = (W:gsub("%%d", "2")),
      }
      local p = host.spawn("run " .. q(edir), env())
      host.enqueue(dir, "W", { { id = "slow", payload = 1 } }, env())
      host.eventually(function() return conn:call("LINDEX", "t:done", 0) == "start slow" end, 10, "the slow call")
      local rs = host.spawn("reshard " .. q(dir) .. " W 5", env())
      core.sleep(0.5)
      assert.is_nil(rs:wait(0), "the reshard ended while the call ran")
      host.enqueue(host.scriptdir { ["workers/W.lua"] = W:format(5) }, "W", { { id = "slow", payload = 2 } }, env())
      assert.are.equal(0, rs:wait(10), rs:log())
      local st = json.decode(host.read(rs.dir .. "/out"))
      assert.is_true(st.waited >= 1, "waited " .. st.waited)
      host.eventually(function() return conn:call("LLEN", "t:done") == 4 end, 10, "the second job of slow")
      assert.are.same({ "start slow", "end slow", "start slow", "end slow" }, conn:call("LRANGE", "t:done", 0, -1))
      p:signal("TERM")
      assert.are.equal(0, p:wait(10), p:log())
      host.sh("rm -rf " .. q(edir))
    end)

    it("refuses bad input with one line and exit 2", function()
      local cases = {
        { "X 3", "^luakiq: unknown worker 'X'\n$" },
        { "W 0", "^luakiq: N must be an integer from 1 to 16384, got '0'\n$" },
        { "W -1", "^luakiq: N must be an integer from 1 to 16384, got '%-1'\n$" },
        { "W 2.5", "^luakiq: N must be an integer from 1 to 16384, got '2.5'\n$" },
        { "W x", "^luakiq: N must be an integer from 1 to 16384, got 'x'\n$" },
        { "W", "^luakiq: usage: luakiq reshard DIR WORKER N\n$" },
        { "W 4", "^luakiq: queue 'W' already has 4 shards; nothing to do\n$" },
        { "W 5 --batch 0", "^luakiq: %-%-batch must be an integer from 1 to 1000\n$" },
      }
      for _, c in ipairs(cases) do
        local rc, out, err = reshard(dir, c[1])
        assert.are.equal(2, rc, c[1] .. ": " .. tostring(out) .. tostring(err))
        assert.truthy(err:match(c[2]), c[1] .. ": " .. err)
        assert.is_true(one_line(err), err)
      end
      srv.conn:call("HDEL", "luakiq:queues", "W")
      local rc, _, err = reshard(dir, "W 5")
      assert.are.equal(2, rc)
      assert.truthy(err:match("^luakiq: queue 'W' is not in the registry"), err)
      assert.is_true(one_line(err), err)
    end)

    it("stale hosts: one started with the old count is refused; a fixed plan stops with one line (exit 1) and " ..
      "serves the new count when started again; an elastic one follows", function()
        local conn = srv.conn
        -- a fixed-plan host serving W and V
        local fixed = host.spawn("run " .. q(dir) .. " --threads 2", env())
        local edir = host.scriptdir {
          ["config.lua"] = "return { poll_interval = 0.2, lease_ttl = 1, splitter = 'elastic' }",
          ["workers/W.lua"] = W:format(4),
          ["workers/V.lua"] = (W:gsub("%%d", "2")),
        }
        local elastic = host.spawn("run " .. q(edir) .. " --threads 2", env())
        host.eventually(function() return fixed:log():match("thread started") and elastic:log():match("thread started") end,
          10, "hosts up")
        local rc, out, err = reshard(dir, "W 6")
        assert.are.equal(0, rc, err)
        assert.are.equal(6, json.decode(out).to)
        -- stderr says what to do next
        assert.truthy(err:match("now set shards_count = 6 in .*W%.lua"), err)
        -- the fixed host stops as at TERM and exits 1, with one line saying why and what to do
        assert.are.equal(1, fixed:wait(15), fixed:log())
        local log = fixed:log()
        local _, lines = log:gsub("queue W was resharded", "")
        assert.are.equal(1, lines, log)
        assert.truthy(log:find("queue W was resharded from 4 to 6 shards and this host's plan is fixed: stopping " ..
          "(exit 1) to be started again with the new plan: set shards_count = 6 in " .. dir .. "/workers/W.lua first",
          1, true), log)
        assert.falsy(log:match("worker thread failed"), log)
        host.eventually(function() return elastic:log():match("queue W resharded from 4 to 6 shards") end, 10,
          "the elastic host follows")
        -- the elastic host runs W's jobs on the 6 shards (V's too)
        host.enqueue(dir, "V", { { id = "v1", payload = 1 } }, env())
        local rc2, _, err2 = host.exec("enqueue " .. q(dir) .. " W", '{"id":"w1"}', env())
        assert.are.equal(2, rc2)
        assert.truthy(err2:match("shards_count is 4 but queue 'W' has 6 shards in Redis"), err2)
        host.write(dir .. "/workers/W.lua", W:format(6))
        host.enqueue(dir, "W", { { id = "w1", payload = 1 }, { id = "w2", payload = 2 }, { id = "w3", payload = 3 } }, env())
        host.eventually(function()
          local done = conn:call("LRANGE", "t:done", 0, -1)
          table.sort(done)
          return table.concat(done, ",") == "v1,w1,w2,w3"
        end, 15, "W's jobs on the elastic host, V's too", function()
          return select(2, host.exec("stats " .. q(dir), nil, env())) .. "\nELASTIC:\n" .. elastic:log()
        end)
        elastic:signal("TERM")
        assert.are.equal(0, elastic:wait(10), elastic:log())
        -- started again with the new file (its supervisor), the fixed host plans 6 shards of W and serves them
        conn:call("DEL", "t:done")
        fixed = host.spawn("run " .. q(dir) .. " --threads 2", env())
        host.eventually(function() return fixed:log():match("W5") end, 10, "the fixed host's new plan", function()
          return fixed:log()
        end)
        local ids = {}
        for i = 1, 12 do ids[i] = { id = "x" .. i, payload = i } end
        host.enqueue(dir, "W", ids, env())
        host.eventually(function() return conn:call("LLEN", "t:done") == 12 end, 15, "W's jobs on the fixed host",
          function() return fixed:log() end)
        -- a host started with the old count: refused, one line, exit 2
        local stale = host.scriptdir {
          ["config.lua"] = "return { poll_interval = 0.2 }",
          ["workers/W.lua"] = W:format(4),
        }
        local rc3, _, err3 = host.exec("run " .. q(stale), nil, env())
        assert.are.equal(2, rc3)
        assert.are.equal("luakiq: " .. stale .. "/workers/W.lua: shards_count is 4 but queue 'W' already has 6 shards " ..
          "in Redis; changing it would strand jobs (see docs/configuration.md, 'Changing shards_count')\n", err3)
        fixed:signal("TERM")
        assert.are.equal(0, fixed:wait(10), fixed:log())
        host.sh("rm -rf " .. q(edir) .. " " .. q(stale))
        assert.is_true(conn:call("EXISTS", "luakiq:{W}:reshard") == 0)
      end)
  end)
end)
