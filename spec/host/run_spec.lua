-- End-to-end: the real binary as a separate process, a real redis-server,
-- real signals. Each test builds its own script directory.
local core = require "luakiq.core"
local redis = require "helpers.redis"
local host = require "helpers.host"
local q = host.quote

local srv, env = host.fixture()


local function enqueue(dir, worker, lines)
  local rc, out, err = host.exec("enqueue " .. q(dir) .. " " .. worker, table.concat(lines, "\n"), env())
  assert.are.equal(0, rc, err)
  return out
end

local function stats(dir)
  local rc, out, err = host.exec("stats " .. q(dir), nil, env())
  assert.are.equal(0, rc, err)
  return require("luakiq.json").decode(out)
end

-- A worker that records, per id, every payload it sees and whether two
-- batches of one id ever overlapped (SETNX marker held during perform).
local RECORDER = [[
local luakiq = require "luakiq"
return {
  shards_count = %d, batch_size = %d,
  perform = function(batch)
    local r = luakiq.redis
    for id in pairs(batch) do
      if r.call("SETNX", "t:busy:" .. id, "1") == 0 then r.call("INCR", "t:overlap") end
    end
    for id, payloads in pairs(batch) do
      for _, p in ipairs(payloads) do r.call("RPUSH", "t:seen:" .. id, p) end
    end
    %s
    for id in pairs(batch) do r.call("DEL", "t:busy:" .. id) end
  end,
}
]]

