-- The one URL redactor (host/store.c store_redact_url, core.redact_url,
-- luakiq.runtime.redact): one case per URL form, then where URLs are shown,
-- tried as a new user would (the CLI's errors, the dashboard's JSON, a
-- password with an unencoded '@'), against real redis-servers.
local core = require "luakiq.core"
local json = require "luakiq.json"
local runtime = require "luakiq.runtime"
local host = require "helpers.host"
local redis = require "helpers.redis"
local q = host.quote

describe("runtime.redact", function()
  local cases = {
    { "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0" },
    { "redis://:s3cret@host:6379/2", "redis://***@host:6379/2" },
    { "redis://alice:s3cret@host", "redis://***@host" },
    { "redis://s3cret@host", "redis://***@host" },                    -- userinfo alone is the password
    { "redis://:p@ss@host:6379/0", "redis://***@host:6379/0" },       -- an unencoded '@' in the password
    { "redis://:pa/ss@host", "redis://***@host" },                    -- an unencoded '/'
    { "rediss://u:pw@host:6380", "rediss://***@host:6380" },
    { "unix:///tmp/r.sock?db=2&password=s3cret", "unix:///tmp/r.sock?db=2&password=***" },
    { "unix:///tmp/r.sock?password=s3cret&db=2", "unix:///tmp/r.sock?password=***&db=2" },
    { "unix:///tmp/r.sock?password=s3cret&db=x", "unix:///tmp/r.sock?password=***&db=x" }, -- malformed
    { "unix:///tmp/r.sock", "unix:///tmp/r.sock" },
    { "http://alice:s3cret@127.0.0.1:8080/x?y=1", "http://***@127.0.0.1:8080/x?y=1" },
    { "https://token@api.example.com/v1", "https://***@api.example.com/v1" },
    { "https://api.example.com/v1?password=x&a=1#f", "https://api.example.com/v1?password=***&a=1#f" },
    { "https://api.example.com/v1?a=1", "https://api.example.com/v1?a=1" },
    { "not a url", "not a url" },
    { "", "" },
  }
  for _, c in ipairs(cases) do
    it(("%q -> %q"):format(c[1], c[2]), function()
      assert.are.equal(c[2], runtime.redact(c[1]))
    end)
  end
  it("handles a URL longer than any buffer", function()
    local long = "redis://:" .. ("x"):rep(100000) .. "@h/" .. ("y"):rep(10)
    assert.are.equal("redis://***@h/" .. ("y"):rep(10), runtime.redact(long))
  end)
end)

describe("URLs shown to users", function()
  local tmp, pid
  -- a private redis-server on a unix socket with a password (stopped by pid)
  local function start_unix(password)
    tmp = host.tmpdir()
    assert(host.sh(("redis-server --port 0 --unixsocket %s --requirepass %s --daemonize yes --pidfile %s " ..
      "--save '' --appendonly no --dir %s --logfile %s"):format(q(tmp .. "/r.sock"), q(password),
      q(tmp .. "/pid"), q(tmp), q(tmp .. "/log"))))
    pid = host.eventually(function() return tonumber(host.read(tmp .. "/pid")) end, 5, "redis pid")
    host.eventually(function() return host.sh("test -S " .. q(tmp .. "/r.sock")) end, 5, "redis socket")
  end
  after_each(function()
    if not pid then return end
    host.sh("kill " .. pid)
    host.eventually(function() return not host.sh("kill -0 " .. pid .. " 2>/dev/null") end, 5, "redis gone")
    host.sh("rm -rf " .. q(tmp))
    pid = nil
  end)
  local function scriptdir()
    return host.scriptdir {
      ["config.lua"] = "return { threads_per_node = 1, poll_interval = 0.2 }",
      ["workers/W.lua"] = "return { perform = function() end }",
    }
  end

  it("the dashboard's JSON shows a unix:// URL's password as ***", function()
    start_unix("s3cret")
    local dir, port = scriptdir(), core.free_port()
    local url = "unix://" .. tmp .. "/r.sock?db=2&password=s3cret"
    local p = host.spawn("run " .. q(dir) .. " --web 127.0.0.1:" .. port, "REDIS_URL=" .. q(url))
    local body = host.eventually(function()
      local b = host.capture("curl -s http://127.0.0.1:" .. port .. "/api/web/dashboard")
      return b ~= "" and b
    end, 10, "the dashboard")
    p:kill()
    host.sh("rm -rf " .. q(dir))
    assert.falsy(body:find("s3cret", 1, true), body)
    assert.are.equal("unix://" .. tmp .. "/r.sock?db=2&password=***", json.decode(body).redis_info.url)
    assert.falsy(p:log():find("s3cret", 1, true), p:log())
  end)

  it("a malformed unix:// URL's error does not show its password", function()
    local dir = scriptdir()
    local rc, _, err = host.exec("stats " .. q(dir), nil, "REDIS_URL=" .. q("unix:///tmp/r.sock?password=s3cret&db=x"))
    host.sh("rm -rf " .. q(dir))
    assert.are.equal(2, rc) -- a bad setting
    assert.falsy(err:find("s3cret", 1, true), err)
    assert.truthy(err:find("bad Redis URL 'unix:///tmp/r.sock?password=***&db=x'", 1, true), err)
  end)

  it("a password with an unencoded '@' connects, and is never shown", function()
    local srv = redis.start()
    srv.conn:call("CONFIG", "SET", "requirepass", "p@ss")
    local dir = scriptdir()
    local good = "redis://:p@ss@127.0.0.1:" .. srv.port .. "/0"
    local rc, out, err = host.exec("stats " .. q(dir), nil, "REDIS_URL=" .. q(good))
    assert.are.equal(0, rc, err)
    assert.truthy(json.decode(out).by_worker.W)
    -- a wrong one: the error names the host, not a piece of the password
    local bad = "redis://:p@sX@127.0.0.1:" .. srv.port .. "/0"
    rc, _, err = host.exec("stats " .. q(dir), nil, "REDIS_URL=" .. q(bad))
    assert.are.equal(1, rc)
    assert.falsy(err:find("sX", 1, true), err)
    assert.falsy(err:find("p@", 1, true), err)
    host.sh("rm -rf " .. q(dir))
    srv.conn:call("CONFIG", "SET", "requirepass", "")
    srv:stop()
  end)
end)
