-- Replies to jobs that wait for one, through HTTP against a real host
-- (DESIGN section 9; docs/operations.md, "Replies"): every answer by token,
-- the heartbeat, by correlation key and rickover's form; the 256 KiB limit
-- before Redis; the --replies listener serving the reply routes and nothing
-- else, and cutting off a slow client; a reshard met on the way
-- (luakiq.lib.replies). The waits are made through the Redis scripts
-- (helpers.waits) on a worker the host does not serve, so only the spec
-- moves them on.
local core = require "luakiq.core"
local json = require "luakiq.json"
local redis = require "helpers.redis"
local host = require "helpers.host"
local waits = require "helpers.waits"
local web = require "web.support"
local keys = require "luakiq.lib.keys"
local runtime = require "luakiq.lib.runtime"
local q = host.quote

local TOKEN = "web-tok-" .. core.token()
local BEARER = { "Authorization: Bearer " .. TOKEN }

-- Parked (3 shards) is never served by this host; Run is, so it starts.
local FILES = {
  ["config.lua"] = [[
local splitters = require "luakiq.splitters"
return {
  threads_per_node = 1, poll_interval = 0.2, web_header_timeout = 1, web_idle_timeout = 1.5,
  splitter = function(handlers, n)
    local keep = {}
    for _, h in ipairs(handlers) do if h.worker ~= "Parked" then keep[#keep + 1] = h end end
    return splitters.default(keep, n)
  end,
}]],
  ["workers/Parked.lua"] = "return { shards_count = 3, perform = function() end }",
  ["workers/Run.lua"] = "return { shards_count = 1, perform = function() end }",
}

local srv, dir, proc, base, rbase, cfg, W

-- POST path on base (default the --web listener) with body (a string or a
-- table, sent as JSON): status, decoded answer, raw body.
local function post(path, body, o)
  o = o or {}
  if type(body) == "table" then body = json.encode(body) end
  local st, text, v = web.request(o.base or base, "POST", path, { body = body, headers = o.headers })
  return st, v, text
end
local function reply(token, body, o) return post("/api/v1/replies/" .. token, body, o) end

setup(function()
  srv = redis.start()
  dir = host.scriptdir(FILES)
  -- the --replies listener on a port of its own (web.start retries the --web one)
  for _ = 1, 5 do
    local port = core.free_port()
    proc, base = web.start(dir, "REDIS_URL=" .. srv.url .. " LUAKIQ_WEB_TOKEN=" .. TOKEN, "--replies 127.0.0.1:" .. port)
    rbase = "http://127.0.0.1:" .. port
    if host.eventually(function() return proc:log():find("replies: listening", 1, true) or not proc:alive() end, 10,
      "the replies listener") and proc:alive() then break end
    proc:wait(5)
  end
  cfg = runtime.load(dir)
end)
teardown(function()
  web.stop(proc, dir)
  if srv then srv:stop() end
end)
before_each(function()
  srv.conn:call("FLUSHALL")
  assert(runtime.register(srv.conn, cfg))
  W = waits.new(srv.conn, cfg, "Parked")
end)

describe("a reply by token (POST /api/v1/replies/TOKEN, no bearer token)", function()
  it("answers accepted, duplicate, 409, 404 and 400; the reply reaches the job's shard", function()
    local w = W:wait("a")
    local st, v = reply(w.token, '{"ok":1}')
    assert.are.equal(200, st)
    assert.are.same({ accepted = true }, v)
    st, v = reply(w.token, '{"ok":1}', { base = rbase })
    assert.are.equal(200, st)
    assert.are.same({ accepted = true, duplicate = true }, v)
    st, v = reply(w.token, '{"ok":2}')
    assert.are.equal(409, st)
    assert.truthy(v.error:find("^conflict"), v.error)
    -- forged (the mac of another token), not a token at all, a bad attempt
    local forged = w.token:sub(1, -2) .. (w.token:sub(-1) == "0" and "1" or "0")
    assert.are.equal(404, (reply(forged, "{}")))
    assert.are.equal(404, (reply("junk", "{}")))
    assert.are.equal(404, (reply(w.token:gsub("%.1%.", ".7.", 1), "{}")))
    local b = W:wait("b")
    st, v = reply(b.token, "{nope")
    assert.are.equal(400, st)
    assert.truthy(v.error:find("^badjson"), v.error)
    -- the reply is the job's: its fetch hands it back as a reply call
    assert.are.same({ kind = "reply", attempt = w.attempt, value = '{"ok":1}' }, W:handle("a"))
  end)

  it("answers 410 stale for a wait that is over (handled, timed out), counted and kept as a late reply", function()
    local w = W:wait("s1")
    assert.are.equal(200, (reply(w.token, '{"n":1}')))
    W:handle("s1")
    local st, v = reply(w.token, '{"n":1}')
    assert.are.equal(410, st)
    assert.are.same({ error = "stale" }, v)
    -- timed out: the fetch after the deadline takes it as a timeout call
    local t = W:wait("s2", { timeout = 1 })
    assert.are.equal("timeout", W:fetch("s2", core.now() + 2).waits[1].kind)
    assert.are.equal(410, (reply(t.token, '{"late":true}', { base = rbase })))
    local _, late = web.request(base, "GET", "/api/v1/workers/Parked/late_replies", { headers = BEARER })
    late = json.decode(late).replies
    assert.are.equal(2, #late)
    assert.are.same({ "s2", t.attempt, "reply", '{"late":true}' }, { late[1].id, late[1].attempt, late[1].op, late[1].body })
    assert.are.equal("s1", late[2].id)
  end)

  it("refuses another body than rickover's for a worker without on_reply (400), accepts its own", function()
    local w = W:wait("r", { rule = "status" })
    local st, v = reply(w.token, '{"x":1}')
    assert.are.equal(400, st)
    assert.truthy(v.error:find("^badreply"), v.error)
    assert.are.equal(200, (reply(w.token, '{"status":"failed","error":"no stock","retryable":false}')))
  end)

  it("moves the heartbeat deadline on (POST .../heartbeat), on either listener", function()
    local w = W:wait("h", { heartbeat = 5 })
    local function beat()
      local _, text = web.request(base, "GET", "/api/v1/workers/Parked/waiting", { headers = BEARER })
      return json.decode(text).jobs[1].heartbeat_deadline
    end
    local before = beat()
    core.sleep(0.05)
    local st, v = post("/api/v1/replies/" .. w.token .. "/heartbeat", "", { base = rbase })
    assert.are.equal(200, st)
    assert.are.same({ ok = true }, v)
    assert.is_true(beat() > before)
    assert.are.equal(404, (post("/api/v1/replies/junk/heartbeat", "")))
  end)

  it("takes bodies up to 256 KiB; a larger one is 413 before Redis is asked", function()
    local w = W:wait("big")
    local body = '"' .. string.rep("x", 262142) .. '"' -- 262144 bytes
    -- Redis stopped: the 413 comes at once, from both listeners
    assert(host.sh("kill -STOP " .. srv.pid))
    local ok, err = pcall(function()
      for _, b in ipairs { base, rbase } do
        local t0 = core.now()
        local st, v = reply(w.token, body .. " ", { base = b })
        assert.are.equal(413, st, b)
        if v then assert.truthy(v.error:find("at most 262144"), v.error) end
        assert.is_true(core.now() - t0 < 2, "413 after " .. (core.now() - t0) .. " s")
      end
    end)
    host.sh("kill -CONT " .. srv.pid)
    assert(ok, err)
    assert.are.equal(200, (reply(w.token, body, { base = rbase })))
    assert.are.equal(body, W:handle("big").value)
  end)
end)

describe("a reply by correlation key (POST /api/v1/workers/NAME/replies, bearer token)", function()
  it("finds the wait by its key; the same reply with its keys in another order is a duplicate; STALE drops the key", function()
    local w = W:wait("k1", { key = "order-7" })
    local path = "/api/v1/workers/Parked/replies"
    assert.are.equal(401, (post(path, { key = "order-7", reply = { a = 1 } })))
    local st, v = post(path, '{"key":"order-7","reply":{"b":2,"a":1}}', { headers = BEARER })
    assert.are.equal(200, st)
    assert.are.same({ accepted = true }, v)
    st, v = post(path, '{"reply":{"a":1,"b":2},"key":"order-7"}', { headers = BEARER })
    assert.are.same({ 200, { accepted = true, duplicate = true } }, { st, v })
    assert.are.equal(409, (post(path, { key = "order-7", reply = { a = 2 } }, { headers = BEARER })))
    assert.are.equal(404, (post(path, { key = "nope", reply = {} }, { headers = BEARER })))
    assert.are.equal(400, (post(path, { key = "order-7" }, { headers = BEARER })))
    assert.are.equal(400, (post(path, "{nope", { headers = BEARER })))
    assert.are.equal(404, (post("/api/v1/workers/Nope/replies", { key = "order-7", reply = {} }, { headers = BEARER })))
    assert.are.equal('{"a":1,"b":2}', W:handle("k1").value)
    local Q = cfg.namespace .. ":{Parked}:waitkeys"
    assert.truthy(srv.conn:call("HGET", Q, "order-7"))
    assert.are.equal(410, (post(path, { key = "order-7", reply = { a = 1 } }, { headers = BEARER })))
    assert.is_falsy(srv.conn:call("HGET", Q, "order-7"))
    assert.truthy(w.token)
  end)
end)

describe("rickover's form (POST /api/v1/workers/NAME/jobs/ID, bearer token)", function()
  it("takes the attempt from the body: the current one 200, an older 410, an unknown 404, none 400", function()
    local w = W:wait("j1", { rule = "status" })
    local path = "/api/v1/workers/Parked/jobs/j1"
    local body = json.encode { status = "succeeded", attempt = w.attempt }
    assert.are.equal(401, (post(path, body)))
    assert.are.equal(404, (post(path, { status = "succeeded", attempt = w.attempt + 9 }, { headers = BEARER })))
    assert.are.equal(400, (post(path, { status = "succeeded" }, { headers = BEARER })))
    assert.are.equal(400, (post(path, { status = "nope", attempt = w.attempt }, { headers = BEARER })))
    local st, v = post(path, body, { headers = BEARER })
    assert.are.same({ 200, { accepted = true } }, { st, v })
    assert.are.equal(body, W:handle("j1").value)
    -- the job waits again (a retry): the old attempt is stale
    local w2 = W:wait("j1", { rule = "status" })
    assert.is_true(w2.attempt > w.attempt)
    assert.are.equal(410, (post(path, body, { headers = BEARER })))
  end)
end)

describe("an operator's delete and kill of waiting jobs (POST /api/web/workers/NAME/queue/delete|kill)", function()
  it("end the waits: the delete drops the job, the kill moves it to the morgue; the tokens answer 410", function()
    local a, b = W:wait("del"), W:wait("kil")
    local st, v = post("/api/web/workers/Parked/queue/delete", { ids = { "del" } }, { headers = BEARER })
    assert.are.same({ 200, { deleted = 1 } }, { st, v })
    st, v = post("/api/web/workers/Parked/queue/kill", { ids = { "kil" } }, { headers = BEARER })
    assert.are.same({ 200, { killed = 1 } }, { st, v })
    assert.are.equal(410, (reply(a.token, "{}")))
    assert.are.equal(410, (reply(b.token, "{}")))
    assert.are.equal(1, srv.conn:call("ZCARD", b.prefix .. "morgue"))
    assert.are.equal(400, (post("/api/web/workers/Parked/queue/kill", { all = true }, { headers = BEARER })))
  end)
end)

describe("the --replies listener", function()
  it("serves the reply routes to anyone, from any Host, and nothing else", function()
    local w = W:wait("x")
    local st = reply(w.token, "{}", { base = rbase, headers = { "Host: replies.example.com", "Origin: https://other.example" } })
    assert.are.equal(200, st)
    for _, r in ipairs {
      { "GET", "/" }, { "GET", "/api/v1/stats" }, { "GET", "/metrics" }, { "GET", "/api/web/dashboard" },
      { "POST", "/api/v1/workers/Parked/replies" }, { "POST", "/api/v1/workers/Parked/jobs/x" },
      { "GET", "/api/v1/workers/Parked/waiting" }, { "POST", "/api/web/login" },
    } do
      local code = web.request(rbase, r[1], r[2], { headers = BEARER, body = r[1] == "POST" and "{}" or nil })
      assert.are.equal(404, code, r[1] .. " " .. r[2])
    end
    assert.are.equal(405, (web.request(rbase, "GET", "/api/v1/replies/" .. w.token)))
  end)

  -- web.c hands the requests that arrive together to one batch, whose
  -- reply.lua calls go to Redis as one pipeline (luakiq.web's batcher):
  -- each must still get its own answer, in any mix, and a client that
  -- hangs up meanwhile must cost nobody else theirs.
  it("answers requests that arrive together each by its own outcome, one pipeline for all", function()
    local port = rbase:match(":(%d+)$")
    local lines, want = {}, {}
    local function add(path, body, status, answer)
      lines[#lines + 1] = path .. " " .. body
      want[#want + 1] = { status, answer }
    end
    local tokens, attempts = {}, {}
    for i = 1, 40 do
      local w = W:wait("burst" .. i)
      tokens[i], attempts[i] = w.token, w.attempt
      add("/api/v1/replies/" .. w.token, '{"n":' .. i .. '}', 200, { accepted = true })
    end
    add("/api/v1/replies/" .. tokens[1], '{"n":1}', 200, { accepted = true, duplicate = true }) -- after its first
    add("/api/v1/replies/" .. tokens[2], '{"n":0}', 409)
    add("/api/v1/replies/" .. tokens[3]:sub(1, -2) .. (tokens[3]:sub(-1) == "0" and "1" or "0"), "{}", 404)
    add("/api/v1/replies/junk", "{}", 404)
    add("/api/v1/replies/" .. W:wait("beat", { heartbeat = 5 }).token .. "/heartbeat", "", 200, { ok = true })
    add("/api/v1/stats", "{}", 404)
    local h = W:wait("hungup")
    attempts.h = h.attempt
    lines[#lines + 1] = "hangup /api/v1/replies/" .. h.token .. ' {"n":"h"}'
    local b = W:wait("badjson")
    add("/api/v1/replies/" .. b.token, "{nope", 400)
    local file = host.tmpdir() .. "/burst"
    host.write(file, table.concat(lines, "\n") .. "\n")
    local out = host.capture("python3 spec/helpers/clients.py burst " .. port .. " " .. q(file))
    local got = {}
    for l in out:gmatch("[^\n]+") do got[#got + 1] = l end
    assert.are.equal(#lines, #got, out)
    local k = 0
    for i, l in ipairs(got) do
      if l ~= "hangup" then
        k = k + 1
        local st, body = l:match("^(%d+) (.*)$")
        assert.are.equal(want[k][1], tonumber(st), lines[i] .. " -> " .. l)
        if want[k][2] then assert.are.same(want[k][2], json.decode(body), lines[i] .. " -> " .. l) end
      end
    end
    -- every reply reached its own job, the hung-up client's too: the
    -- fetches of the worker's shards hand back exactly these reply calls
    local replied, n = {}, 0
    for shard = 0, W.worker.shards_count - 1 do
      local f = W:fetch_prefix(keys.prefix(cfg.namespace, W.worker.queue_name, shard), 100)
      for k, r in pairs(f.waits) do replied[f.ids[k]], n = r, n + 1 end
    end
    assert.are.equal(41, n)
    for i = 1, 40 do
      assert.are.same({ kind = "reply", attempt = attempts[i], value = '{"n":' .. i .. '}' }, replied["burst" .. i])
    end
    assert.are.same({ kind = "reply", attempt = attempts.h, value = '{"n":"h"}' }, replied["hungup"])
    -- and the listener still answers
    local w = W:wait("after")
    assert.are.equal(200, (reply(w.token, "{}", { base = rbase })))
  end)

  it("cuts off a slow client at the header timeout, and a kept-alive idle one", function()
    local port = rbase:match(":(%d+)$")
    local function client(...)
      local out = host.capture("python3 spec/helpers/clients.py " .. table.concat({ ... }, " "))
      local what, secs = out:match("(%a+) ([%d.]+)")
      return what, tonumber(secs)
    end
    local what, secs = client("slowloris", port, 0.3, 10)
    assert.are.equal("closed", what)
    assert.is_true(secs >= 0.9 and secs < 2.5, "closed after " .. tostring(secs) .. " s")
    what, secs = client("keepalive", port, 10)
    assert.are.equal("closed", what)
    assert.is_true(secs >= 1.3 and secs < 3, "closed after " .. tostring(secs) .. " s")
    assert.truthy(proc:log():find("replies: closed a connection that did not send a whole request", 1, true), proc:log())
  end)
end)

describe("GET /metrics", function()
  it("has luakiq_jobs_waiting and luakiq_replies_total by outcome, and promtool takes it", function()
    local a, b = W:wait("m1"), W:wait("m2")
    W:wait("m3")
    reply(b.token, "{}")
    W:handle("m2")
    reply(b.token, "{}")
    reply(a.token, "{}")
    reply(a.token, "{}")
    reply(a.token, '{"x":1}')
    reply("1.UGFya2Vk.bTE.1.00", "{}")
    local st, text = web.request(base, "GET", "/metrics", { headers = BEARER })
    assert.are.equal(200, st)
    local function sample(name)
      local v = text:match("\n" .. name:gsub("[%[%]%(%)%.%-%+%*%?%^%$%%]", "%%%0") .. " (%S+)")
      return tonumber(v)
    end
    -- m1 replied, m3 waiting (m2 handled); every outcome counted
    assert.are.equal(2, sample('luakiq_jobs_waiting{worker="Parked"}'))
    assert.are.equal(0, sample('luakiq_jobs_waiting{worker="Run"}'))
    for outcome, n in pairs { accepted = 2, duplicate = 1, conflict = 1, stale = 1, unknown = 1 } do
      assert.are.equal(n, sample('luakiq_replies_total{worker="Parked",outcome="' .. outcome .. '"}'), outcome)
    end
    web.promtool_check(text)
  end)
end)

-- (last: the host's web VM keeps the count it learnt here)
describe("a reshard met on the way (luakiq.lib.replies)", function()
  local replies = require "luakiq.lib.replies"
  -- An id whose shard is the same under 3 and 5 shards.
  local function steady_id()
    for i = 1, 1000 do
      local id = "rs" .. i
      if keys.shard(id, 3) == keys.shard(id, 5) then return id end
    end
  end

  it("routes again with the registry's count after RESHARDED, and answers 503 while a reshard holds the shard", function()
    local id = steady_id()
    local w = W:wait(id)
    local P = w.prefix
    -- this VM has the count 3; the queue "was resharded" to 5 since
    assert.are.equal("UNKNOWN", (replies.by_token(srv.conn, cfg, w.token:gsub("%.%x+$", ".00"), "{}")))
    srv.conn:call("HSET", keys.registry(cfg.namespace), "Parked", 5)
    srv.conn:call("SET", P .. "shards", "5")
    assert.are.equal("accepted", (replies.by_token(srv.conn, cfg, w.token, '{"r":1}')))
    -- frozen by a reshard: asked again for a second, then 503
    srv.conn:call("SET", P .. "reshard", "tok")
    local t0 = core.now()
    local st, v = reply(w.token, '{"r":1}')
    assert.are.equal(503, st)
    assert.truthy(v.error:find("resharded"), v.error)
    assert.is_true(core.now() - t0 >= 0.9, "answered after " .. (core.now() - t0) .. " s")
    -- a reshard that ends meanwhile: the retry gets through
    host.spawn_cmd("sh -c " .. q("sleep 0.3; redis-cli -p " .. srv.port .. " DEL " .. P .. "reshard"))
    st, v = reply(w.token, '{"r":1}')
    assert.are.same({ 200, { accepted = true, duplicate = true } }, { st, v })
  end)
end)
