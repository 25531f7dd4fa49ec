-- Bad input wherever it enters: the CLI enqueue, perform_async inside a
-- worker, and values in Redis written by someone else (a payload that
-- load_payload cannot read, junk in a busy entry).
local redis = require "helpers.redis"
local host = require "helpers.host"
local json = require "luakiq.json"
local keys = require "luakiq.lib.keys"
local queue = require "luakiq.runner.queue"
local S = require "faults.support"
local q = host.quote

local srv, env = host.fixture()
after_each(host.cleanup)

local one_line = host.one_line
local function spawn(dir) return S.spawn(srv, dir) end
local function length(dir, worker)
  local rc, out, err = host.exec("stats " .. q(dir), nil, env())
  assert.are.equal(0, rc, err)
  return json.decode(out).by_worker[worker].length
end

describe("luakiq enqueue rejects, with exit 2, one line and nothing enqueued", function()
  local dir
  before_each(function()
    dir = host.scriptdir {
      ["config.lua"] = "return { max_payload_bytes = 100 }",
      ["workers/A.lua"] = "return { perform = function() end }",
    }
  end)
  local bad = {
    { "a payload over max_payload_bytes", ('{"id":1,"payload":"%s"}'):format(("x"):rep(99)), "max_payload_bytes" },
    { "a score that overflows to inf", '{"id":1,"score":1e999}', "score" },
    { "a perform_in of -inf", '{"id":1,"perform_in":-1e999}', "perform_in" },
    { "NaN (not JSON)", '{"id":1,"score":NaN}', "JSON" },
    { "a boolean id", '{"id":true}', "id" },
    { "an object id", '{"id":{"a":1}}', "id" },
    { "a null id", '{"id":null}', "id" },
    { "a line that is not an object", '[1,2]', "" },
    { "a retry_count below -1", '{"id":1,"retry_count":-2}', "retry_count" },
    { "an id that is not UTF-8", '{"id":"ab\xff\xfe"}', "line 2: id must be valid UTF-8 (got ab\\xff\\xfe)" },
    { "an id with a lone surrogate (lua-cjson refuses it)", '{"id":"a\\ud800"}', "invalid unicode escape" },
    { "a payload string that is not UTF-8", '{"id":1,"payload":{"k":"\xc3("}}', "line 2 (id 1): payload: a string is not valid UTF-8" },
    { "a payload key that is not UTF-8", '{"id":1,"payload":{"\xe2\x82":1}}', "payload: a string is not valid UTF-8" },
  }
  for _, c in ipairs(bad) do
    it(c[1], function()
      local rc, _, err = host.exec("enqueue " .. q(dir) .. " A", '{"id":"ok"}\n' .. c[2], env())
      assert.are.equal(2, rc, err)
      assert.is_true(one_line(err), err)
      assert.truthy(err:find(c[3], 1, true), err)
      assert.are.equal(0, length(dir, "A"))
    end)
  end

  it("takes a payload of exactly max_payload_bytes", function()
    local rc, _, err = host.exec("enqueue " .. q(dir) .. " A",
      ('{"id":1,"payload":"%s"}'):format(("x"):rep(98)), env())
    assert.are.equal(0, rc, err)
    assert.are.equal(1, length(dir, "A"))
  end)

  it("applies the 1 MiB default", function()
    local d = host.scriptdir { ["workers/A.lua"] = "return { perform = function() end }" }
    local rc, _, err = host.exec("enqueue " .. q(d) .. " A",
      ('{"id":1,"payload":"%s"}'):format(("x"):rep(1048576)), env())
    assert.are.equal(2, rc)
    assert.truthy(err:find("over max_payload_bytes (1048576)", 1, true), err)
  end)
end)

