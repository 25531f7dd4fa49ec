-- Redis faults: a restart in the middle of a run (appendonly: data survives,
-- scripts are flushed), Redis away at start-up, a lost fetch reply.
-- docs/guarantees.md names these tests.
local json = require "luakiq.json"
local redis = require "helpers.redis"
local host = require "helpers.host"
local keys = require "luakiq.lib.keys"
local queue = require "luakiq.runner.queue"
local S = require "faults.support"

local srv = redis.fixture { appendonly = true }
after_each(host.cleanup)

local function spawn(dir, env) return S.spawn(srv, dir, env) end

local one_line = host.one_line

-- A worker whose batch for id "stall" waits (without touching Redis) until
-- the file FLAG exists, then optionally calls Redis.
-- The wait is the last thing perform does (after the recorder's own calls).
local function stall_dir(flag, after)
  return S.dir("threads_per_node = 1, poll_interval = 0.2, lease_ttl = 30", {
    shards = 2, batch = 1,
    after = ([[if batch.stall and not r.call("GET", "t:stalled") then
        r.call("SET", "t:stalled", pid)
        while not io.open(%q) do core.sleep(0.02) end
        %s
      end]]):format(flag, after or ""),
  })
end

describe("Redis restarted mid-run", function()
  it("an ack that could not be sent is sent after the restart; the batch does not run twice", function()
    local flag = os.tmpname()
    os.remove(flag)
    local dir = stall_dir(flag)
    local p = spawn(dir)
    S.push(srv, dir, { { id = "stall", payload = "s", score = 1 } })
    S.eventually(function() return srv.conn:call("GET", "t:stalled") end, 10, "stall batch running")
    srv:down()
    host.write(flag, "go") -- perform returns; its ack cannot reach Redis
    S.eventually(function() return p:log():match("Redis I/O error") or p:log():match("cannot connect") end,
      10, "host noticed")
    S.sleep(1)
    srv:up() -- same data (AOF), empty script cache: NOSCRIPT must be handled
    S.eventually(function() return p:log():match("reconnected to Redis") end, 15, "reconnect")
    -- it carries on: new jobs (woken by the resubscribed wake-up) run
    S.push(srv, dir, { { id = "after", payload = "a", score = 2 }, { id = "stall", payload = "s2", score = 3 } })
    S.eventually(function() return #S.seen(srv.conn, "after") == 1 and #S.seen(srv.conn, "stall") == 2 end,
      10, "jobs after the restart: " .. p:log() .. table.concat(S.seen(srv.conn, "stall"), ","))
    S.sleep(0.5)
    assert.are.same({ "s", "s2" }, S.seen(srv.conn, "stall"))
    local prefix = keys.prefix("luakiq", "Rec", keys.shard("stall", 2))
    assert.are.equal(0, srv.conn:call("EXISTS", prefix .. "busy"))
    assert.are.equal(0, S.stop(p), p:log())
    assert.falsy(p:log():match("restored"), p:log())
    assert.are.same({}, S.overlaps(srv.conn))
    os.remove(flag)
  end)

  it("a batch whose failure could not be recorded runs again at once after the restart, not after lease_ttl", function()
    local flag = os.tmpname()
    os.remove(flag)
    local dir = stall_dir(flag, [[r.call("PING")]]) -- raises: Redis is down
    local p = spawn(dir)
    S.push(srv, dir, { { id = "stall", payload = "s", score = 1 } })
    S.eventually(function() return srv.conn:call("GET", "t:stalled") end, 10, "stall batch running")
    srv:down()
    host.write(flag, "go")
    S.eventually(function() return p:log():match("retrying in") end, 10, "host noticed")
    S.sleep(0.5)
    srv:up()
    local t0 = S.now()
    -- lease_ttl is 30 s: the host redelivers its own unsettled batch itself
    S.eventually(function() return #S.seen(srv.conn, "stall") == 2 end, 10, "batch ran again")
    assert.is_true(S.now() - t0 < 8, "took " .. (S.now() - t0))
    assert.are.equal(0, S.stop(p), p:log())
    assert.are.same({}, S.overlaps(srv.conn, { [p.pidstr] = true }))
    os.remove(flag)
  end)

  it("calls parked in luakiq's I/O go on while Redis is down: they resume on time, and a deadline stops one", function()
    -- "wait" sleeps 1.5 s in luakiq.sleep; "stuck" sleeps 30 s past its 2 s
    -- timeout. Redis goes down once both have parked and comes back only
    -- after "wait" has finished and "stuck" has been stopped: the thread's
    -- back-off after its Redis errors must drive them (it used to sleep,
    -- and both resumed after the restart). The lease (30 s) outlasts the
    -- outage: nothing is fenced.
    local d = host.tmpdir()
    local note = ([[
      local D = %q
      local function note(file, text)
        local f = assert(io.open(D .. "/" .. file, "a"))
        f:write(text, "\n")
        f:close()
      end]]):format(d)
    local dir = host.scriptdir {
      ["config.lua"] = note .. [[
        return { threads_per_node = 1, poll_interval = 0.2, lease_ttl = 30,
          format_error = function(err)
            note("failed", tostring(err):match("^[^\n]*"))
            return tostring(err)
          end }]],
      ["workers/Park.lua"] = note .. [[
        local luakiq = require "luakiq"
        return {
          shards_count = 2, batch_size = 1, timeout = 2, max_retry_count = 0,
          perform = function(batch)
            local id = next(batch)
            note("runs", id)
            note("parked_" .. id, "")
            luakiq.sleep(id == "stuck" and 30 or 1.5)
            note("resumed", id)
          end,
        }]],
    }
    -- (the two ids are in different shards: both park on the one thread)
    assert.are_not.equal(keys.shard("wait", 2), keys.shard("stuck", 2))
    local p = spawn(dir)
    local cfg = require("luakiq.lib.runtime").load(dir)
    require("luakiq.client").push(srv.conn, cfg, "Park", { { id = "wait", payload = 1 }, { id = "stuck", payload = 1 } })
    S.eventually(function() return host.read(d .. "/parked_wait") and host.read(d .. "/parked_stuck") end, 10,
      "both parked: " .. p:log())
    srv:down()
    S.eventually(function() return host.read(d .. "/resumed") end, 6, "'wait' resumed while Redis is down: " .. p:log())
    assert.are.equal("wait\n", host.read(d .. "/resumed"))
    S.eventually(function() return host.read(d .. "/failed") end, 6, "'stuck' stopped while Redis is down: " .. p:log())
    assert.truthy(host.read(d .. "/failed"):match("^timeout: the call ran past its timeout of 2 s\n$"),
      host.read(d .. "/failed"))
    S.sleep(0.5) -- ('stuck''s failure cannot be recorded: Redis refuses the connection)
    srv:up()
    S.eventually(function() return p:log():match("reconnected to Redis") end, 15, "reconnect")
    -- 'wait' is acked after the restart; 'stuck', whose failure could not be
    -- recorded, is redelivered at once, stopped again and goes to the morgue
    -- (max_retry_count 0)
    local morgue
    S.eventually(function()
      local env = "REDIS_URL=" .. srv.url
      morgue = host.jobs(dir, "Park", "morgue", env)
      return morgue.stuck and next(host.jobs(dir, "Park", "queue", env)) == nil
        and next(host.jobs(dir, "Park", "busy", env)) == nil
    end, 15, "settled: " .. p:log())
    assert.truthy(morgue.stuck.error:find("^timeout"), morgue.stuck.error)
    assert.is_nil(morgue.wait)
    assert.are.equal(0, S.stop(p), p:log())
    local runs = {}
    for id in host.read(d .. "/runs"):gmatch("[^\n]+") do runs[id] = (runs[id] or 0) + 1 end
    assert.are.same({ wait = 1, stuck = 2 }, runs)
    assert.falsy(p:log():match("lease lost"), p:log())
    os.execute("rm -rf " .. host.quote(d))
  end)

  it("SCRIPT FLUSH while running is handled (NOSCRIPT reloads)", function()
    local dir = S.dir("threads_per_node = 2, poll_interval = 0.2", { shards = 3 })
    local p = spawn(dir)
    S.push_range(srv, dir, 10, 1, 1)
    S.eventually(function() return S.all_seen(srv.conn, 10, 1) end, 10, "first round")
    srv.conn:call("SCRIPT", "FLUSH")
    S.push_range(srv, dir, 10, 2, 2)
    S.eventually(function() return S.all_seen(srv.conn, 10, 2) end, 10, "second round")
    assert.are.equal(0, S.stop(p), p:log())
    assert.falsy(p:log():match("ERROR"), p:log())
  end)
end)

describe("Redis unreachable at start-up", function()
  it("run retries for redis_retry seconds, then exits 1 with one clear line", function()
    local dir = S.dir("redis_retry = 1")
    srv:down()
    local t0 = S.now()
    local rc, _, err = host.exec("run " .. host.quote(dir), nil, "REDIS_URL=" .. srv.url)
    local took = S.now() - t0
    srv:up()
    assert.are.equal(1, rc, err)
    assert.is_true(took >= 0.9 and took < 4, "took " .. took)
    local last = err:gsub("\n$", ""):match("[^\n]*$")
    assert.truthy(last:match("^luakiq: cannot connect to Redis at [^ ]*:" .. srv.port .. "[/:]"), err)
    assert.truthy(last:match("redis_retry"), last)
  end)

  it("run starts normally when Redis comes up within redis_retry", function()
    local dir = S.dir("redis_retry = 10, poll_interval = 0.2")
    srv:down()
    local p = host.spawn("run " .. host.quote(dir), "REDIS_URL=" .. srv.url)
    S.sleep(1)
    assert.is_true(p:alive())
    srv:up()
    S.eventually(function() return p:log():match("thread started") end, 10, "host start")
    S.push(srv, dir, { { id = "1", payload = "x" } })
    S.eventually(function() return #S.seen(srv.conn, "1") == 1 end, 10, "performed")
    assert.are.equal(0, S.stop(p), p:log())
  end)

  -- A Redis that restarts loads its data before it serves: it accepts
  -- connections and answers LOADING meanwhile (a large AOF can take
  -- minutes). run waits for it within redis_retry, as for one not up yet.
  it("run waits while Redis loads its data (LOADING) and starts once it is loaded", function()
    local core = require "luakiq.core"
    -- data that takes ~2 s to load (key-load-delay: microseconds a key)
    srv.conn:call("EVAL", "for i = 1, 15000 do redis.call('SET', 'fill:' .. i, 'v') end", 0)
    srv.conn:call("BGREWRITEAOF")
    S.eventually(function() return srv.conn:call("INFO", "persistence"):match("aof_rewrite_in_progress:0") end, 10,
      "the AOF rewritten")
    local dir = S.dir("redis_retry = 20, poll_interval = 0.2")
    srv:down()
    local p = host.spawn("run " .. host.quote(dir), "REDIS_URL=" .. srv.url)
    S.sleep(0.3)
    os.execute(("redis-server --port %d --bind 127.0.0.1 --dir %s --daemonize yes --pidfile %s/redis.pid " ..
      "--logfile %s/redis.log --save '' --appendonly yes --key-load-delay 100 " ..
      "--loading-process-events-interval-bytes 1024 >/dev/null 2>&1"):format(srv.port, srv.dir, srv.dir, srv.dir))
    local loading = S.eventually(function()
      local c, err = core.connect(srv.url, 2)
      local r
      if c then r, err = c:pcall("PING") c:close() end
      return r == "PONG" and "loaded" or (tostring(err):match("LOADING") and "loading")
    end, 10, "the server up")
    assert.are.equal("loading", loading) -- (the case under test: run connects while it loads)
    S.eventually(function()
      local c = core.connect(srv.url, 2)
      local ok = c and c:pcall("PING") == "PONG"
      if ok then srv.conn = c elseif c then c:close() end
      return ok
    end, 30, "the data loaded")
    srv.pid = tonumber(host.read(srv.dir .. "/redis.pid"))
    assert.is_true(p:alive(), p:log())
    S.eventually(function() return p:log():match("thread started") end, 10, "host start")
    S.push(srv, dir, { { id = "1", payload = "x" } })
    S.eventually(function() return #S.seen(srv.conn, "1") == 1 end, 10, "performed")
    assert.are.equal(0, S.stop(p), p:log())
  end)

  it("a TERM or INT while run waits for Redis exits 0 at once, saying nothing was taken", function()
    -- a host stopped during a Redis restart (the soak met it): it used to die
    -- of the signal (143) with nothing in its log
    local dir = S.dir("redis_retry = 60")
    srv:down()
    for _, sig in ipairs { "TERM", "INT" } do
      local p = host.spawn("run " .. host.quote(dir), "REDIS_URL=" .. srv.url)
      S.eventually(function() return p:log():match("cannot connect to Redis") end, 10, "waiting for Redis")
      local t0 = S.now()
      p:signal(sig)
      local rc = p:wait(5)
      assert.are.equal(0, rc, sig .. ": " .. p:log())
      assert.is_true(S.now() - t0 < 3, sig .. " took " .. (S.now() - t0))
      assert.truthy(p:log():match("stopped before the start %(cannot connect to Redis[^\n]*; nothing was taken"), p:log())
    end
    srv:up()
  end)

  it("a TERM that comes while run loads its scripts stops it before any thread starts", function()
    -- on_server_init is the last step before the threads: a TERM there
    -- (sent by the hook itself, so the timing is certain) is kept for later
    local dir = S.dir("on_server_init = function() os.execute('kill -TERM ' .. require('luakiq.core').getpid()) end")
    local p = host.spawn("run " .. host.quote(dir), "REDIS_URL=" .. srv.url)
    assert.are.equal(0, p:wait(10), p:log())
    assert.truthy(p:log():match("TERM before the start: stopping; nothing was taken"), p:log())
    assert.falsy(p:log():match("thread started"), p:log())
  end)

  it("enqueue fails at once with exit 1 and one line", function()
    local dir = S.dir("")
    srv:down()
    local rc, _, err = host.exec("enqueue " .. host.quote(dir) .. " Rec", '{"id":1}', "REDIS_URL=" .. srv.url)
    srv:up()
    assert.are.equal(1, rc)
    assert.is_true(one_line(err), err)
  end)
end)

describe("Redis that orders strings by a language (LC_COLLATE)", function()
  -- (en_US.UTF-8 made by localedef into a directory of the spec's own,
  -- from Debian's locales package: the server's LOCPATH)
  local loc, lsrv
  setup(function()
    loc = host.tmpdir()
    assert(host.sh("localedef -i en_US -f UTF-8 " .. host.quote(loc .. "/en_US.UTF-8") .. " >/dev/null 2>&1"),
      "localedef en_US.UTF-8 (package locales) failed")
    lsrv = redis.start { env = "LOCPATH=" .. host.quote(loc) .. " LC_ALL=en_US.UTF-8" }
  end)
  teardown(function()
    if lsrv then lsrv:stop() end
    host.sh("rm -rf " .. host.quote(loc))
  end)

  it("is refused by every command and by its scripts, with one line, before anything is written", function()
    -- the server does compare by language, as Redis's Lua < is strcoll
    assert.are.equal(0, lsrv.conn:call("EVAL", "return ('B' < 'a') and 1 or 0", 0))
    local dir = S.dir("")
    local env = "REDIS_URL=" .. lsrv.url
    for _, cmd in ipairs { "enqueue " .. host.quote(dir) .. " Rec", "stats " .. host.quote(dir), "run " .. host.quote(dir) } do
      local rc, _, err = host.exec(cmd, '{"id":"a"}\n{"id":"B"}\n', env)
      assert.are.equal(1, rc, cmd .. ": " .. err)
      assert.is_true(one_line(err), err)
      assert.truthy(err:find("orders strings by a language (its LC_COLLATE), and luakiq's scripts need byte order: " ..
        "start redis-server with LC_ALL=C", 1, true), err)
    end
    -- a producer that calls push.lua itself is refused by the script
    local P = keys.prefix("luakiq", "Rec", 0)
    local ok, err = pcall(lsrv.conn.script, lsrv.conn, "push", P, "", 1, "a", 1, -1, 1, '""')
    assert.is_false(ok)
    assert.truthy(tostring(err):find("luakiq needs byte order", 1, true), tostring(err))
    assert.are.equal(0, lsrv.conn:call("DBSIZE"))
  end)
end)

describe("Redis out of memory during an enqueue", function()
  -- Each push.lua call is atomic under OOM (refused at its first write), so
  -- the error can say exactly how many jobs are stored: Redis must agree.
  local function queued(dir)
    local rc, out = host.exec("stats " .. host.quote(dir), nil, "REDIS_URL=" .. srv.url)
    assert.are.equal(0, rc)
    return json.decode(out).by_worker.Rec.length
  end
  local function fill(n, from)
    local lines, pad = {}, string.rep("x", 1000)
    for i = 1, n do lines[i] = ('{"id":"m%d","payload":"%s"}'):format(from + i, pad) end
    return table.concat(lines, "\n") .. "\n"
  end

  it("says how many jobs were stored, and Redis holds exactly those", function()
    local dir = S.dir("")
    local env = "REDIS_URL=" .. srv.url
    srv.conn:call("FLUSHALL")
    local used = tonumber(srv.conn:call("INFO", "memory"):match("used_memory:(%d+)"))
    srv.conn:call("CONFIG", "SET", "maxmemory", tostring(used + 5 * 1024 * 1024))
    local ok, err = pcall(function()
      -- JSON lines, streamed in chunks of 2,000: fails in a later chunk
      local rc, _, e = host.exec("enqueue " .. host.quote(dir) .. " Rec", fill(6000, 0), env)
      assert.are.equal(1, rc, e)
      assert.is_true(one_line(e), e)
      local before = e:find("; nothing enqueued before them", 1, true) and 0 or
        tonumber(e:match("; (%d+) jobs enqueued before them"))
      local some = tonumber(e:match("%((%d+) of the %d+ jobs were stored%)"))
      assert.truthy(e:find("OOM", 1, true), e)
      assert.is_true(before and some and before > 0, e) -- a chunk went whole, a later one failed
      local n = queued(dir)
      assert.are.equal(before + some, n, e)
      if some > 0 then assert.truthy(e:find(", " .. n .. " in all", 1, true), e) end
      -- one JSON array: the same count in the one push's error
      local rc2, _, e2 = host.exec("enqueue " .. host.quote(dir) .. " Rec",
        "[" .. fill(3000, 10000):gsub("\n(.)", ",%1"):gsub("\n$", "") .. "]", env)
      assert.are.equal(1, rc2, e2)
      local some2 = tonumber(e2:match("%((%d+) of the 3000 jobs were stored%)"))
      assert.are.equal(n + some2, queued(dir), e2)
    end)
    srv.conn:call("CONFIG", "SET", "maxmemory", "0")
    assert(ok, err)
  end)
end)

describe("TERM while Redis refuses the acks (out of memory)", function()
  it("keeps the lease of the shard whose ack is unsent, says so in one line, and gives the others back", function()
    srv.conn:call("FLUSHALL")
    -- W's call fills Redis up (maxmemory 1 byte) after it ran: its ack is refused
    local dir = host.scriptdir {
      ["config.lua"] = "return { threads_per_node = 1, poll_interval = 0.2, lease_ttl = 20 }",
      ["workers/W.lua"] = [[
local luakiq = require "luakiq"
return { shards_count = 2, perform = function(batch)
  for id in pairs(batch) do luakiq.redis.call("RPUSH", "t:ran", id) end
  luakiq.redis.call("CONFIG", "SET", "maxmemory", "1")
end }]],
    }
    local env = "REDIS_URL=" .. srv.url
    local tmp = host.scriptdir {} -- TMPDIR of both hosts: where the unsent ack is left
    local p = S.spawn(srv, dir, "TMPDIR=" .. tmp)
    -- (another user's symlink at the file's old, predictable name in TMPDIR,
    -- planted once the host started: the ack goes to this user's private
    -- directory, not through it)
    local victim = host.tmpdir() .. "/victim"
    host.write(victim, "precious\n")
    assert(host.sh(("ln -s %s %s/luakiq_unacked_luakiq_%08x.jsonl"):format(host.quote(victim), host.quote(tmp),
      require("luakiq.core").crc32(srv.url))))
    local rc, _, err = host.exec("enqueue " .. host.quote(dir) .. " W", '{"id":"a"}', env)
    assert.are.equal(0, rc, err)
    local ok, e = pcall(function()
      host.eventually(function() return srv.conn:call("LLEN", "t:ran") == 1 end, 10, "a ran")
      host.eventually(function() return p:log():find("OOM", 1, true) end, 10, "the ack refused")
      p:signal("TERM")
      assert.is_not_nil(p:wait(20), "the host stops")
    end)
    srv.conn:call("CONFIG", "SET", "maxmemory", "0")
    assert(ok, e)
    local log = p:log()
    local shard = require("luakiq.core").crc32("a") % 2
    local P, other = keys.prefix("luakiq", "W", shard), keys.prefix("luakiq", "W", 1 - shard)
    -- one line names the batch and what happens to it, and the lease stays
    local _, lines = log:gsub("stopping with the ack of batch [^\n]* unsent; the lease is kept: a start of luakiq " ..
      "on this machine within lease_ttl %(20 s%) sends it %([^)]*%), else its performed " ..
      "jobs run again when the lease ends", "")
    assert.are.equal("precious\n", host.read(victim))
    assert.truthy(log:find(tmp:gsub("%p", "%%%0") .. "/luakiq%-%d+/unacked_luakiq_%x+%.jsonl"), log)
    assert.are.equal(1, lines, log)
    assert.truthy(log:find('unsent;[^\n]*"shard":' .. shard .. ',"worker":"W"'), log)
    assert.is_nil(log:find("stack traceback", 1, true), log) -- (the heartbeat's failure too: one line)
    assert.is_true(srv.conn:call("PTTL", P .. "lease") > 10000, "the lease is kept")
    assert.are.equal(0, srv.conn:call("EXISTS", other .. "lease"), "the other shard's lease is given back")
    assert.are.equal(1, srv.conn:call("HLEN", P .. "busy"), "a is still in flight, not lost")
    -- the warning about the acks is one line, not one per retry
    local _, warns = log:gsub("cannot ack at stop", "")
    assert.is_true(warns <= 1, log)
    -- the next start on this machine sends the ack: a is not run again
    local p2 = S.spawn(srv, dir, "TMPDIR=" .. tmp)
    host.eventually(function() return p2:log():find("settled the ack of batch", 1, true) end, 10, "the ack settled")
    host.enqueue(dir, "W", { { id = "b" } }, env) -- (its call sets maxmemory again: b's ack is the next host's)
    host.eventually(function() return srv.conn:call("LLEN", "t:ran") == 2 end, 10, "b ran")
    srv.conn:call("CONFIG", "SET", "maxmemory", "0")
    assert.are.same({ "a", "b" }, srv.conn:call("LRANGE", "t:ran", 0, -1))
    assert.are.equal(0, srv.conn:call("HEXISTS", P .. "busy", "a"), "a was acked")
    S.stop(p2)
    srv.conn:call("CONFIG", "SET", "maxmemory", "0")
    host.sh("rm -rf " .. host.quote(tmp))
  end)
end)

describe("Redis that may evict keys", function()
  it("a maxmemory-policy other than noeviction: one warning line at start, and on the dashboard", function()
    local web = require "web.support"
    for _, policy in ipairs { "allkeys-lru", "noeviction" } do
      srv.conn:call("CONFIG", "SET", "maxmemory-policy", policy)
      local dir = S.dir("threads_per_node = 1")
      local p, base = web.start(dir, "REDIS_URL=" .. srv.url)
      local ok, err = pcall(function()
        local _, _, v = web.request(base, "GET", "/api/web/dashboard")
        assert.are.equal(policy, v.redis_info.maxmemory_policy)
        local _, n = p:log():gsub("maxmemory%-policy is ", "")
        if policy == "noeviction" then
          assert.are.equal(0, n, p:log())
          assert.is_nil(v.redis_info.eviction_warning)
        else
          assert.are.equal(1, n, p:log())
          assert.truthy(p:log():match("warn [^\n]*Redis maxmemory%-policy is allkeys%-lru: once Redis is full it " ..
            "deletes keys, jobs among them, without an error; set maxmemory%-policy noeviction"), p:log())
          assert.truthy(v.redis_info.eviction_warning:find("allkeys-lru", 1, true))
        end
        web.browser_test("eviction", base, policy)
      end)
      web.stop(p, dir)
      assert(ok, err)
    end
  end)
end)

describe("a lost fetch reply (fetch.lua, by batch id)", function()
  it("redelivers the batch in flight instead of fetching more, and acks only by its id", function()
    local dir = S.dir("", { shards = 1 })
    S.push_range(srv, dir, 3, 1, 1)
    local P = keys.prefix("luakiq", "Rec", 0)
    local function fetch(ack, limit)
      local r = srv.conn:pipeline({ queue.fetch_cmd(P, "tok", 30000, limit or 2, ack, false, S.now()) })[1]
      return queue.parse_fetch(r, { prefix = P, worker = "Rec", shard = 0 })
    end
    local r1 = fetch()
    assert.is_nil(r1.leased)
    assert.are.equal(2, #r1.jobs)
    -- the reply is "lost": the caller asks again without an ack
    local r2 = fetch()
    assert.are.same(r1.jobs, r2.jobs)
    assert.are.equal(r1.batch, r2.batch)
    -- an ack naming another batch acks nothing and redelivers
    local r3 = fetch(tostring(tonumber(r1.batch) - 1))
    assert.are.equal(0, r3.acked)
    assert.are.equal(r1.batch, r3.batch)
    -- the right id acks, and the rest comes
    local r4 = fetch(r1.batch)
    assert.are.equal(2, r4.acked)
    assert.are.equal(1, #r4.jobs)
    assert.are_not.equal(r1.batch, r4.batch)
    -- an ack re-sent after a lost ack reply acks nothing more
    local r5 = fetch(r4.batch, 0)
    assert.are.equal(1, r5.acked)
    local r6 = fetch(r4.batch, 0)
    assert.are.equal(0, r6.acked)
    assert.are.equal("3", srv.conn:call("HGET", P .. "counters", "processed"))
  end)
end)
