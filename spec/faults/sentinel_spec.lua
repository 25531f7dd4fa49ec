-- Sentinel (DESIGN §7, issue "Beyond one Redis"): a host given a
-- redis+sentinel:// URL follows a failover on every connection: the worker
-- threads, the main thread, the wake-up subscriber, the web API and the CLI.
-- 1 master, 1 replica, 3 sentinels, all private (free ports, stopped by pid).
local core = require "luakiq.core"
local json = require "luakiq.json"
local redis = require "helpers.redis"
local host = require "helpers.host"
local q = host.quote

local WORKER = [[
local luakiq = require "luakiq"
return { shards_count = 2, perform = function(batch)
  for id in pairs(batch) do luakiq.redis.call("RPUSH", "t:ran", id) end
end }]]

local function replication(conn, field)
  return (conn:call("INFO", "replication"):match(field .. ":([^\r\n]*)"))
end

describe("Sentinel", function()
  it("after the master dies, workers, wake-ups, the web API and the CLI go on with the promoted replica", function()
    local master, replica = redis.start(), redis.start()
    replica.conn:call("REPLICAOF", "127.0.0.1", tostring(master.port))
    host.eventually(function() return replication(replica.conn, "master_link_status") == "up" end, 10, "replica in sync")
    local sentinels = {}
    for i = 1, 3 do sentinels[i] = redis.sentinel(master.port, "m") end
    -- every sentinel knows the replica and the two others (hello messages, ~2 s)
    host.eventually(function()
      for _, s in ipairs(sentinels) do
        if #s.conn:call("SENTINEL", "replicas", "m") < 1 or #s.conn:call("SENTINEL", "sentinels", "m") < 2 then
          return false
        end
      end
      return true
    end, 20, "sentinels see each other and the replica")

    local list = {}
    for i, s in ipairs(sentinels) do list[i] = "127.0.0.1:" .. s.port end
    local env = "REDIS_URL=" .. q("redis+sentinel://" .. table.concat(list, ",") .. "/m/0")
    local dir = host.scriptdir { ["config.lua"] = "return { threads_per_node = 2, poll_interval = 30 }",
                                 ["workers/W.lua"] = WORKER }
    local port = core.free_port()
    local p = host.spawn("run " .. q(dir) .. " --web 127.0.0.1:" .. port, env)
    host.eventually(function() return host.capture("curl -s http://127.0.0.1:" .. port .. "/api/v1/stats") ~= "" end,
      10, "the web API")
    local function enqueue(prefix)
      local lines = {}
      for i = 1, 20 do lines[i] = '{"id":"' .. prefix .. i .. '"}' end
      return host.exec("enqueue " .. q(dir) .. " W", table.concat(lines, "\n"), env)
    end
    local rc, _, err = enqueue("a")
    assert.are.equal(0, rc, err)
    host.eventually(function() return master.conn:call("LLEN", "t:ran") == 20 end, 10, "20 jobs ran on the master")
    assert.are.equal(1, master.conn:call("WAIT", 1, 5000)) -- the replica has them

    -- the master dies; the sentinels promote the replica
    host.sh("kill -9 " .. master.pid)
    master.conn:close()
    master.conn, master.pid = nil, nil
    host.eventually(function()
      local r = sentinels[1].conn:call("SENTINEL", "get-master-addr-by-name", "m")
      if tonumber(r[2]) ~= replica.port then return false end
      -- the promotion kills the replica's clients (CLIENT KILL TYPE normal): a new connection
      replica.conn:close()
      replica.conn = assert(core.connect(replica.url, 2))
      return replication(replica.conn, "role") == "master"
    end, 30, "the replica promoted")
    core.sleep(3) -- the host's connections find out and reconnect

    -- the CLI resolves the new master; poll_interval is 30 s, so these run at
    -- once only if the wake-up subscriber followed too
    rc, _, err = enqueue("b")
    assert.are.equal(0, rc, err)
    host.eventually(function() return replica.conn:call("LLEN", "t:ran") == 40 end, 10, "20 more jobs ran on the new master")
    local ran = {}
    for _, id in ipairs(replica.conn:call("LRANGE", "t:ran", 0, -1)) do ran[id] = (ran[id] or 0) + 1 end
    for _, prefix in ipairs { "a", "b" } do
      for i = 1, 20 do assert.are.equal(1, ran[prefix .. i], prefix .. i .. " ran once") end
    end
    local body = host.capture("curl -s http://127.0.0.1:" .. port .. "/api/v1/stats")
    local stats = json.decode(body)
    assert.truthy(stats.total, body .. "\n" .. p:log())
    assert.are.equal(0, stats.total.length)
    local rc2, out = host.exec("stats " .. q(dir), nil, env)
    assert.are.equal(0, rc2)
    assert.are.equal(0, json.decode(out).total.length)
    p:kill()
    host.sh("rm -rf " .. q(dir))
    for _, s in ipairs(sentinels) do s:stop() end
    replica:stop()
    master:stop()
  end)

  it("a malformed sentinel URL is exit 2, no sentinel answering is exit 1, each one line without the password", function()
    local dir = host.scriptdir { ["workers/W.lua"] = WORKER }
    local rc, _, err = host.exec("stats " .. q(dir), nil, "REDIS_URL=" .. q("redis+sentinel://:pw@127.0.0.1:1"))
    assert.are.equal(2, rc)
    assert.truthy(err:find("bad Redis URL 'redis+sentinel://***@127.0.0.1:1'", 1, true), err)
    local port = core.free_port() -- nobody listens there
    rc, _, err = host.exec("stats " .. q(dir), nil, "REDIS_URL=" .. q("redis+sentinel://:pw@127.0.0.1:" .. port .. "/m"))
    host.sh("rm -rf " .. q(dir))
    assert.are.equal(1, rc)
    assert.truthy(err:find("no Sentinel told where master 'm' is (127.0.0.1:" .. port .. ": ", 1, true), err)
    assert.are.equal(1, select(2, err:gsub("\n", "")), err)
    assert.falsy(err:find("pw", 1, true), err)
  end)
end)
