-- luakiq.http.request against a real HTTP(S) server (spec/helpers/httpd.py):
-- first called directly in this VM (it waits in place), then from workers of
-- a real host, where each request parks its call and a thread keeps many
-- requests in flight (docs/lua-api.md, "luakiq.http").
local luakiq = require "luakiq"
local core = require "luakiq.core"
local json = require "luakiq.json"
local host = require "helpers.host"
local httpd = require "helpers.httpd"
local q = host.quote

local web, tls
setup(function()
  web = httpd.start()
  tls = httpd.start { tls = true }
end)
teardown(function()
  web.stop()
  tls.stop()
end)

local function req(opts) return luakiq.http.request(opts) end
local function fails(opts)
  local ok, err = pcall(req, opts)
  assert.is_false(ok, "expected an error")
  return tostring(err)
end

describe("luakiq.http.request", function()
  it("returns status, lower-case headers and body for any status", function()
    local r = req { url = web.url .. "/echo?x=1", method = "POST", body = "hello",
                    headers = { ["X-Token"] = "abc", ["Content-Type"] = "text/plain" } }
    assert.are.equal(200, r.status)
    assert.are.equal("application/json", r.headers["content-type"])
    local e = json.decode(r.body)
    assert.are.equal("POST", e.method)
    assert.are.equal("/echo?x=1", e.path)
    assert.are.equal("hello", e.body)
    assert.are.equal("abc", e.headers["x-token"])
    assert.are.equal("text/plain", e.headers["content-type"])
    assert.truthy(e.headers["user-agent"]:find("^luakiq/"))
    assert.is_nil(e.headers["expect"])
    for _, code in ipairs { 201, 404, 429, 500, 503 } do
      local s = req { url = web.url .. "/status/" .. code }
      assert.are.equal(code, s.status)
      assert.are.equal("status " .. code, s.body)
    end
    assert.are.equal("2", req({ url = web.url .. "/status/429" }).headers["retry-after"])
  end)

  it("sends PUT, PATCH, DELETE and HEAD; POST without a body sends an empty one", function()
    for _, m in ipairs { "PUT", "PATCH", "DELETE" } do
      local e = json.decode(req({ url = web.url .. "/echo", method = m, body = "b" .. m }).body)
      assert.are.same({ m, "b" .. m }, { e.method, e.body })
    end
    local e = json.decode(req({ url = web.url .. "/echo", method = "POST" }).body)
    assert.are.same({ "POST", "", "0" }, { e.method, e.body, e.headers["content-length"] })
    local h = req { url = web.url .. "/big/100", method = "HEAD" }
    assert.are.same({ 200, "", "100" }, { h.status, h.body, h.headers["content-length"] })
  end)

  it("joins repeated headers with ', '", function()
    local r = req { url = web.url .. "/multi" }
    assert.are.equal("a, b", r.headers["x-multi"])
    assert.are.equal("x=1, y=2", r.headers["set-cookie"])
  end)

  it("does not follow redirects unless asked", function()
    local r = req { url = web.url .. "/redirect" }
    assert.are.equal(302, r.status)
    assert.are.equal("/echo", r.headers["location"])
    local f = req { url = web.url .. "/redirect", redirects = 3 }
    assert.are.equal(200, f.status)
    assert.are.equal("GET", json.decode(f.body).method)
  end)

  it("reuses the thread's connection (keep-alive)", function()
    local a = req({ url = web.url .. "/conn" }).body
    local b = req({ url = web.url .. "/conn" }).body
    assert.are.equal(a, b)
  end)

  it("caps the body at max_body (16 MiB by default), with or without a Content-Length", function()
    assert.are.equal(1000, #req({ url = web.url .. "/big/1000", max_body = 1000 }).body)
    assert.truthy(fails({ url = web.url .. "/big/1001", max_body = 1000 }):find(
      "^http: response body larger than max_body %(1000 bytes%) %(GET http://127.0.0.1:%d+/big/1001%)"))
    assert.truthy(fails({ url = web.url .. "/chunked/5000", max_body = 4096 }):find("larger than max_body", 1, true))
    assert.are.equal(16 * 1024 * 1024, #req({ url = web.url .. "/big/" .. 16 * 1024 * 1024 }).body)
    assert.truthy(fails({ url = web.url .. "/big/" .. (16 * 1024 * 1024 + 1) }):find("larger than max_body", 1, true))
  end)

  it("verifies TLS by default; insecure = true skips it", function()
    local err = fails { url = tls.url .. "/echo" }
    assert.truthy(err:find("^http: .*certificate"), err)
    local r = req { url = tls.url .. "/echo", insecure = true }
    assert.are.equal(200, r.status)
  end)

  it("raises http: naming the URL without its credentials on a transport failure", function()
    local port = core.free_port()
    local err = fails { url = "http://alice:s3cret@127.0.0.1:" .. port .. "/x?y=1" }
    assert.truthy(err:find("^http: .*%(GET http://"), err)
    assert.falsy(err:find("s3cret", 1, true), err)
    assert.falsy(err:find("alice:", 1, true), err)
  end)

  it("ends a request at its timeout", function()
    local t0 = core.now()
    local err = fails { url = web.url .. "/hang", timeout = 0.5 }
    local took = core.now() - t0
    assert.truthy(err:find("^http: .*[Tt]imed out"), err)
    assert.is_true(took >= 0.45 and took < 2, ("took %.2f s"):format(took))
  end)

  it("loads libcurl at the first request: a process that makes none maps none of it", function()
    -- (linked, libcurl and its TLS, Kerberos and LDAP libraries made every
    -- luakiq process ~5.8 MB larger at start: host/http.c)
    local d = host.tmpdir()
    host.write(d .. "/probe.lua", [[
      local luakiq = require "luakiq"
      local function mapped()
        local f = assert(io.open("/proc/self/maps"))
        local s = f:read("*a")
        f:close()
        return s:find("libcurl", 1, true) ~= nil
      end
      local before = mapped()
      local r = luakiq.http.request { url = arg[1] .. "/status/204" }
      print(tostring(before), tostring(mapped()), r.status)]])
    local rc, out, err = host.exec("lua " .. q(d .. "/probe.lua") .. " " .. q(web.url))
    os.execute("rm -rf " .. q(d))
    assert.are.equal(0, rc, err)
    assert.are.equal("false\ttrue\t204\n", out)
  end)

  it("refuses bad options with one clear line", function()
    local cases = {
      [{ url = web.url, foo = 1 }] = "unknown option 'foo'",
      [{ url = "ftp://example.com/x" }] = "url must be http:// or https://",
      [{ url = "file:///etc/passwd" }] = "url must be http:// or https://",
      [{}] = "url must be a string",
      [{ url = web.url, method = "get" }] = "method must be an upper-case HTTP method",
      [{ url = web.url, body = 5 }] = "body must be a string",
      [{ url = web.url, timeout = 0 }] = "timeout must be a number > 0",
      [{ url = web.url, timeout = 0 / 0 }] = "timeout must be a number > 0",
      [{ url = web.url, headers = { ["X-A"] = "a\r\nX-Injected: 1" } }] = "header 'X-A' must be a string without line breaks",
      [{ url = web.url, headers = { ["Bad Name"] = "a" } }] = "header names must be tokens",
      [{ url = web.url, redirects = -1 }] = "redirects must be an integer >= 0",
      [{ url = web.url, max_body = 1.5 }] = "max_body must be an integer >= 0",
      [{ url = web.url, insecure = "yes" }] = "insecure must be a boolean",
    }
    for opts, want in pairs(cases) do
      local err = fails(opts)
      assert.truthy(err:find("luakiq.http.request: " .. want, 1, true), err)
      assert.falsy(err:find("\n"), err)
    end
    assert.truthy(fails("x"):find("expects a table of options", 1, true))
  end)
end)

-- --- from workers of a real host ------------------------------------------------

local srv, env = host.fixture()

local CALLER = [[
local luakiq = require "luakiq"
local SHARDS = %d
return {
  shards_count = SHARDS, timeout = %s, max_retry_count = 0, %s
  perform = function(batch)
    for id, payloads in pairs(batch) do
      local t0 = luakiq.now()
      local r = luakiq.http.request { url = payloads[1] }
      luakiq.redis.call("RPUSH", "t:calls", luakiq.json.encode {
        id = id, shard = require("luakiq.core").crc32(id) %% SHARDS, t0 = t0, t1 = luakiq.now(),
        status = r.status, body = r.body,
      })
    end
  end,
}
]]

local function scriptdir(shards, timeout, extra)
  return host.scriptdir {
    ["config.lua"] = "return { threads_per_node = 1, poll_interval = 0.2 }",
    ["workers/Caller.lua"] = CALLER:format(shards, timeout or 30, extra or ""),
  }
end

local function enqueue(dir, jobs) host.enqueue(dir, "Caller", jobs, env()) end
local function calls() return srv:json_list("t:calls") end

describe("luakiq.http.request in workers", function()
  local dir, proc
  before_each(function() srv.conn:call("FLUSHALL") end)
  host.stop_after_each(function() return proc, dir end)

  it("keeps many requests in flight on one thread, one per shard at a time", function()
    dir = scriptdir(20)
    local jobs = {}
    for i = 1, 40 do jobs[i] = { id = "j" .. i, payload = web.url .. "/delay/400" } end
    enqueue(dir, jobs)
    proc = host.spawn("run " .. q(dir), env())
    local list = host.eventually(function() local c = calls() return #c == 40 and c end, 20, "40 calls")
    local first, last = math.huge, 0
    local by = {}
    for _, c in ipairs(list) do
      assert.are.equal(200, c.status)
      first, last = math.min(first, c.t0), math.max(last, c.t1)
      by[c.shard] = by[c.shard] or {}
      table.insert(by[c.shard], c)
    end
    -- one at a time: 16 s; at most 20 in flight: a few rounds of 0.4 s
    assert.is_true(last - first < 4, ("40 requests took %.2f s"):format(last - first))
    for _, cs in pairs(by) do
      table.sort(cs, function(a, b) return a.t0 < b.t0 end)
      for i = 2, #cs do assert.is_true(cs[i].t0 >= cs[i - 1].t1, "calls of one shard overlapped") end
    end
  end)

  it("ends a request at the call's timeout; the shard's next job runs", function()
    dir = scriptdir(1, 1)
    enqueue(dir, { { id = "hang", payload = web.url .. "/hang" }, { id = "next", payload = web.url .. "/echo" } })
    local t0 = core.now()
    proc = host.spawn("run " .. q(dir), env())
    local c = host.eventually(function() return calls()[1] end, 10, "the next call")
    assert.are.equal("next", c.id)
    local rc, out = host.exec("jobs " .. q(dir) .. " Caller morgue", nil, env())
    assert.are.equal(0, rc)
    local dead = json.decode(out:match("[^\n]+"))
    assert.are.equal("hang", dead.id)
    assert.truthy(dead.error:find("^timeout"), dead.error)
    assert.is_true(dead.updated_at - t0 < 1 + 2 + 1, "failed " .. (dead.updated_at - t0) .. " s after start")
    assert.falsy(proc:log():find("replacing the process", 1, true))
  end)

  it("fails the call with the http: error of a transport failure", function()
    dir = scriptdir(1)
    enqueue(dir, { { id = "refused", payload = "http://u:pw@127.0.0.1:" .. core.free_port() .. "/x" } })
    proc = host.spawn("run " .. q(dir), env())
    local dead = host.eventually(function()
      local rc, out = host.exec("jobs " .. q(dir) .. " Caller morgue", nil, env())
      return rc == 0 and out:match("[^\n]+")
    end, 10, "the failed job")
    local j = json.decode(dead)
    assert.truthy(j.error:find("http: ", 1, true), j.error)
    assert.falsy(j.error:find("pw@", 1, true), j.error)
  end)

  it("TERM lets requests in flight finish, then exits 0", function()
    dir = scriptdir(8)
    local jobs = {}
    for i = 1, 8 do jobs[i] = { id = "t" .. i, payload = web.url .. "/delay/1500" } end
    enqueue(dir, jobs)
    proc = host.spawn("run " .. q(dir), env())
    host.sh("sleep 0.8")
    proc:signal("TERM")
    assert.are.equal(0, proc:wait(10), proc:log())
    local list = calls()
    assert.is_true(#list >= 4, "finished: " .. #list)
    local rc, out = host.exec("jobs " .. q(dir) .. " Caller busy", nil, env())
    assert.are.equal(0, rc)
    assert.are.equal("", out)
  end)
end)
