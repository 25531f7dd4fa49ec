-- Each client in another language (clients/) leaves Redis exactly as
-- `luakiq enqueue` leaves it for the same jobs: the same calls go through
-- the CLI into database 0 and through the client into database 1 of one
-- server, and every key of the two is compared, byte for byte (the
-- registry, the layout, each shard's records, ready list, indexes, tags,
-- windows, expiries). A bad job gives both the same message. Each client
-- runs through a small program of its own tests (interop.py, interop.js,
-- interop.rb): CALLS on stdin, one count per call on stdout.
local redis = require "helpers.redis"
local host = require "helpers.host"
local json = require "luakiq.json"
local core = require "luakiq.core"
local q = host.quote

local srv = redis.start({})

local CLIENTS = {
  python = "/usr/bin/python3 clients/python/tests/interop.py",
  node = "node clients/node/test/interop.js",
  ruby = "ruby -Iclients/ruby/lib clients/ruby/test/interop.rb",
}
local ENV = { python = "PYTHONPATH=clients/python" }

-- Every key of the connection's database: key -> {type, value} (hashes
-- and sets sorted).
local function dump(conn)
  local out = {}
  for _, k in ipairs(conn:call("KEYS", "*")) do
    local t = conn:call("TYPE", k)
    local v
    if t == "string" then v = conn:call("GET", k)
    elseif t == "list" then v = conn:call("LRANGE", k, 0, -1)
    elseif t == "zset" then v = conn:call("ZRANGE", k, 0, -1, "WITHSCORES")
    elseif t == "set" then v = conn:call("SMEMBERS", k) table.sort(v)
    elseif t == "hash" then
      local flat, pairs_ = conn:call("HGETALL", k), {}
      for i = 1, #flat, 2 do pairs_[#pairs_ + 1] = flat[i] .. "\0=" .. flat[i + 1] end
      table.sort(pairs_)
      v = pairs_
    end
    out[k] = { t, v }
  end
  return out
end

local function count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

local now = os.time()
-- (explicit perform_in and score: the CLI's clock and the client's differ)
local CALLS = {
  { { id = 1, payload = { b = 1, a = { 1, 2.5, -0.1 } }, perform_in = now - 5, score = now - 5, tags = { "x", "a" } },
    { id = "x y:{z}", payload = "p", perform_in = now + 3600, score = now, priority = 5 },
    { id = "ü-2", payload = { s = "é\n\"\1\127", t = true, n = 12345678901, u = "\226\128\168", big = 2 ^ 60,
      f = 0.1, neg = -0.0, e = 1e-7, ["é"] = 1, ["z"] = 2, ["😀"] = 3, ["\239\191\191"] = 4 },
      perform_in = now - 5, score = now - 4, expires_at = now + 86400.5 },
    { id = 7, payload = 1, perform_in = now - 5, score = 5, retry_count = 2 },
    { id = "w", payload = { list = json.array() }, perform_in = now - 5, score = now - 5,
      windows = { "09:00-17:00", "22:00-02:00" }, timezone = "Europe/Berlin" },
    { id = 1e15, payload = json.null, perform_in = now - 6, score = now - 6, priority = -3 } },
  { { id = 1, payload = "second", perform_in = now - 9, score = now - 3, tags = { "b" } },
    { id = 1, payload = { a = { 1, 2.5, -0.1 }, b = 1 }, perform_in = now - 5, score = now - 1 },
    { id = 7, payload = 1, perform_in = now - 5, score = 4 },
    { id = "x y:{z}", payload = "q", perform_in = now + 7200, score = now + 1, priority = 3, expires_at = now + 10 },
    { id = 9, perform_in = now - 5, score = now - 2 } },
}
-- the short forms: one payload ("ids"), payloads that differ ("pairs"), 1000 jobs a call
local ids, pairs_ = {}, {}
for i = 1, 1500 do ids[i] = { id = "b" .. i, perform_in = now - 1, score = now - 1 } end
for i = 1, 300 do pairs_[i] = { id = i * 7, payload = { n = i }, perform_in = now - 2, score = now - 2 } end
CALLS[#CALLS + 1] = ids
CALLS[#CALLS + 1] = pairs_

for _, lang in ipairs { "python", "node", "ruby" } do
  describe("clients/" .. lang, function()
    local function client(url, calls, worker, shards)
      local dir = host.tmpdir()
      host.write(dir .. "/calls.json", json.encode(calls))
      local rc, out, err = host.sh_out((ENV[lang] or "") .. " " .. CLIENTS[lang] .. " " .. q(url) .. " luakiq " ..
        (worker or "A") .. " " .. (shards or 4) .. " <" .. q(dir .. "/calls.json"))
      host.sh("rm -rf " .. q(dir))
      return rc, out, err
    end

    it("queues byte for byte what luakiq enqueue queues", function()
      srv.conn:call("FLUSHALL")
      local dir = host.scriptdir { ["workers/A.lua"] = "return { shards_count = 4, perform = function() end }" }
      local url0, url1 = srv.url, srv.url:gsub("/0$", "/1")
      local counts = {}
      for i, c in ipairs(CALLS) do
        host.write(dir .. "/call.json", json.encode(c))
        local rc, out, err = host.exec("enqueue " .. q(dir) .. " A " .. q(dir .. "/call.json"), nil, "REDIS_URL=" .. url0)
        assert.are.equal(0, rc, err)
        counts[i] = out:match("enqueued (%d+) jobs?")
      end
      local rc, out, err = client(url1, CALLS)
      assert.are.equal(0, rc, out .. err)
      assert.are.equal(table.concat(counts, "\n") .. "\n", out)
      local c1 = assert(core.connect(url1, 5))
      local mine, theirs = dump(srv.conn), dump(c1)
      c1:close()
      assert.is_true(count(mine) > 20, "keys: " .. count(mine))
      for k, v in pairs(mine) do assert.are.same(v, theirs[k], k) end
      assert.are.equal(count(mine), count(theirs))
      host.sh("rm -rf " .. q(dir))
    end)

    it("refuses a bad job with luakiq enqueue's message, and enqueues nothing", function()
      srv.conn:call("FLUSHALL")
      local dir = host.scriptdir { ["workers/A.lua"] = "return { shards_count = 4, perform = function() end }" }
      local bad = { { { id = "a" }, { id = "b", tags = { "ok", "a\tb" } } } }
      host.write(dir .. "/call.json", json.encode(bad[1]))
      local _, _, err = host.exec("enqueue " .. q(dir) .. " A " .. q(dir .. "/call.json"), nil, "REDIS_URL=" .. srv.url)
      assert.are.equal("luakiq: job 2 (id b): tag a\\x09b has a control character\n", err)
      srv.conn:call("FLUSHALL")
      local rc, out = client(srv.url, bad)
      assert.are.equal(2, rc)
      assert.are.equal("error: " .. err:match("^luakiq: (.*)$"), out)
      assert.are.same({}, srv.conn:call("KEYS", "*"))
      host.sh("rm -rf " .. q(dir))
    end)
  end)
end
