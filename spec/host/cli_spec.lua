-- The command line: exit codes, one-line errors, plan, enqueue validation.
local core = require "luakiq.core"
local host = require "helpers.host"
local json = require "luakiq.json"
local q = host.quote

local srv, env = host.fixture()

local WORKER = "return { perform = function(batch) end }"

local one_line = host.one_line

describe("luakiq plan", function()
  it("prints Lowkiq's README distribution for A,B,C,D with 3,4,1,2 shards on 3 threads", function()
    local dir = host.scriptdir {
      ["config.lua"] = "return { threads_per_node = 3 }",
      ["workers/A.lua"] = "return { shards_count = 3, perform = function() end }",
      ["workers/B.lua"] = "return { shards_count = 4, perform = function() end }",
      ["workers/C.lua"] = "return { shards_count = 1, perform = function() end }",
      ["workers/D.lua"] = "return { shards_count = 2, perform = function() end }",
    }
    local rc, out, err = host.exec("plan " .. q(dir))
    assert.are.equal(0, rc, err)
    assert.are.equal("t0: A0, B0, B3, D1\nt1: A1, B1, C0\nt2: A2, B2, D0\n", out)
  end)

  it("uses by_node from config", function()
    local dir = host.scriptdir {
      ["config.lua"] = [[local luakiq = require "luakiq"
        return { threads_per_node = 5, splitter = luakiq.splitters.by_node(3, 1) }]],
      ["workers/A.lua"] = "return { shards_count = 13, perform = function() end }",
    }
    local rc, out, err = host.exec("plan " .. q(dir))
    assert.are.equal(0, rc, err)
    assert.are.equal("t0: A1\nt1: A4\nt2: A7\nt3: A10\n", out)
  end)
end)

describe("bad script directories stop start-up with one line and exit 2", function()
  local cases = {
    { "syntax error", { ["workers/A.lua"] = "return {" }, "workers/A.lua:1" },
    { "shards_count <= 0", { ["workers/A.lua"] = "return { shards_count = 0, perform = function() end }" }, "shards_count" },
    { "worker without perform", { ["workers/A.lua"] = "return { shards_count = 2 }" }, "perform" },
    { "unknown worker in workers", { ["config.lua"] = "return { workers = { 'Nope' } }", ["workers/A.lua"] = WORKER }, "Nope" },
    { "wrong type", { ["config.lua"] = "return { threads_per_node = 'many' }", ["workers/A.lua"] = WORKER }, "threads_per_node" },
    { "unknown key", { ["config.lua"] = "return { thread_per_node = 3 }", ["workers/A.lua"] = WORKER }, "thread_per_node" },
    { "no workers", { ["config.lua"] = "return {}" }, "workers" },
    { "misspelt splitter", { ["config.lua"] = "return { splitter = 'elastik' }", ["workers/A.lua"] = WORKER },
      'splitter must be "elastic" or a function' },
    -- a ':' in a queue's name: "q:1"'s keys ("NS:{q:1}:...") are shard 1 of queue q's
    { "a queue_name with ':'", { ["workers/A.lua"] = "return { queue_name = 'q:1', perform = function() end }" },
      "queue_name must be a non-empty string without spaces, control characters, '{', '}' or ':' (a queue's Redis keys " ..
      "would collide with another queue's shards), got \"q:1\"" },
    { "a worker name with ':' (its queue's name)", { ["workers/A.lua"] = "return { name = 'q:1', perform = function() end }" },
      "'q:1'" },
    -- bounds: absurd values would take gigabytes (one table per thread, per shard)
    { "shards_count above 16384", { ["workers/A.lua"] = "return { shards_count = 1e6, perform = function() end }" },
      "shards_count must be an integer from 1 to 16384" },
    { "threads_per_node above 1024", { ["config.lua"] = "return { threads_per_node = 1e7 }", ["workers/A.lua"] = WORKER },
      "threads_per_node must be an integer from 1 to 1024" },
    -- finished jobs and stale payloads (docs/configuration.md)
    { "keep_done below 0", { ["workers/A.lua"] = "return { keep_done = -1, perform = function() end }" },
      "keep_done must be a number >= 0" },
    { "keep_done_max 0", { ["workers/A.lua"] = "return { keep_done = 60, keep_done_max = 0, perform = function() end }" },
      "keep_done_max must be a positive integer" },
    { "monotonic not a boolean", { ["workers/A.lua"] = "return { monotonic = 'yes', perform = function() end }" },
      "monotonic must be true or false" },
    { "monotonic_ttl 0", { ["workers/A.lua"] = "return { monotonic = true, monotonic_ttl = 0, perform = function() end }" },
      "monotonic_ttl must be a number > 0" },
  }
  for _, c in ipairs(cases) do
    it(c[1], function()
      local dir = host.scriptdir(c[2])
      for _, cmd in ipairs { "plan", "run" } do -- (plan first: a run that is not refused would not end)
        local rc, out, err = host.exec(cmd .. " " .. q(dir), nil, env())
        assert.are.equal(2, rc, err)
        assert.truthy(err:find(c[3], 1, true), err)
        assert.is_true(one_line(err), err)
      end
    end)
  end

  it("refuses --threads above 1024 (run, plan) and a reshard to more than 16384 shards", function()
    local dir = host.scriptdir { ["workers/A.lua"] = WORKER }
    for _, cmd in ipairs { "plan", "run" } do
      local rc, _, err = host.exec(cmd .. " " .. q(dir) .. " --threads 1e7", nil, env())
      assert.are.equal(2, rc, err)
      assert.truthy(err:find("--threads must be an integer from 1 to 1024", 1, true), err)
      assert.is_true(one_line(err), err)
    end
    assert.are.equal(0, (host.exec("enqueue " .. q(dir) .. " A", '{"id":1}', env())))
    local rc, _, err = host.exec("reshard " .. q(dir) .. " A 20000", nil, env())
    assert.are.equal(2, rc, err)
    assert.truthy(err:find("from 1 to 16384", 1, true), err)
  end)

  it("refuses a worker whose shards_count differs from the registered one", function()
    local dir = host.scriptdir { ["workers/A.lua"] = "return { shards_count = 3, perform = function() end }" }
    assert.are.equal(0, (host.exec("enqueue " .. q(dir) .. " A", '{"id":1}', env())))
    local p = host.spawn("run " .. q(dir), env())
    host.eventually(function() return p:log():match("thread started") end, 10, "start")
    p:signal("TERM")
    assert.are.equal(0, p:wait(5))
    host.write(dir .. "/workers/A.lua", "return { shards_count = 4, perform = function() end }")
    local rc, _, err = host.exec("run " .. q(dir), nil, env())
    assert.are.equal(2, rc)
    assert.truthy(err:find("shards_count is 4", 1, true), err)
    assert.truthy(err:find("docs/configuration.md", 1, true), err)
    rc, _, err = host.exec("enqueue " .. q(dir) .. " A", '{"id":2}', env())
    assert.are.equal(2, rc)
    assert.truthy(err:find("nothing enqueued", 1, true), err)
  end)
end)