describe("only what every surface can show", function()
  local function nested(n) return ("["):rep(n) .. ("]"):rep(n) end

  it("takes a payload nested 256 deep and lists it; refuses 257 (one line, exit 2)", function()
    local dir = host.scriptdir { ["workers/A.lua"] = "return { shards_count = 1, perform = function() end }" }
    local rc, _, err = host.exec("enqueue " .. q(dir) .. " A", '{"id":"deep","payload":' .. nested(256) .. '}', env())
    assert.are.equal(0, rc, err)
    local rc2, out = host.exec("jobs " .. q(dir) .. " A queue --order id", nil, env())
    assert.are.equal(0, rc2)
    assert.are.equal("deep", json.decode(out).id)
    local rc3, _, err3 = host.exec("enqueue " .. q(dir) .. " A", '{"id":"deeper","payload":' .. nested(257) .. '}', env())
    assert.are.equal(2, rc3)
    assert.is_true(one_line(err3), err3)
    assert.truthy(err3:find("line 1 (id deeper): payload nests deeper than 256 levels", 1, true), err3)
    assert.are.equal(1, length(dir, "A"))
  end)

  it("shows what another writer left in Redis: bytes that are not UTF-8 escaped, a too deep payload as its text", function()
    local dir = host.scriptdir { ["workers/A.lua"] = "return { shards_count = 1, perform = function() end }" }
    srv.conn:call("FLUSHALL")
    local P = keys.prefix("luakiq", "A", 0)
    -- push.lua as any client may call it (docs/redis.md): id, perform_in, retry_count, score, payload
    srv.conn:script("push", P, "", "0", "bad\xff", "2000000000", "-1", "1", '"p\xfe"',
      "deep", "2000000001", "-1", "1", nested(997))
    local rc, out, err = host.exec("jobs " .. q(dir) .. " A queue --order id", nil, env())
    assert.are.equal(0, rc, err)
    local lines = {}
    for line in out:gmatch("[^\n]+") do lines[#lines + 1] = json.decode(line) end -- JSON, every line
    assert.are.equal("bad\u{ff}", lines[1].id)
    assert.are.equal("p\u{fe}", lines[1].payloads[1][1])
    assert.are.equal(nested(997), lines[2].payloads[1][1])
    local web = require "web.support"
    local proc, base = web.start(dir, env())
    local st, body, v = web.request(base, "GET", "/api/web/workers/A/jobs?what=queue&order=id")
    web.stop(proc)
    assert.are.equal(200, st, body)
    assert.are.equal(2, #v.jobs)
    assert.are.equal(nested(997), v.jobs[2].payloads[1][1])
  end)
end)

describe("perform_async inside a worker", function()
  it("raises a clear error on bad input and enqueues nothing of that call", function()
    local dir = host.scriptdir {
      ["config.lua"] = "return { max_payload_bytes = 100, poll_interval = 0.1 }",
      ["workers/Dst.lua"] = [[local luakiq = require "luakiq"
        return { shards_count = 2, perform = function(batch)
          for id, ps in pairs(batch) do luakiq.redis.call("RPUSH", "t:dst", id .. "=" .. tostring(ps[1])) end
        end }]],
      ["workers/Src.lua"] = [[local luakiq = require "luakiq"
        local cases = {
          { "missing id", { { payload = 1 } } },
          { "empty id", { { id = "" } } },
          { "table id", { { id = {} } } },
          { "fractional id", { { id = 1.5 } } },
          { "NaN score", { { id = "a", score = 0/0 } } },
          { "inf perform_in", { { id = "a", perform_in = math.huge } } },
          { "-inf score", { { id = "a", score = -math.huge } } },
          { "big payload", { { id = "a", payload = string.rep("x", 200) } } },
          { "function payload", { { id = "a", payload = function() end } } },
          { "NaN in payload", { { id = "a", payload = { x = 0/0 } } } },
          { "not an array", { id = "a" } },
          { "good then bad", { { id = "g1" }, { id = "g2", score = 0/0 } } },
          { "unknown worker", { { id = "a" } }, "Nope" },
        }
        return { shards_count = 1, perform = function(batch)
          local r = luakiq.redis
          for _, c in ipairs(cases) do
            local ok, err = pcall(luakiq.perform_async, c[3] or "Dst", c[2])
            r.call("RPUSH", "t:errors", c[1] .. "|" .. tostring(ok) .. "|" .. tostring(err))
          end
          r.call("SET", "t:good", luakiq.perform_async("Dst", { { id = "ok", payload = 7 } }))
        end }]],
    }
    local p = spawn(dir)
    assert.are.equal(0, (host.exec("enqueue " .. q(dir) .. " Src", '{"id":"go"}', env())))
    S.eventually(function() return srv.conn:call("LLEN", "t:dst") == 1 end, 10, "good job performed")
    S.sleep(0.3)
    assert.are.same({ "ok=7" }, srv.conn:call("LRANGE", "t:dst", 0, -1))
    assert.are.equal("1", srv.conn:call("GET", "t:good"))
    local want = {
      ["missing id"] = "id must be a non-empty string or an integer",
      ["empty id"] = "id must not be empty",
      ["table id"] = "id must be a non-empty string or an integer",
      ["fractional id"] = "id must be a non-empty string or an integer",
      ["NaN score"] = "score must be a finite number",
      ["inf perform_in"] = "perform_in must be a finite number",
      ["-inf score"] = "score must be a finite number",
      ["big payload"] = "over max_payload_bytes (100)",
      ["function payload"] = "cannot dump payload",
      ["NaN in payload"] = "cannot dump payload",
      ["not an array"] = "jobs must be an array",
      ["good then bad"] = "job 2",
      ["unknown worker"] = "unknown worker 'Nope'",
    }
    local got = srv.conn:call("LRANGE", "t:errors", 0, -1)
    assert.are.equal(13, #got)
    for _, line in ipairs(got) do
      local name, ok, err = line:match("^([^|]*)|([^|]*)|(.*)$")
      assert.are.equal("false", ok, line)
      assert.truthy(err:find(want[name], 1, true), line)
      assert.is_true(one_line(err), line)
    end
    assert.are.equal(0, S.stop(p), p:log())
  end)
end)

describe("values in Redis that another producer wrote", function()
  it("a payload load_payload cannot read goes to the morgue at once; the rest runs", function()
    local dir = S.dir("poll_interval = 0.1", { shards = 1, batch = 3, max_retry = 5, retry_in = "60" })
    local P = keys.prefix("luakiq", "Rec", 0)
    local now = S.now()
    -- push.lua takes payload bytes as they are (any producer can call it)
    srv.conn:script("push", P, "", now, "m", now, -1, 1, "1", "m", now, -1, 2, "{bad", "m", now, -1, 3, "3",
      "n", now, -1, 4, "not json", "o", now, -1, 5, "5")
    local p = spawn(dir)
    S.eventually(function() return #S.seen(srv.conn, "m") == 2 and #S.seen(srv.conn, "o") == 1 end, 10, "good payloads")
    S.sleep(0.3)
    assert.are.same({ "1", "3" }, S.seen(srv.conn, "m"))
    assert.are.same({}, S.seen(srv.conn, "n"))
    local rc, out, err = host.exec("morgue " .. q(dir) .. " Rec list", nil, env())
    assert.are.equal(0, rc, err)
    local dead = {}
    for line in out:gmatch("[^\n]+") do
      local rec = json.decode(line)
      dead[rec.id] = rec
    end
    assert.are.same({ { "{bad", 2 } }, dead.m.payloads)
    assert.are.same({ { "not json", 4 } }, dead.n.payloads)
    assert.truthy(dead.m.error:match("^load_payload failed: json: "), dead.m.error)
    assert.are.equal(0, length(dir, "Rec")) -- nothing waits for a retry
    assert.are.equal(0, srv.conn:call("EXISTS", P .. "busy"))
    assert.truthy(p:log():match("cannot be loaded went to the morgue"), p:log())
    assert.falsy(p:log():match("batch failed"), p:log())
    assert.are.equal(0, S.stop(p), p:log())
  end)

  -- Busy records (layout 2, docs/redis.md) written as another producer
  -- might: {id, perform_in, retry_count, payload, score}; perform_in and
  -- retry_count are junk where the spec says so; no payload = none.
  local function busy_records(P, ...)
    local args = {}
    for _, e in ipairs { ... } do
      for k = 1, 5 do args[#args + 1] = tostring(e[k] or "") end
    end
    srv.conn:call("EVAL", [[
      for i = 1, #ARGV, 5 do
        local rec
        if ARGV[i + 3] ~= "" then
          rec = cmsgpack.pack(ARGV[i + 1], ARGV[i + 2], false, false, ARGV[i + 3], tonumber(ARGV[i + 4]))
        else
          rec = cmsgpack.pack(ARGV[i + 1], ARGV[i + 2], false, false)
        end
        redis.call("HSET", KEYS[1], ARGV[i], rec)
      end]], 1, P .. "busy", unpack(args))
  end

  it("junk in busy entries of a dead holder is restored as due, new, and runs", function()
    local dir = S.dir("poll_interval = 0.1", { shards = 1, batch = 5 })
    local P = keys.prefix("luakiq", "Rec", 0)
    srv.conn:call("SET", P .. "holder", "dead-host")
    srv.conn:call("SET", P .. "batch", "7")
    busy_records(P, { "j1", "abc", "xyz", "1", 1 }, { "j2", "no newline", "", "2", 2 }, { "j3", "nan", "3", "3", 3 },
      { "j4", "1", "2", "4", 4 }, { "gone", "1", "0" })
    local p = spawn(dir)
    S.eventually(function()
      for _, id in ipairs { "j1", "j2", "j3", "j4" } do if #S.seen(srv.conn, id) ~= 1 then return false end end
      return true
    end, 10, "restored jobs performed")
    assert.truthy(p:log():match("restored 4 in%-flight jobs"), p:log())
    -- the batch's ack rides with the thread's next Redis call, moments later
    S.eventually(function() return srv.conn:call("EXISTS", P .. "busy") == 0 end, 5, "the batch acked")
    assert.are.equal(0, S.stop(p), p:log())
  end)

  it("junk in busy entries of the caller's own batch: redelivered with numbers, failed without error", function()
    local P = keys.prefix("luakiq", "Rec", 0)
    srv.conn:call("SET", P .. "holder", "tok")
    srv.conn:call("SET", P .. "batch", "3")
    busy_records(P, { "j1", "abc", "xyz", "a", 1 }, { "j2", "12", "1", "b", 2 }, { "gone", "5", "0" })
    local r = srv.conn:pipeline({ queue.fetch_cmd(P, "tok", 30000, 10, nil, false, S.now()) })[1]
    local res = queue.parse_fetch(r, { prefix = P, worker = "Rec", shard = 0 })
    assert.are.equal("3", res.batch)
    assert.are.equal(2, #res.jobs) -- "gone" has no payloads: dropped
    local byid = {}
    for _, job in ipairs(res.jobs) do byid[job.id] = job end
    assert.is_number(byid.j1.perform_in)
    assert.are.equal(-1, byid.j1.retry_count)
    assert.are.same({ 12, 1 }, { byid.j2.perform_in, byid.j2.retry_count })
    busy_records(P, { "j3", "x", "y", "c", 3 })
    local f = srv.conn:script("fail", P, "tok", 30000, S.now(), "3", 5, "err", "j1", S.now() + 60)
    assert.are.equal("OK", f[1])
    assert.are.equal("0", srv.conn:call("ZSCORE", P .. "retries", "j1"))
    assert.is_false(srv.conn:call("ZSCORE", P .. "retries", "j3")) -- retry_count -1: not in the index
    assert.truthy(srv.conn:call("ZSCORE", P .. "later", "j3")) -- (layout 2: a job failed back waits in P later)
    assert.are.equal("1", srv.conn:call("ZSCORE", P .. "retries", "j2"))
    assert.are.equal(0, srv.conn:call("EXISTS", P .. "busy"))
  end)
end)