describe("luakiq run", function()
  it("processes jobs in score order per id, never one id twice at once, over 5 threads", function()
    local dir = host.scriptdir {
      ["config.lua"] = "return { threads_per_node = 5, poll_interval = 0.2 }",
      ["workers/Rec.lua"] = RECORDER:format(10, 3, ""),
    }
    local ids, per_id = 200, 20
    -- first half before the host starts, the rest while it runs (merges happen)
    local function push(from, to)
      local lines = {}
      for v = from, to do
        for id = 1, ids do lines[#lines + 1] = ('{"id":"%d","payload":%d,"score":%d}'):format(id, v, v) end
      end
      enqueue(dir, "Rec", lines)
    end
    push(1, per_id / 2)
    local p = host.spawn("run " .. q(dir), env())
    push(per_id / 2 + 1, per_id)
    host.eventually(function()
      local s = stats(dir)
      return s.total.length == 0 and srv.conn:call("EXISTS", "t:seen:" .. ids) == 1
        and (function()
          for id = 1, ids do
            if srv.conn:call("LLEN", "t:seen:" .. id) < per_id then return false end
          end
          return true
        end)()
    end, 60, "all payloads performed")
    assert.is_true(p:signal("TERM"))
    assert.are.equal(0, p:wait(10), p:log())
    assert.are.equal(false, srv.conn:call("GET", "t:overlap"))
    for id = 1, ids do
      local seen = srv.conn:call("LRANGE", "t:seen:" .. id, 0, -1)
      assert.are.equal(per_id, #seen, "id " .. id)
      for v = 1, per_id do assert.are.equal(tostring(v), seen[v], "id " .. id .. " order") end
    end
  end)

  it("exits at once on TERM when idle (no waiting out poll_interval)", function()
    local dir = host.scriptdir {
      ["config.lua"] = "return { poll_interval = 30 }",
      ["workers/Rec.lua"] = RECORDER:format(2, 1, ""),
    }
    local p = host.spawn("run " .. q(dir), env())
    host.eventually(function() return p:log():match("thread started") end, 10, "start")
    local t0 = core.now()
    p:signal("TERM")
    assert.are.equal(0, p:wait(5), p:log())
    assert.is_true(core.now() - t0 < 1, "took " .. (core.now() - t0))
  end)

  it("lets a running batch finish on TERM, acks it and exits 0", function()
    local dir = host.scriptdir {
      ["config.lua"] = "return { poll_interval = 0.1 }",
      ["workers/Rec.lua"] = RECORDER:format(1, 1, [[r.call("SET", "t:started", "1") require("luakiq.core").sleep(1.5)]]),
    }
    enqueue(dir, "Rec", { '{"id":"1","payload":"x"}' })
    local p = host.spawn("run " .. q(dir), env())
    host.eventually(function() return srv.conn:call("GET", "t:started") end, 10, "batch start")
    p:signal("TERM")
    assert.are.equal(0, p:wait(10), p:log())
    assert.are.same({ "x" }, srv.conn:call("LRANGE", "t:seen:1", 0, -1))
    local s = stats(dir)
    assert.are.equal(0, s.total.length)
    local rc, out = host.exec("jobs " .. q(dir) .. " Rec busy", nil, env())
    assert.are.equal(0, rc)
    assert.are.equal("", out)
  end)

  it("wakes on push: an idle host starts a new job long before poll_interval (and ran on_server_init)", function()
    local dir = host.scriptdir {
      ["config.lua"] = [[return { poll_interval = 30,
        on_server_init = function() require("luakiq").redis.call("SET", "t:init", "1") end }]],
      ["workers/Rec.lua"] = RECORDER:format(3, 1, ""),
    }
    local p = host.spawn("run " .. q(dir), env())
    host.eventually(function() return p:log():match("thread started") end, 10, "start")
    core.sleep(0.3)
    local t0 = core.now()
    enqueue(dir, "Rec", { '{"id":"7","payload":"w"}' })
    host.eventually(function() return srv.conn:call("LLEN", "t:seen:7") == 1 end, 5, "performed")
    assert.is_true(core.now() - t0 < 2)
    assert.are.equal("1", srv.conn:call("GET", "t:init"))
    p:signal("TERM")
    assert.are.equal(0, p:wait(5))
  end)

  it("on TERM amid a fetch of several batches, acks what ran, puts the rest back, exits at once", function()
    local dir = host.scriptdir {
      ["config.lua"] = "return { poll_interval = 5 }",
      ["workers/Rec.lua"] = RECORDER:format(1, 1, [[r.call("SET", "t:started", "1") require("luakiq.core").sleep(0.5)]]),
    }
    local lines = {}
    for i = 1, 6 do lines[i] = ('{"id":"%d","payload":"p%d"}'):format(i, i) end
    enqueue(dir, "Rec", lines) -- one fetch takes all 6 (fetch_size 10), performed one per call
    local p = host.spawn("run " .. q(dir), env())
    host.eventually(function() return srv.conn:call("GET", "t:started") end, 10, "first perform")
    local sent = core.now()
    p:signal("TERM")
    assert.are.equal(0, p:wait(10), p:log())
    assert.is_true(core.now() - sent < 1.5, "stop took " .. (core.now() - sent) .. " s")
    local ran = 0
    for i = 1, 6 do ran = ran + srv.conn:call("LLEN", "t:seen:" .. i) end
    assert.is_true(ran >= 1 and ran <= 2, tostring(ran))
    assert.are.equal(6 - ran, stats(dir).total.length)
    local rc, out = host.exec("jobs " .. q(dir) .. " Rec busy", nil, env())
    assert.are.same({ 0, "" }, { rc, out })
  end)

  it("loses nothing when killed with -9 during a batch: the batch runs again after restart", function()
    local dir = host.scriptdir {
      ["config.lua"] = "return { poll_interval = 0.1, lease_ttl = 1 }",
      ["workers/Rec.lua"] = RECORDER:format(1, 5, [[
        if not r.call("GET", "t:killed") then r.call("SET", "t:in", "1") require("luakiq.core").sleep(30) end]]),
    }
    local lines = {}
    for i = 1, 5 do lines[i] = ('{"id":"%d","payload":"p%d"}'):format(i, i) end
    enqueue(dir, "Rec", lines)
    local p = host.spawn("run " .. q(dir), env())
    host.eventually(function() return srv.conn:call("GET", "t:in") end, 10, "batch running")
    p:signal("KILL")
    p:wait(5)
    srv.conn:call("SET", "t:killed", "1")
    srv.conn:call("DEL", "t:busy:1", "t:busy:2", "t:busy:3", "t:busy:4", "t:busy:5")
    for i = 1, 5 do srv.conn:call("DEL", "t:seen:" .. i) end
    local p2 = host.spawn("run " .. q(dir), env())
    host.eventually(function()
      for i = 1, 5 do if srv.conn:call("LLEN", "t:seen:" .. i) ~= 1 then return false end end
      return true
    end, 15, "restored batch performed")
    p2:signal("TERM")
    assert.are.equal(0, p2:wait(5), p2:log())
    assert.truthy(p2:log():match("restored 5 in%-flight jobs"))
  end)

  it("a second INT exits at once, and its in-flight jobs return on the next start", function()
    local dir = host.scriptdir {
      ["config.lua"] = "return { poll_interval = 0.1, lease_ttl = 1 }",
      ["workers/Rec.lua"] = RECORDER:format(1, 1, [[
        if not r.call("GET", "t:second") then r.call("SET", "t:in", "1") require("luakiq.core").sleep(30) end]]),
    }
    enqueue(dir, "Rec", { '{"id":"1","payload":"a"}' })
    local p = host.spawn("run " .. q(dir), env())
    host.eventually(function() return srv.conn:call("GET", "t:in") end, 10, "batch running")
    p:signal("INT")
    core.sleep(0.2)
    assert.is_true(p:alive())
    p:signal("INT")
    assert.are.equal(130, p:wait(3))
    srv.conn:call("SET", "t:second", "1")
    srv.conn:call("DEL", "t:busy:1", "t:seen:1")
    local p2 = host.spawn("run " .. q(dir), env())
    host.eventually(function() return srv.conn:call("LLEN", "t:seen:1") == 1 end, 15, "rerun")
    p2:signal("TERM")
    assert.are.equal(0, p2:wait(5))
  end)
  it("writes a thread dump on TTIN: state, worker, shard, ids, since, the call's time", function()
    local dump = host.tmpdir() .. "/dump.txt"
    local dir = host.scriptdir {
      ["config.lua"] = ("return { poll_interval = 0.1, dump_path = %q }"):format(dump),
      ["workers/Rec.lua"] = RECORDER:format(1, 1, [[r.call("SET", "t:in", "1")
        for _ = 1, 40 do r.call("PING") require("luakiq.core").sleep(0.05) end]]),
    }
    enqueue(dir, "Rec", { '{"id":"slow","payload":1}' })
    local p = host.spawn("run " .. q(dir), env())
    host.eventually(function() return srv.conn:call("GET", "t:in") end, 10, "batch running")
    p:signal("TTIN")
    local text = host.eventually(function() return host.read(dump) end, 5, "dump file")
    assert.truthy(text:find("== thread t0 ==", 1, true), text)
    assert.truthy(text:find("state: performing", 1, true), text)
    assert.truthy(text:find("worker: Rec", 1, true), text)
    assert.truthy(text:find("ids: slow", 1, true), text)
    assert.truthy(text:find("\ncall: running %d+%.%d+ s of its timeout 600%.000 s\n"), text)
    -- taken by the thread itself at a safe point (its next luakiq call)
    assert.truthy(text:find("traceback (at a safe point):", 1, true), text)
    assert.truthy(text:find("workers/Rec.lua", 1, true), text)
    assert.truthy(p:log():find(dump, 1, true))
    p:signal("TERM")
    assert.are.equal(0, p:wait(10), p:log())
  end)

  -- Another user of the machine may plant symlinks at predictable names in
  -- /tmp: the dump never writes through one (a configured dump_path: a
  -- temporary file of a random name, renamed over the path; the default:
  -- a private directory, TMPDIR/luakiq-UID, mode 0700).
  it("writes the TTIN dump through no planted symlink (a shared dump_path, and the default in TMPDIR)", function()
    local shared, victims = host.tmpdir(), {}
    local function plant(link)
      local victim = host.tmpdir() .. "/victim"
      host.write(victim, "precious\n")
      assert(host.sh("ln -s " .. q(victim) .. " " .. q(link)))
      victims[#victims + 1] = victim
    end
    local function untouched()
      for _, v in ipairs(victims) do assert.are.equal("precious\n", host.read(v), v) end
    end
    local dump = shared .. "/dump.txt"
    plant(dump .. ".tmp")
    plant(dump)
    local dir = host.scriptdir {
      ["config.lua"] = ("return { poll_interval = 0.1, dump_path = %q }"):format(dump),
      ["workers/Rec.lua"] = RECORDER:format(1, 1, ""),
    }
    local p = host.spawn("run " .. q(dir), env())
    host.eventually(function() return p:log():match("thread started") end, 10, "start")
    p:signal("TTIN")
    host.eventually(function() return p:log():find("thread dump written", 1, true) end, 5, "the dump", function()
      return p:log() end)
    untouched()
    assert.truthy(host.sh("test -f " .. q(dump) .. " && ! test -L " .. q(dump)), "a file of its own")
    assert.truthy(host.read(dump):find("== thread t0 ==", 1, true))
    p:signal("TERM")
    assert.are.equal(0, p:wait(10), p:log())
    -- the default path, with TMPDIR a shared directory
    host.write(dir .. "/config.lua", "return { poll_interval = 0.1 }")
    p = host.spawn("run " .. q(dir), "TMPDIR=" .. q(shared) .. " " .. env())
    host.eventually(function() return p:log():match("thread started") end, 10, "start")
    for _, name in ipairs { "/luakiq_ttin_" .. p.pid .. ".txt", "/luakiq_ttin_" .. p.pid .. ".txt.tmp" } do
      plant(shared .. name)
    end
    p:signal("TTIN")
    local path = host.eventually(function() return p:log():match("thread dump written to (%S+)") end, 5, "the dump",
      function() return p:log() end)
    untouched()
    local private = shared .. "/luakiq-" .. host.capture("id -u"):match("%d+")
    assert.are.equal(private, path:match("^(.*)/[^/]*$"))
    assert.are.equal("700", host.capture("stat -c %a " .. q(private)):match("%d+"))
    assert.truthy(host.read(path):find("== thread t0 ==", 1, true))
    p:signal("TERM")
    assert.are.equal(0, p:wait(10), p:log())
    host.sh("rm -rf " .. q(shared) .. " " .. q(dir))
  end)

  it("luakiq.fatal stops the host: last_words runs, exit 1, the batch comes back later", function()
    local dir = host.scriptdir {
      ["config.lua"] = [[local luakiq = require "luakiq"
        return { poll_interval = 0.1, lease_ttl = 1,
          last_words = function(err) luakiq.redis.call("SET", "t:last_words", err) end }]],
      ["workers/Rec.lua"] = [[local luakiq = require "luakiq"
        return { shards_count = 1, perform = function(batch)
          if not luakiq.redis.call("GET", "t:again") then luakiq.fatal("disk on fire") end
          for id in pairs(batch) do luakiq.redis.call("RPUSH", "t:seen:" .. id, "ok") end
        end }]],
    }
    enqueue(dir, "Rec", { '{"id":"f"}' })
    local p = host.spawn("run " .. q(dir), env())
    assert.are.equal(1, p:wait(10), p:log())
    assert.truthy(p:log():find("disk on fire", 1, true))
    srv.conn:call("SET", "t:again", "1")
    local p2 = host.spawn("run " .. q(dir), env())
    host.eventually(function() return srv.conn:call("LLEN", "t:seen:f") == 1 end, 10, "rerun after fatal")
    p2:signal("TERM")
    assert.are.equal(0, p2:wait(5))
  end)

  -- fetch_size not set: each shard's fetch takes what its jobs perform in
  -- about 10 ms (config.lua, luakiq.runner.fetch's fetch_adapt), between batch_size
  -- and 300, starting at 10. Seen from a call: the busy hash holds the
  -- whole fetch in flight.
  it("adapts a shard's fetch to its jobs' time: fast jobs up to 300 at once, slow ones one", function()
    local dir = host.scriptdir {
      ["config.lua"] = "return { threads_per_node = 2, poll_interval = 1 }",
      -- (the jobs in flight: busy's fields but its filler, docs/redis.md)
      ["workers/Fast.lua"] = [[local luakiq = require "luakiq"
        local n, B = 0, "luakiq:{Fast:0}:busy"
        return { shards_count = 1, perform = function()
          n = n + 1
          if n % 25 == 0 then
            luakiq.redis.call("RPUSH", "t:fast", luakiq.redis.call("HLEN", B) - luakiq.redis.call("HEXISTS", B, ""))
          end
        end }]],
      ["workers/Slow.lua"] = [[local luakiq = require "luakiq"
        local B = "luakiq:{Slow:0}:busy"
        return { shards_count = 1, perform = function()
          luakiq.redis.call("RPUSH", "t:slow", luakiq.redis.call("HLEN", B) - luakiq.redis.call("HEXISTS", B, ""))
          luakiq.sleep(0.03)
        end }]],
    }
    local fast, slow = {}, {}
    for i = 1, 3000 do fast[i] = ('{"id":"f%d"}'):format(i) end
    for i = 1, 14 do slow[i] = ('{"id":"s%02d"}'):format(i) end
    enqueue(dir, "Fast", fast)
    enqueue(dir, "Slow", slow)
    local p = host.spawn("run " .. q(dir), env())
    host.eventually(function()
      return srv.conn:call("LLEN", "t:fast") == 120 and srv.conn:call("LLEN", "t:slow") == 14
    end, 30, "both drained", function() return p:log() end)
    local most = 0
    for _, v in ipairs(srv.conn:call("LRANGE", "t:fast", 0, -1)) do most = math.max(most, tonumber(v)) end
    assert.is_true(most > 10 and most <= 300, "the most jobs one fetch of Fast held: " .. most)
    -- the first fetch of Slow takes 10 (30 ms each), every one after it 1
    local seen = srv.conn:call("LRANGE", "t:slow", 0, -1)
    assert.are.same({ "10", "10", "10", "10", "10", "10", "10", "10", "10", "10", "1", "1", "1", "1" }, seen)
    assert.is_true(p:signal("TERM"))
    assert.are.equal(0, p:wait(10), p:log())
  end)

  -- ... and to about 1 MiB of records: fast jobs of 64 KiB payloads (a
  -- load_payload that only measures them; calls of 8 jobs that each make
  -- two Redis calls, so time does not bound the fetch even on a slow,
  -- loaded machine) are fetched 10 first, then at most 16 at a time, where
  -- small ones of the same speed go up to 300.
  it("bounds an adapting fetch by its jobs' bytes: 64 KiB payloads 16 at a time", function()
    local dir = host.scriptdir {
      ["config.lua"] = "return { poll_interval = 1, load_payload = function(s) return #s end }",
      ["workers/Big.lua"] = [[local luakiq = require "luakiq"
        local B = "luakiq:{Big:0}:busy"
        return { shards_count = 1, batch_size = 8, perform = function(batch)
          local n = 0
          for _ in pairs(batch) do n = n + 1 end
          -- the fetch's size: its jobs in P busy (less the filler, keys.lua)
          luakiq.redis.call("RPUSH", "t:big", luakiq.redis.call("HLEN", B) - luakiq.redis.call("HEXISTS", B, ""))
          luakiq.redis.call("INCRBY", "t:done", n)
        end }]],
    }
    local big, pad = {}, string.rep("x", 65536 - 200)
    for i = 1, 100 do big[i] = ('{"id":"b%03d","payload":"%s"}'):format(i, pad) end
    enqueue(dir, "Big", big)
    local p = host.spawn("run " .. q(dir), env())
    host.eventually(function() return tonumber(srv.conn:call("GET", "t:done")) == 100 end, 30, "drained",
      function() return p:log() end)
    local seen = srv.conn:call("LRANGE", "t:big", 0, -1)
    -- the first fetch: 10 (fetch_start; two calls, of 8 and 2); the next
    -- ones: 1 MiB / ~64 KiB
    assert.are.same({ "10", "10" }, { seen[1], seen[2] })
    local most = 0
    for i = 3, #seen do most = math.max(most, tonumber(seen[i])) end
    assert.are.equal(16, most, table.concat(seen, " "))
    assert.is_true(p:signal("TERM"))
    assert.are.equal(0, p:wait(10), p:log())
  end)

  it("perform_async from a worker enqueues into another worker (client middlewares apply)", function()
    local dir = host.scriptdir {
      ["config.lua"] = [[return { poll_interval = 0.1, client_middlewares = {
          function(worker, jobs, nxt) for _, j in ipairs(jobs) do j.payload = "mw:" .. tostring(j.payload) end nxt() end } }]],
      ["workers/A.lua"] = [[local luakiq = require "luakiq"
        return { shards_count = 2, perform = function(batch)
          local jobs = {}
          for id, payloads in pairs(batch) do jobs[#jobs + 1] = { id = id, payload = payloads[1] } end
          luakiq.perform_async("B", jobs)
        end }]],
      ["workers/B.lua"] = RECORDER:format(3, 5, ""),
    }
    enqueue(dir, "A", { '{"id":"x","payload":"1"}', '{"id":"y","payload":"2"}' })
    local p = host.spawn("run " .. q(dir), env())
    host.eventually(function()
      return srv.conn:call("LLEN", "t:seen:x") == 1 and srv.conn:call("LLEN", "t:seen:y") == 1
    end, 10, "B performed")
    -- the CLI enqueue ran the middleware once ("mw:1"), perform_async once more
    assert.are.same({ 'mw:mw:1' }, srv.conn:call("LRANGE", "t:seen:x", 0, -1))
    p:signal("TERM")
    assert.are.equal(0, p:wait(5))
  end)

  -- A 20 MB error() was stored whole (and sent whole by the API and the
  -- CLI): what is stored is its first 8 KiB, marked as cut.
  it("stores at most 8 KiB of a failure's error, marked as cut", function()
    local dir = host.scriptdir {
      ["config.lua"] = "return { poll_interval = 0.1 }",
      ["workers/Big.lua"] = [[return { shards_count = 1, max_retry_count = 0, perform = function(batch)
          error("big: " .. ("é"):rep(10 * 1024 * 1024), 0)
        end }]],
    }
    enqueue(dir, "Big", { '{"id":"x"}' })
    local p = host.spawn("run " .. q(dir), env())
    local dead = host.eventually(function() return host.jobs(dir, "Big", "morgue", env()).x end, 15, "the job failed")
    p:signal("TERM")
    assert.are.equal(0, p:wait(5))
    assert.is_true(#dead.error <= 8192, "stored " .. #dead.error .. " bytes")
    assert.truthy(dead.error:find("^big: é"), dead.error:sub(1, 40))
    local body = dead.error:match("^big: (.*)%.%.%. %[cut: 20971525 bytes in all%]$")
    assert.truthy(body, dead.error:sub(-60))
    assert.are.equal(("é"):rep(#body / 2), body) -- whole UTF-8 characters
  end)
end)