describe("luakiq enqueue", function()
  local dir
  before_each(function() dir = host.scriptdir { ["workers/A.lua"] = WORKER } end)

  local function length()
    local rc, out = host.exec("stats " .. q(dir), nil, env())
    assert.are.equal(0, rc)
    return json.decode(out).by_worker.A.length
  end

  it("refuses a NUL byte in its input: exit 2, one line naming the line, nothing written", function()
    local before = length()
    for _, input in ipairs { '{"id":1}\n\0{"id":2}\n', '{"id":1}\n{"id":"a\0b"}\n', '[{"id":1},\0{"id":2}]' } do
      local rc, out, err = host.exec("enqueue " .. q(dir) .. " A", input, env())
      assert.are.equal(2, rc, out)
      assert.is_true(one_line(err), err)
      assert.truthy(err:find("NUL byte", 1, true), err)
    end
    local _, _, err = host.exec("enqueue " .. q(dir) .. " A", '{"id":1}\n\0{"id":2}\n', env())
    assert.truthy(err:find("line 2: ", 1, true), err)
    assert.are.equal(before, length())
  end)

  it("warns (one line on stderr, as the host does) when Redis may evict keys, and enqueues", function()
    srv.conn:call("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
    local rc, out, err = host.exec("enqueue " .. q(dir) .. " A", '{"id":"lru"}\n', env())
    srv.conn:call("CONFIG", "SET", "maxmemory-policy", "noeviction")
    assert.are.equal(0, rc, err)
    assert.are.equal("enqueued 1 job\n", out)
    assert.is_true(one_line(err) and err ~= "", err)
    assert.truthy(err:find("maxmemory-policy is allkeys-lru", 1, true), err)
    rc, out, err = host.exec("enqueue " .. q(dir) .. " A", '{"id":"quiet"}\n', env())
    assert.are.equal(0, rc, err)
    assert.are.equal("", err)
  end)

  it("takes JSON lines and a JSON array, and prints how many", function()
    local rc, out, err = host.exec("enqueue " .. q(dir) .. " A", '{"id":1}\n\n{"id":"two","payload":{"b":1,"a":2}}\n', env())
    assert.are.equal(0, rc, err)
    assert.are.equal("enqueued 2 jobs\n", out)
    rc, out = host.exec("enqueue " .. q(dir) .. " A", '[{"id":3},{"id":4,"perform_in":1}]', env())
    assert.are.equal(0, rc)
    assert.are.equal("enqueued 2 jobs\n", out)
    assert.are.equal(4, length())
  end)

  local bad = {
    { "malformed JSON", '{"id":1}\n{"id":' },
    { "missing id", '{"payload":1}' },
    { "empty id", '{"id":""}' },
    { "id of the wrong type", '{"id":[1]}' },
    { "fractional id", '{"id":1.5}' },
    { "unknown field", '{"id":1,"perfom_in":3}' },
    { "score not a number", '{"id":1,"score":"soon"}' },
  }
  for _, c in ipairs(bad) do
    it("rejects " .. c[1] .. " with exit 2 and enqueues nothing", function()
      local rc, _, err = host.exec("enqueue " .. q(dir) .. " A", '{"id":"ok"}\n' .. c[2], env())
      assert.are.equal(2, rc, err)
      assert.is_true(one_line(err), err)
      assert.are.equal(0, length())
    end)
  end

  it("names the line of a bad job, blank lines counted", function()
    local rc, _, err = host.exec("enqueue " .. q(dir) .. " A", '{"id":1}\n\n{"id":2,"score":"soon"}\n', env())
    assert.are.equal(2, rc)
    assert.truthy(err:find("line 3 (id 2): score must be a finite number", 1, true), err)
    -- (an integer id as the digits it is stored under, however large)
    rc, _, err = host.exec("enqueue " .. q(dir) .. " A", '{"id":1e20,"retry_count":-2}\n', env())
    assert.are.equal(2, rc)
    assert.truthy(err:find("line 1 (id 100000000000000000000): retry_count must be an integer >= -1", 1, true), err)
  end)

  -- Peak RSS (MB) of `luakiq enqueue DIR A FILE` and its stdout, stderr
  -- (python3's getrusage of its child; ASan keeps freed memory in
  -- quarantine, so the child gets a small one).
  local function enqueue_rss(file)
    local py = [[
import os, resource, subprocess, sys
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0)
sys.stdout.write(r.stdout); sys.stderr.write(r.stderr)]]
    local asan = os.getenv("ASAN_OPTIONS")
    local e = env() .. (asan and (" ASAN_OPTIONS=" .. asan .. ":quarantine_size_mb=1") or "")
    local rc, out, err = host.sh_out(("env %s python3 -c %s %s enqueue %s A %s"):format(e, q(py), host.bin, q(dir), q(file)))
    assert.are.equal(0, rc, err)
    local code, mb, rest = out:match("^(%d+) ([%d.]+)\n(.*)$")
    return tonumber(code), tonumber(mb), rest, err
  end

  it("streams JSON lines: memory stays flat from 10,000 to 200,000 jobs (40 MB), all enqueued", function()
    local d = host.tmpdir()
    local note = string.rep("x", 150)
    for _, n in ipairs { 10000, 200000 } do
      local f = assert(io.open(d .. "/" .. n .. ".jsonl", "wb"))
      for i = 1, n do f:write('{"id":"', n, "-", i, '","payload":{"order":', i, ',"note":"', note, '"}}\n') end
      f:close()
    end
    local code1, small, out1 = enqueue_rss(d .. "/10000.jsonl")
    local code2, big, out2, err2 = enqueue_rss(d .. "/200000.jsonl")
    host.sh("rm -rf " .. q(d))
    assert.are.equal(0, code1)
    assert.are.equal(0, code2)
    assert.are.equal("enqueued 10000 jobs\n", out1)
    assert.are.equal("enqueued 200000 jobs\n", out2)
    assert.are.equal("", err2) -- no progress line when stderr is not a terminal
    assert.are.equal(210000, length())
    -- 20x the input, the same memory (within 8 MB: one chunk and the GC's slack)
    assert.is_true(big - small < 8, ("peak RSS %.1f MB for 10,000 jobs, %.1f MB for 200,000"):format(small, big))
  end)

  it("shows a progress line on a terminal (util-linux script gives it one)", function()
    local d = host.tmpdir()
    local lines = {}
    for i = 1, 3000 do lines[i] = '{"id":"t' .. i .. '"}' end
    host.write(d .. "/in", table.concat(lines, "\n") .. "\n")
    local rc, out, err = host.sh_out(("env %s script -qec %s /dev/null"):format(env(),
      q(host.bin .. " enqueue " .. q(dir) .. " A " .. q(d .. "/in"))))
    host.sh("rm -rf " .. q(d))
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("\renqueued 3,000 / 3,000 jobs, [%d,]+ jobs/s"), out)
    assert.truthy(out:find("enqueued 3000 jobs", 1, true), out)
  end)

  it("reads a pipe through a spool file: a bad last line enqueues nothing; a good pipe enqueues all", function()
    local d = host.tmpdir()
    local lines = {}
    for i = 1, 5000 do lines[i] = '{"id":' .. i .. '}' end
    host.write(d .. "/good", table.concat(lines, "\n") .. "\n")
    lines[#lines + 1] = '{"id":"last","retry_count":-2}'
    host.write(d .. "/bad", table.concat(lines, "\n") .. "\n")
    local rc, _, err = host.sh_out(("cat %s | env %s %s enqueue %s A"):format(q(d .. "/bad"), env(), host.bin, q(dir)))
    assert.are.equal(2, rc, err)
    assert.truthy(err:find("line 5001 (id last): retry_count must be an integer >= -1", 1, true), err)
    assert.are.equal(0, length())
    local rc2, out2, err2 = host.sh_out(("cat %s | env %s %s enqueue %s A"):format(q(d .. "/good"), env(), host.bin, q(dir)))
    host.sh("rm -rf " .. q(d))
    assert.are.equal(0, rc2, err2)
    assert.are.equal("enqueued 5000 jobs\n", out2)
    assert.are.equal(5000, length())
  end)

  it("through client middlewares, stops at the chunk a middleware refuses and says how far it got", function()
    -- (the check of the first pass runs no middleware: the second pass
    -- meets it, chunk by chunk of 2,000 jobs)
    local d = host.scriptdir {
      ["config.lua"] = [[return { client_middlewares = { function(worker, jobs, nxt)
          for _, j in ipairs(jobs) do
            if j.id == "t2500" then error("t2500 refused", 0) end
            if j.id == "t4600" then j.score = "soon" end
          end
          nxt()
        end } }]],
      ["workers/A.lua"] = WORKER,
    }
    local lines = {}
    for i = 1, 5000 do lines[i] = '{"id":"t' .. i .. '"}' end
    local function run(from)
      local rc, _, err = host.exec("enqueue " .. q(d) .. " A", table.concat(lines, "\n", from) .. "\n", env())
      assert.is_true(one_line(err), err)
      return rc, err
    end
    local rc, err = run(1)
    assert.are.equal(1, rc, err)
    assert.truthy(err:find("lines 2001-4000: t2500 refused; 2000 jobs enqueued before them (lines 1-2000)\n", 1, true), err)
    -- a job the middleware made invalid: exit 2, the job named in its chunk
    rc, err = run(2501)
    assert.are.equal(2, rc, err)
    assert.truthy(err:find("lines 2001-2500: job 100 (id t4600): score must be a finite number; " ..
      "2000 jobs enqueued before them (lines 1-2000)", 1, true), err)
    assert.are.equal(4000, json.decode(select(2, host.exec("stats " .. q(d), nil, env()))).by_worker.A.length)
  end)

  it("rejects an unknown worker with exit 2", function()
    local rc, _, err = host.exec("enqueue " .. q(dir) .. " Nope", '{"id":1}', env())
    assert.are.equal(2, rc)
    assert.truthy(err:find("Nope", 1, true))
  end)

  it("fails with exit 1 and one line when Redis is down", function()
    local rc, _, err = host.exec("enqueue " .. q(dir) .. " A", '{"id":1}', "REDIS_URL=redis://127.0.0.1:1/0")
    assert.are.equal(1, rc)
    assert.is_true(one_line(err), err)
    assert.truthy(err:find("Redis", 1, true), err)
  end)
end)

describe("luakiq stats", function()
  it("lists every worker of DIR, even empty ones, in Lowkiq's shape", function()
    local dir = host.scriptdir { ["workers/A.lua"] = WORKER, ["workers/B.lua"] = WORKER }
    host.exec("enqueue " .. q(dir) .. " A", '{"id":1,"perform_in":1}', env())
    local rc, out = host.exec("stats " .. q(dir), nil, env())
    assert.are.equal(0, rc)
    local s = json.decode(out)
    assert.are.equal(1, s.total.length)
    assert.are.equal(0, s.total.morgue_length)
    assert.is_true(s.total.lag > 1e9)
    assert.are.same({ length = 0, morgue_length = 0, lag = 0, expired = 0, waiting = 0 }, s.by_worker.B)
    assert.are.equal(1, s.by_worker.A.length)
  end)
  it("counts a perform_in before 1970 as 1970: lag is at most the Unix time, never 1e+308", function()
    local dir = host.scriptdir { ["workers/A.lua"] = WORKER }
    local rc, _, err = host.exec("enqueue " .. q(dir) .. " A", '{"id":1,"perform_in":-1e308}', env())
    assert.are.equal(0, rc, err)
    local s = host.stats(dir, env())
    assert.is_true(s.total.lag > 1e9 and s.total.lag <= core.now() + 1, tostring(s.total.lag))
    assert.are.equal(s.total.lag, s.by_worker.A.lag)
  end)
end)

describe("luakiq reply and luakiq waiting", function()
  -- The waits are made through the Redis scripts (helpers.waits), as the
  -- host's await makes them; R has 3 shards, no host runs.
  local dir, cfg, W
  before_each(function()
    dir = host.scriptdir { ["workers/R.lua"] = "return { shards_count = 3, perform = function() end }",
                           ["workers/S.lua"] = WORKER }
    srv.conn:call("FLUSHALL")
    cfg = require("luakiq.lib.runtime").load(dir)
    assert(require("luakiq.lib.runtime").register(srv.conn, cfg))
    W = require("helpers.waits").new(srv.conn, cfg, "R")
  end)
  after_each(function() host.sh("rm -rf " .. q(dir)) end)
  local function reply(args, stdin) return host.exec("reply " .. q(dir) .. " " .. args, stdin, env()) end

  it("replies by token (JSON argument or stdin): exit 0 accepted or duplicate, 1 and one line otherwise", function()
    local a = W:wait("a", { rule = "status" })
    local rc, out, err = reply("R " .. q(a.token) .. " " .. q('{"status":"succeeded"}'))
    assert.are.same({ 0, '{"accepted":true}\n' }, { rc, out }, err)
    -- the same reply from stdin (white space around it dropped): a duplicate
    rc, out = reply("R " .. q(a.token), '  {"status":"succeeded"}\n')
    assert.are.same({ 0, '{"accepted":true,"duplicate":true}\n' }, { rc, out })
    for _, c in ipairs {
      { "R " .. q(a.token) .. " " .. q('{"status":"failed"}'), "CONFLICT" },
      { "R " .. q(a.token:sub(1, -2) .. (a.token:sub(-1) == "0" and "1" or "0")) .. " {}", "UNKNOWN" },
      { "R junk {}", "UNKNOWN" },
      { "S " .. q(a.token) .. " {}", "UNKNOWN" }, -- another worker's token
    } do
      rc, out, err = reply(c[1])
      assert.are.equal(1, rc, c[1])
      assert.are.equal("", out)
      assert.truthy(err:find("luakiq: " .. c[2] .. ": ", 1, true), err)
      assert.is_true(one_line(err), err)
    end
    local b = W:wait("b", { rule = "status" })
    rc, _, err = reply("R " .. q(b.token) .. " " .. q('{"x":1}'))
    assert.are.equal(1, rc)
    assert.truthy(err:find("BADREPLY", 1, true), err)
    -- the wait is over: stale
    assert.are.equal("reply", W:handle("a").kind)
    rc, _, err = reply("R " .. q(a.token) .. " " .. q('{"status":"succeeded"}'))
    assert.are.equal(1, rc)
    assert.truthy(err:find("luakiq: STALE: ", 1, true), err)
    -- bad usage and bad JSON: exit 2, nothing sent
    for _, args in ipairs { "R", "R " .. q(b.token) .. " '{nope'", "R " .. q(b.token) .. " {} extra", "Nope x {}" } do
      rc, _, err = reply(args, "")
      assert.are.equal(2, rc, args .. ": " .. err)
      assert.is_true(one_line(err), err)
    end
    rc = reply("R " .. q(b.token), "")
    assert.are.equal(2, rc)
  end)

  it("replies by key (--key K)", function()
    W:wait("k", { key = "order-9" })
    local rc, out, err = reply("R --key order-9 " .. q('{"n":1}'))
    assert.are.same({ 0, '{"accepted":true}\n' }, { rc, out }, err)
    rc, _, err = reply("R --key other " .. q('{"n":1}'))
    assert.are.equal(1, rc)
    assert.truthy(err:find("luakiq: UNKNOWN: ", 1, true), err)
    assert.are.equal('{"n":1}', W:handle("k").value)
  end)

  it("deletes and kills waiting jobs (admin delete|kill ID...): the waits end, their tokens answer stale", function()
    local a, b = W:wait("a"), W:wait("b")
    local rc, out, err = host.exec("admin " .. q(dir) .. " R delete a", nil, env())
    assert.are.same({ 0, { deleted = 1 } }, { rc, json.decode(out) }, err)
    rc, out, err = host.exec("admin " .. q(dir) .. " R kill b", nil, env())
    assert.are.same({ 0, { killed = 1 } }, { rc, json.decode(out) }, err)
    for _, w in ipairs { a, b } do
      rc, out, err = reply("R " .. q(w.token) .. " {}")
      assert.are.equal(1, rc)
      assert.truthy(err:find("STALE", 1, true), err)
    end
    rc, out = host.exec("waiting " .. q(dir) .. " R", nil, env())
    assert.are.same({ 0, "" }, { rc, out })
    rc, out = host.exec("morgue " .. q(dir) .. " R list", nil, env())
    assert.truthy(out:find('"id":"b"', 1, true) and out:find("killed while waiting for a reply", 1, true), out)
    assert.is_nil(out:find('"id":"a"', 1, true), out)
  end)

  it("lists the waiting jobs of every shard as JSON lines, and the late replies (--late)", function()
    -- ids w1, w2, ... until every shard has two
    local ids, per, made = {}, { [0] = 0, 0, 0 }, {}
    for i = 1, 100 do
      local id, s = "w" .. i, require("luakiq.lib.keys").shard("w" .. i, 3)
      if per[s] < 2 then ids[#ids + 1], per[s] = id, per[s] + 1 end
    end
    assert.are.equal(6, #ids)
    for i, id in ipairs(ids) do made[id] = W:wait(id, { key = i == 1 and "key-1" or nil, heartbeat = i == 2 and 30 or nil }) end
    local rc, out, err = host.exec("waiting " .. q(dir) .. " R", nil, env())
    assert.are.equal(0, rc, err)
    local got = {}
    for line in out:gmatch("[^\n]+") do
      local j = json.decode(line)
      got[j.id] = j
    end
    for _, id in ipairs(ids) do
      local j = assert(got[id], id)
      assert.are.same({ made[id].attempt, "waiting", require("luakiq.lib.keys").shard(id, 3) }, { j.attempt, j.state, j.shard })
      assert.is_true(j.deadline > j.since + 59, id)
    end
    local first, second, third = got[ids[1]], got[ids[2]], made[ids[3]]
    assert.are.equal("key-1", first.key)
    assert.is_nil(got[ids[3]].key)
    assert.is_true(second.heartbeat_deadline > second.since + 29)
    assert.is_nil(first.heartbeat_deadline)
    -- a late reply
    assert.are.equal(0, (reply("R " .. q(third.token) .. " {}")))
    W:handle(ids[3])
    assert.are.equal(1, (reply("R " .. q(third.token) .. " " .. q('{"late":1}'))))
    rc, out = host.exec("waiting " .. q(dir) .. " R --late", nil, env())
    assert.are.equal(0, rc)
    local late = json.decode(out)
    assert.are.same({ ids[3], third.attempt, "reply", '{"late":1}' }, { late.id, late.attempt, late.op, late.body })
    rc, out = host.exec("waiting " .. q(dir) .. " S", nil, env())
    assert.are.same({ 0, "" }, { rc, out })
    assert.are.equal(2, (host.exec("waiting " .. q(dir) .. " Nope", nil, env())))
  end)
end)

describe("a worker file that reads a secret from the environment when it loads", function()
  -- Hook's file concatenates LUAKIQ_SPEC_HOOK_URL, as a webhook worker's file
  -- might; the hosts have it, an operator at a terminal may not.
  local FILES = {
    ["workers/A.lua"] = WORKER,
    ["workers/Hook.lua"] = [[return require("luakiq.workers.webhook") {
      url = os.getenv("LUAKIQ_SPEC_HOOK_URL") .. "/hooks", shards_count = 3, max_retry_count = 0 }]],
  }
  local function secret() return env() .. " LUAKIQ_SPEC_HOOK_URL=http://127.0.0.1:1" end -- nothing listens

  it("does not stop stats, morgue, failures and the other readers; run, enqueue and plan name the worker", function()
    local dir = host.scriptdir(FILES)
    local later = math.floor(require("luakiq.core").now()) + 86400 * 365
    assert.are.equal(0, (host.exec("enqueue " .. q(dir) .. " Hook", '{"id":"dies"}\n{"id":"later","perform_in":' ..
      later .. "}", secret())))
    -- a host with the secret registers Hook's 3 shards and kills "dies" (connection refused, no retry)
    local p = host.spawn("run " .. q(dir), secret())
    host.eventually(function() return host.stats(dir, secret()).by_worker.Hook.morgue_length == 1 end, 20, "a dead job")
    p:signal("TERM")
    assert.are.equal(0, p:wait(10))

    local rc, out, err = host.exec("stats " .. q(dir), nil, env())
    assert.are.equal(0, rc, err)
    local s = json.decode(out).by_worker.Hook
    assert.are.equal(1, s.length)
    assert.are.equal(1, s.morgue_length)
    assert.is_true(one_line(err), err)
    assert.truthy(err:find("worker Hook stands in as queue 'Hook' with 3 shards (Redis's queue registry): " ..
      dir .. "/workers/Hook.lua:2:", 1, true), err)
    assert.truthy(err:find("inside perform", 1, true), err)
    rc, out, err = host.exec("morgue " .. q(dir) .. " Hook list", nil, env())
    assert.are.equal(0, rc, err)
    assert.are.equal("dies", json.decode(out).id)
    rc, out, err = host.exec("failures " .. q(dir), nil, env())
    assert.are.equal(0, rc, err)
    assert.are.same({ "dies" }, json.decode(out).workers.Hook.ids)
    rc, out, err = host.exec("jobs " .. q(dir) .. " Hook queue", nil, env())
    assert.are.equal(0, rc, err)
    assert.are.equal("later", json.decode(out).id)
    rc, out, err = host.exec("job " .. q(dir) .. " Hook later", nil, env())
    assert.are.equal(0, rc, err)
    assert.are.equal("queued", json.decode(out).state)
    for _, cmd in ipairs { "timing " .. q(dir) .. " Hook", "hosts " .. q(dir), "pause " .. q(dir) .. " Hook",
                           "resume " .. q(dir) .. " Hook", "admin " .. q(dir) .. " Hook perform-now" } do
      rc, _, err = host.exec(cmd, nil, env())
      assert.are.equal(0, rc, cmd .. ": " .. err)
    end

    -- what runs or checks the worker's code needs it: one line naming the worker and its file
    for _, cmd in ipairs { "run " .. q(dir), "enqueue " .. q(dir) .. " Hook", "plan " .. q(dir) } do
      rc, _, err = host.exec(cmd, '{"id":"x"}', env())
      assert.are.equal(2, rc, cmd .. ": " .. err)
      assert.is_true(one_line(err), err)
      assert.truthy(err:find("luakiq: " .. dir .. "/workers/Hook.lua:2: attempt to concatenate", 1, true), err)
      assert.truthy(err:find("; worker Hook did not load: if it reads the environment (os.getenv), set the " ..
        "variable, or read it inside perform rather than when the file loads (docs/workers.md", 1, true), err)
    end
    assert.are.equal(1, host.stats(dir, env()).by_worker.Hook.length) -- nothing enqueued
  end)

  it("stands in with the default shards_count, and says so, where Redis's queue registry does not know it", function()
    local dir = host.scriptdir(FILES)
    local rc, out, err = host.exec("stats " .. q(dir), nil, env())
    assert.are.equal(0, rc, err)
    assert.are.equal(0, json.decode(out).by_worker.Hook.length)
    assert.truthy(err:find("worker Hook stands in as queue 'Hook' with 5 shards (the default: Redis's queue " ..
      "registry does not know the queue)", 1, true), err)
  end)

  it("a file that does not compile is refused by every command, not stood in", function()
    local dir = host.scriptdir { ["workers/A.lua"] = WORKER, ["workers/Hook.lua"] = "return {" }
    local rc, _, err = host.exec("stats " .. q(dir), nil, env())
    assert.are.equal(2, rc, err)
    assert.truthy(err:find("workers/Hook.lua:1", 1, true), err)
  end)
end)

describe("LUAKIQ_SCRIPTS (development mode)", function()
  it("loads every Redis script from the tree exactly as the build embedded it, includes expanded", function()
    local dir = host.tmpdir()
    host.write(dir .. "/dump.lua", [[
      local core = require "luakiq.core"
      local names = core.script_names()
      table.sort(names)
      for _, n in ipairs(names) do io.write("== ", n, "\n", core.script_source(n), "\n") end]])
    local rc1, embedded, err1 = host.exec("lua " .. q(dir .. "/dump.lua"), nil, "LUAKIQ_SCRIPTS=")
    assert.are.equal(0, rc1, err1)
    local tree = io.popen("pwd"):read("*l") .. "/scripts"
    local rc2, loaded, err2 = host.exec("lua " .. q(dir .. "/dump.lua"), nil, "LUAKIQ_SCRIPTS=" .. q(tree))
    assert.are.equal(0, rc2, err2)
    assert.truthy(embedded:find("== fetch\n", 1, true))
    assert.is_nil(embedded:find("\n%-%- luakiq:include ")) -- every include line expanded
    assert.are.equal(embedded, loaded)
  end)

  it("reads the tree at start: an edited library shows in every script that includes it, and runs", function()
    local dir = host.tmpdir()
    local tree = dir .. "/scripts"
    assert(host.sh("cp -r scripts " .. q(tree)))
    local args = tree .. "/redis/lib/args.lua"
    host.write(args, "-- EDITED IN THE TREE\n" .. host.read(args))
    host.write(dir .. "/run.lua", [[
      local core = require "luakiq.core"
      local queue = require "luakiq.runner.queue"
      local conn = core.connect(arg[1])
      io.write(core.script_source("fetch"), "\n==\n", core.script_source("push"), "\n==\n")
      local P = "dev:{Q:0}:"
      local r = conn:pipeline({ queue.fetch_cmd(P, "tok", 1000, 1, nil, false, 1) })[1]
      io.write(#queue.parse_fetch(r, { prefix = P }).jobs, " jobs\n") -- (raises on an error reply)
      io.write(tostring(core.script_source("nope")), "\n")]])
    local rc, out, err = host.exec("lua " .. q(dir .. "/run.lua") .. " " .. q(srv.url), nil, "LUAKIQ_SCRIPTS=" .. q(tree))
    host.sh("rm -rf " .. q(dir))
    assert.are.equal(0, rc, err)
    local fetch, push, rest = out:match("^(.-)\n==\n(.-)\n==\n(.*)$")
    assert.truthy(fetch:find("-- EDITED IN THE TREE", 1, true), fetch)
    assert.falsy(push:find("-- EDITED IN THE TREE", 1, true))
    assert.are.equal("0 jobs\nnil\n", rest) -- EVALSHA ran the tree's text; unknown names stay unknown
  end)

  it("loads an .html module (the dashboard) as the file's bytes, as the build embedded it, edits included", function()
    local dir = host.tmpdir()
    local tree = dir .. "/scripts"
    assert(host.sh("cp -r scripts " .. q(tree)))
    host.write(dir .. "/page.lua", [[io.write(require "luakiq.web.dashboard")]])
    local rc1, embedded, err1 = host.exec("lua " .. q(dir .. "/page.lua"), nil, "LUAKIQ_SCRIPTS=")
    local rc2, loaded, err2 = host.exec("lua " .. q(dir .. "/page.lua"), nil, "LUAKIQ_SCRIPTS=" .. q(tree))
    local page = tree .. "/luakiq/web/dashboard.html"
    host.write(page, host.read(page) .. "<!-- EDITED IN THE TREE -->\n")
    local rc3, edited, err3 = host.exec("lua " .. q(dir .. "/page.lua"), nil, "LUAKIQ_SCRIPTS=" .. q(tree))
    host.sh("rm -rf " .. q(dir))
    assert.are.equal(0, rc1, err1)
    assert.are.equal(0, rc2, err2)
    assert.are.equal(0, rc3, err3)
    assert.are.equal(host.read("scripts/luakiq/web/dashboard.html"), embedded)
    assert.truthy(embedded:find("^<!doctype html>"))
    assert.are.equal(embedded, loaded)
    assert.are.equal(embedded .. "<!-- EDITED IN THE TREE -->\n", edited)
  end)
end)
