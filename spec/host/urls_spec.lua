-- The one URL redactor (host/url.c url_redact, core.redact_url,
-- luakiq.lib.runtime.redact): one case per URL form, then where URLs are shown,
-- tried as a new user would (the CLI's errors, the dashboard's JSON, a
-- password with an unencoded '@'), against real redis-servers.
local core = require "luakiq.core"
local json = require "luakiq.json"
local runtime = require "luakiq.lib.runtime"
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

  -- Whatever is wrong with a URL, its error shows no piece of a password:
  -- an unencoded '#' or '?' in the password (the parse sees no userinfo),
  -- a ';' between parameters, PASSWORD= in capitals, a forgotten "@host".
  it("a URL that does not parse never shows its password, whatever the mistake (exit 2, one line)", function()
    local dir = scriptdir()
    local urls = {
      "redis://:s3#cret@127.0.0.1:6379/0", "redis://u:s3?cret@127.0.0.1/0", "redis://u:s3#cret@127.0.0.1",
      "redis+sentinel://:s3#cret@127.0.0.1:26379/m", "redis+sentinel://u:s3?cret@127.0.0.1/m",
      "unix:///tmp/r.sock?db=0;password=s3cret", "unix:///tmp/r.sock?PASSWORD=s3cret",
      "unix:///tmp/r.sock?db=x;password=s3cret", "unix:///tmp/r.sock?s3cret", "redis://127.0.0.1/0#s3cret",
      "redis://:s3cret", "redis:/:s3cret@127.0.0.1", "redis//u:s3cret@127.0.0.1",
    }
    for _, url in ipairs(urls) do
      local rc, _, err = host.exec("stats " .. q(dir), nil, "REDIS_URL=" .. q(url))
      assert.are.equal(2, rc, url .. ": " .. err)
      assert.truthy(err:find("bad Redis URL", 1, true), err)
      assert.is_true(host.one_line(err), err)
      for _, piece in ipairs { "s3", "cret" } do assert.falsy(err:find(piece, 1, true), url .. ": " .. err) end
    end
    host.sh("rm -rf " .. q(dir))
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

  -- (on a cluster, requirepass would cut the replicas and the spec's own node
  -- connections off: one server only)
  local single = redis.on_cluster() and pending or it
  single("an ACL user (redis://user:password@host) works on every connection kind: CLI, workers, wake-ups, web", function()
    local srv = redis.start()
    -- a user allowed only luakiq's keys and channels; the default user needs
    -- a password nobody here sends (the spec's own connection stays in)
    srv.conn:call("ACL", "SETUSER", "app", "on", ">s3cret", "~luakiq:*", "&luakiq:*", "+@all")
    srv.conn:call("CONFIG", "SET", "requirepass", "not-used")
    local dir = host.scriptdir {
      ["config.lua"] = "return { threads_per_node = 2, poll_interval = 30 }",
      ["workers/W.lua"] = [[
local luakiq = require "luakiq"
return { shards_count = 2, perform = function(batch)
  for id in pairs(batch) do luakiq.redis.call("RPUSH", "luakiq:t:ran", id) end
end }]],
    }
    local url = "redis://app:s3cret@127.0.0.1:" .. srv.port .. "/0"
    local env = "REDIS_URL=" .. q(url)
    local port = core.free_port()
    local p = host.spawn("run " .. q(dir) .. " --web 127.0.0.1:" .. port, env)
    host.eventually(function() return host.capture("curl -s http://127.0.0.1:" .. port .. "/api/v1/stats") ~= "" end,
      10, "the web API")
    core.sleep(0.5) -- the threads subscribed
    -- poll_interval is 30 s: the jobs run at once only if the push's wake-up
    -- reached the threads through the ACL user's subscriber connection
    local rc, _, err = host.exec("enqueue " .. q(dir) .. " W", '{"id":"a"}\n{"id":"b"}\n{"id":"c"}', env)
    assert.are.equal(0, rc, err)
    host.eventually(function() return srv.conn:call("LLEN", "luakiq:t:ran") == 3 end, 5, "3 jobs ran on a wake-up")
    local stats = json.decode(host.capture("curl -s http://127.0.0.1:" .. port .. "/api/v1/stats"))
    assert.are.equal(0, stats.total.length)
    p:kill()
    assert.falsy(p:log():find("s3cret", 1, true), p:log())
    -- a wrong password for the user: one line naming the host, exit 1
    local bad = "REDIS_URL=" .. q("redis://app:wrong@127.0.0.1:" .. srv.port .. "/0")
    rc, _, err = host.exec("stats " .. q(dir), nil, bad)
    assert.are.equal(1, rc)
    assert.truthy(err:find("Redis at 127.0.0.1:" .. srv.port .. " refused set-up: WRONGPASS", 1, true), err)
    assert.falsy(err:find("wrong", 1, true) and not err:find("WRONGPASS", 1, true), err)
    host.sh("rm -rf " .. q(dir))
    srv.conn:call("CONFIG", "SET", "requirepass", "")
    srv:stop()
  end)
end)
