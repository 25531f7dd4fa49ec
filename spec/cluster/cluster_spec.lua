-- luakiq on a Redis Cluster (docs/operations.md, "Redis Cluster"): a real
-- 3-master cluster with a replica each, made by redis-cli --cluster create on
-- free ports. Routing by slot (CRC16 as Redis computes it), a host and the
-- CLI from any node's URL or a seed list, bad URLs refused with one line,
-- and a host that follows its masters through a manual failover (MOVED) and
-- a master killed with its replica promoted.
local core = require "luakiq.core"
local json = require "luakiq.json"
local redis = require "helpers.redis"
local host = require "helpers.host"
local q = host.quote

-- Appends "id payload" per job to FILE (outside Redis: a failover must not
-- take the record with it), one perform at a time per shard.
local WORKER = [[
return {
  shards_count = 6, batch_size = 5,
  perform = function(batch)
    local f = assert(io.open(%q, "a"))
    for id, payloads in pairs(batch) do
      for _, p in ipairs(payloads) do f:write(id, " ", tostring(p), "\n") end
    end
    f:close()
  end,
}]]

describe("a Redis Cluster", function()
  local cl
  setup(function() cl = redis.cluster() end)
  teardown(function() cl:stop() end)
  before_each(function() cl:flush() end)

  local function scriptdir(extra)
    local dir = host.tmpdir()
    local files = {
      ["config.lua"] = "return { threads_per_node = 3, poll_interval = 0.2, redis_timeout = 2 }",
      ["workers/W.lua"] = WORKER:format(dir .. "/seen"),
    }
    for k, v in pairs(extra or {}) do files[k] = v end
    for name, text in pairs(files) do
      host.sh("mkdir -p " .. q((dir .. "/" .. name):match("^(.*)/")))
      host.write(dir .. "/" .. name, text)
    end
    return dir
  end
  local function seen(dir)
    local got = {}
    for line in (host.read(dir .. "/seen") or ""):gmatch("[^\n]+") do
      local id, p = line:match("^(%S+) (%S+)$")
      got[id] = got[id] or {}
      table.insert(got[id], tonumber(p))
    end
    return got
  end
  local function enqueue(dir, url, ids, from, to)
    local lines = {}
    for v = from, to do
      for id = 1, ids do lines[#lines + 1] = ('{"id":"%d","payload":%d,"score":%d}'):format(id, v, v) end
    end
    local rc, out, err = host.exec("enqueue " .. q(dir) .. " W", table.concat(lines, "\n"), "REDIS_URL=" .. url)
    assert.are.equal(0, rc, out .. err)
  end
  -- every id saw every payload from..to at least once, in order (a re-run
  -- after a failover may repeat a tail, never go back past one)
  local function all_ran(dir, ids, to)
    local got = seen(dir)
    for id = 1, ids do
      local s = got[tostring(id)]
      if not s then return false end
      local want = 1
      for _, p in ipairs(s) do if p == want then want = want + 1 end end
      if want <= to then return false end
    end
    return true
  end

  it("routes every key to its slot as Redis computes it", function()
    local node = cl.nodes[1].conn
    local keys = { "", "a", "{", "}", "{}", "{}x", "x{}", "{a}", "a{b}c{d}", "{{a}}", "}{a}", "luakiq:{Q:3}:queue",
                   "123456789", "\0\255{\1}" }
    math.randomseed(7)
    for _ = 1, 300 do
      local t = {}
      for i = 1, math.random(0, 24) do
        t[i] = string.char(({ 123, 125, math.random(0, 255), math.random(97, 100) })[math.random(1, 4)])
      end
      keys[#keys + 1] = table.concat(t)
    end
    for _, k in ipairs(keys) do
      assert.are.equal(node:call("CLUSTER", "KEYSLOT", k), core.key_slot(k), ("%q"):format(k))
    end
    assert.is_true(cl.conn:cluster())
  end)

  it("runs a host and the CLI from one node's URL or a seed list; shards live on every master", function()
    -- (a long poll_interval: only a wake-up makes a new job run at once)
    local dir = scriptdir { ["config.lua"] = "return { threads_per_node = 3, poll_interval = 30 }" }
    enqueue(dir, cl.seeds, 60, 1, 3)
    local rc, out, err = host.exec("stats " .. q(dir), nil, "REDIS_URL=" .. cl.url)
    assert.are.equal(0, rc, err)
    assert.are.equal(60, json.decode(out).total.length)
    -- the shards' keys are spread over the three masters
    local holders = 0
    for _, m in ipairs(cl:masters()) do
      if #m.conn:call("KEYS", "luakiq:{W:*") > 0 then holders = holders + 1 end
    end
    assert.are.equal(3, holders)
    -- a listing and a job read fan out / route like anything else
    rc, out, err = host.exec("jobs " .. q(dir) .. " W queue --limit 1000", nil, "REDIS_URL=" .. cl.url)
    assert.are.equal(0, rc, err)
    assert.are.equal(60, host.count(out, '"id":'))
    local p = host.spawn("run " .. q(dir) .. " --web 127.0.0.1:0", "REDIS_URL=" .. cl.seeds)
    host.eventually(function() return all_ran(dir, 60, 3) end, 20, "every job ran")
    -- wake-ups cross the cluster (a PUBLISH reaches every node)
    enqueue(dir, cl.url, 60, 4, 4)
    host.eventually(function() return all_ran(dir, 60, 4) end, 5, "the new jobs ran")
    -- by sharded Pub/Sub: SPUBLISH in the shard's slot, no PUBLISH broadcast
    local spub, pub = 0, 0
    for _, m in ipairs(cl:masters()) do
      local info = m.conn:call("INFO", "commandstats")
      spub = spub + tonumber(info:match("cmdstat_spublish:calls=(%d+)") or 0)
      pub = pub + tonumber(info:match("cmdstat_publish:calls=(%d+)") or 0)
    end
    assert.is_true(spub >= 6, "SPUBLISH calls: " .. spub)
    assert.are.equal(0, pub)
    rc, out, err = host.exec("stats " .. q(dir), nil, "REDIS_URL=" .. cl.url)
    assert.are.equal(0, rc, err)
    local total = json.decode(out).total
    assert.are.same({ 0, 0 }, { total.length, total.morgue_length })
    -- the dashboard's Redis figures are every master's
    local port = p:log():match("listening on http://127%.0%.0%.1:(%d+)/")
    local body = host.capture("curl -s http://127.0.0.1:" .. port .. "/api/web/dashboard")
    local info = json.decode(body).redis_info
    assert.is_true(info.cluster, body)
    assert.are.equal(3, #info.nodes)
    local clients = 0
    for _, n in ipairs(info.nodes) do
      assert.matches("^127%.0%.0%.1:%d+$", n.node)
      clients = clients + n.connected_clients
    end
    assert.are.equal(clients, info.connected_clients)
    assert.is_true(p:signal("TERM"))
    assert.are.equal(0, p:wait(10), p:log())
    assert.is_nil(p:log():find("MOVED", 1, true), p:log())
  end)

  it("refuses a db other than 0 and seeds that are not a cluster: one line, exit 2", function()
    local dir = scriptdir()
    local rc, out, err = host.exec("stats " .. q(dir), nil, "REDIS_URL=" .. cl.url:gsub("/0$", "/2"))
    assert.are.equal(2, rc, out)
    assert.matches("^luakiq: bad Redis URL '.*': 127%.0%.0%.1:%d+ is a Redis Cluster node, and a cluster has only db 0\n$", err)
    -- `run` too, at once (it retries an unreachable Redis for redis_retry, never a bad URL)
    local t0 = core.now()
    rc, out, err = host.exec("run " .. q(dir), nil, "REDIS_URL=" .. cl.url:gsub("/0$", "/2"))
    assert.are.equal(2, rc, out)
    assert.matches("luakiq: bad Redis URL '.*': 127%.0%.0%.1:%d+ is a Redis Cluster node, and a cluster has only db 0\n$", err)
    assert.is_true(core.now() - t0 < 5)
    local single = redis.start { extra = "" }
    rc, out, err = host.exec("stats " .. q(dir), nil,
      ("REDIS_URL=redis://127.0.0.1:%d,127.0.0.1:%d"):format(single.port, cl.nodes[1].port))
    single:stop()
    assert.are.equal(2, rc, out)
    assert.matches("several hosts name the seed nodes of a Redis Cluster, but 127%.0%.0%.1:%d+ is not in cluster mode\n$", err)
    assert.are.equal(1, select(2, err:gsub("\n", "")))
    rc, out, err = host.exec("stats " .. q(dir), nil, "REDIS_URL=redis://127.0.0.1:7000,127.0.0.1:x")
    assert.are.equal(2, rc, out)
    assert.matches("^luakiq: bad Redis URL 'redis://127.0.0.1:7000,127.0.0.1:x'", err)
    -- a seed that is down: the next one answers
    rc, out, err = host.exec("stats " .. q(dir), nil,
      ("REDIS_URL=redis://127.0.0.1:%d,127.0.0.1:%d"):format(core.free_port(), cl.nodes[2].port))
    assert.are.equal(0, rc, err)
    assert.are.equal(0, json.decode(out).total.length)
  end)

  it("follows ASK while a slot migrates and MOVED after, for keys of that slot", function()
    -- two keys of one slot ({m}), one moved to the target before the other
    local slot = core.key_slot("{m}")
    local source = cl:node_of("{m}")
    local target
    for _, m in ipairs(cl:masters()) do if m ~= source then target = m break end end
    local sid, tid = source.conn:call("CLUSTER", "MYID"), target.conn:call("CLUSTER", "MYID")
    cl.conn:call("SET", "{m}a", "1")
    cl.conn:call("SET", "{m}b", "2")
    assert.are.equal("OK", target.conn:call("CLUSTER", "SETSLOT", slot, "IMPORTING", sid))
    assert.are.equal("OK", source.conn:call("CLUSTER", "SETSLOT", slot, "MIGRATING", tid))
    assert.are.equal("OK", source.conn:call("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", "{m}a"))
    -- {m}a is on the target now: the source answers ASK, followed with ASKING
    assert.are.same({ "1", "2" }, { cl.conn:call("GET", "{m}a"), cl.conn:call("GET", "{m}b") })
    local r = cl.conn:pipeline { { "GET", "{m}b" }, { "GET", "{m}a" }, { "INCR", "{m}a" } }
    assert.are.same({ "2", "1", 2 }, r)
    assert.are.equal("OK", source.conn:call("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", "{m}b"))
    for _, m in ipairs(cl:masters()) do
      assert.are.equal("OK", m.conn:call("CLUSTER", "SETSLOT", slot, "NODE", tid))
    end
    -- the slot is the target's: MOVED, then the map knows it
    assert.are.same({ "2", "2" }, { cl.conn:call("GET", "{m}a"), cl.conn:call("GET", "{m}b") })
    assert.are.equal("OK", cl.conn:call("SET", "{m}c", "3"))
    assert.are.equal("3", target.conn:call("GET", "{m}c"))
    cl:await_ok()
  end)

  -- The master of shard 0's slot and its replica.
  local function shard0_pair()
    local master = cl:node_of("luakiq:{W:0}:x")
    local id = master.conn:call("CLUSTER", "MYID")
    for _, n in ipairs(cl.nodes) do
      local role = n.conn and n.conn:pcall("ROLE")
      if n ~= master and type(role) == "table" and role[1] == "slave" and tonumber(role[3]) == master.port then
        return master, n, id
      end
    end
    error("no replica of " .. master.port .. " (" .. id .. ")")
  end

  -- (poll_interval 30 s: the jobs enqueued after the failover run at once
  -- only if the sharded subscriber followed the shard's channel to its new
  -- master)
  local LONG_POLL = { ["config.lua"] = "return { threads_per_node = 3, poll_interval = 30, redis_timeout = 2 }" }

  -- After a failover under host p: jobs 1-5 of 30 ids were enqueued before
  -- it; 6-10 now all run, then 11 on a wake-up; p stops cleanly. (The seeds
  -- skip a killed node.)
  local function after_failover(dir, p)
    enqueue(dir, cl.seeds, 30, 6, 10)
    host.eventually(function() return all_ran(dir, 30, 10) end, 10, "every job ran")
    enqueue(dir, cl.seeds, 30, 11, 11)
    host.eventually(function() return all_ran(dir, 30, 11) end, 5, "the jobs after the failover ran at once")
    assert.is_true(p:alive(), p:log())
    assert.is_true(p:signal("TERM"))
    assert.are.equal(0, p:wait(10), p:log())
  end

  it("follows a manual failover (its old master answers MOVED): nothing lost, order kept", function()
    local dir = scriptdir(LONG_POLL)
    local p = host.spawn("run " .. q(dir), "REDIS_URL=" .. cl.url)
    enqueue(dir, cl.url, 30, 1, 5)
    local master, replica = shard0_pair()
    assert.are.equal("OK", replica.conn:call("CLUSTER", "FAILOVER"))
    host.eventually(function()
      local role = replica.conn:call("ROLE")
      return role[1] == "master"
    end, 15, "the replica took over")
    after_failover(dir, p)
    assert.are.equal("slave", master.conn:call("ROLE")[1])
    cl:await_ok()
  end)

  it("follows a master killed and its replica promoted; jobs the replica had are not lost", function()
    local dir = scriptdir(LONG_POLL)
    local p = host.spawn("run " .. q(dir), "REDIS_URL=" .. cl.seeds)
    enqueue(dir, cl.url, 30, 1, 5)
    local master, replica = shard0_pair()
    -- what was written before the kill reached the replica (WAIT): it must survive
    assert.are.equal(1, master.conn:call("WAIT", 1, 1500))
    local dead = master.conn:call("CLUSTER", "MYID")
    host.sh("kill -9 " .. master.pid)
    master.pid, master.conn = nil, nil
    host.eventually(function() return replica.conn:call("ROLE")[1] == "master" end, 20, "the replica was promoted")
    after_failover(dir, p)
    -- the tests after this one reshard with redis-cli, which will not work
    -- with a node it cannot reach in the table: every node forgets it
    for _, n in ipairs(cl.nodes) do
      if n.conn then assert.are.equal("OK", n.conn:call("CLUSTER", "FORGET", dead)) end
    end
    cl:await_ok()
    local rc, out, err = host.exec("stats " .. q(dir), nil, "REDIS_URL=" .. cl.seeds)
    assert.are.equal(0, rc, err)
    assert.are.equal(0, json.decode(out).total.length)
  end)

  -- Slots moved by redis-cli --cluster reshard while a host of 5 threads
  -- works through a stream: every script call on a cluster declares a guard
  -- key that never exists (host/cluster.h, CLUSTER_GUARD), so while a slot
  -- migrates its calls get TRYAGAIN and wait; they never run with the
  -- shard's keys split between two nodes.
  it("keeps every job and the order per id while redis-cli --cluster reshard moves the queue's slots", function()
    local dir = scriptdir { ["config.lua"] = "return { threads_per_node = 5, poll_interval = 0.2, redis_timeout = 5 }" }
    -- 30 ms a call: the shards keep a backlog (and keys to move) meanwhile
    host.write(dir .. "/workers/W.lua", WORKER:format(dir .. "/seen"):gsub("f:close%(%)",
      'f:close() require("luakiq.core").sleep(0.03)'))
    local p = host.spawn("run " .. q(dir), "REDIS_URL=" .. cl.seeds)
    local ids, v = 120, 0
    local function push(rounds)
      enqueue(dir, cl.seeds, ids, v + 1, v + rounds)
      v = v + rounds
    end
    push(20) -- a backlog in every shard
    -- Jobs of one payload each, under ids of their own (they may be pushed
    -- in any order): the JSON lines of n ids named prefix..1..n.
    local singles = {}
    local function single_jobs(prefix, n)
      local lines = {}
      for i = 1, n do
        singles[#singles + 1] = prefix .. i
        lines[i] = ('{"id":"%s%d","payload":1}'):format(prefix, i)
      end
      return table.concat(lines, "\n")
    end
    -- all slots of shard 0's master to the next master, then half of that
    -- one's to the third, while the stream goes on
    local function reshard(from, to, slots)
      -- (redis-cli refuses while a node has not heard of the last move yet)
      cl:await_ok()
      local r = host.spawn_cmd(("redis-cli --cluster reshard 127.0.0.1:%d --cluster-from %s --cluster-to %s " ..
        "--cluster-slots %d --cluster-yes"):format(from.port, from.conn:call("CLUSTER", "MYID"),
        to.conn:call("CLUSTER", "MYID"), slots))
      local moves = 0
      while r:alive() do
        push(2)
        moves = moves + 1
      end
      assert.are.equal(0, r:wait(5), r:log())
      assert.is_nil(r:log():find("ERR", 1, true), r:log())
      return moves
    end
    local a = cl:node_of("luakiq:{W:0}:x")
    local others = {}
    for _, m in ipairs(cl:masters()) do if m ~= a then others[#others + 1] = m end end
    local pushes = reshard(a, others[1], 5461)
    assert.is_true(pushes >= 2, "the stream went on during the reshard (" .. pushes .. " pushes)")
    assert.are.equal(others[1], cl:node_of("luakiq:{W:0}:x"))
    reshard(others[1], others[2], 5000)
    -- shard 0's slot once more, one key per MIGRATE and 100 ms apart, with
    -- pushes in the background (they wait for it too); first a backlog of
    -- 600 ids. (Layout 2 keeps a fixed set of keys per shard, docs/redis.md:
    -- the 600 jobs are members of a few keys, so the slot moves in ~10
    -- MIGRATEs, and a background push starts at every other one.)
    local rc, out, err = host.exec("enqueue " .. q(dir) .. " W", single_jobs("s", 600), "REDIS_URL=" .. cl.seeds)
    assert.are.equal(0, rc, out .. err)
    local slot, src = core.key_slot("luakiq:{W:0}:x"), cl:node_of("luakiq:{W:0}:x")
    local dst = src == others[1] and others[2] or others[1]
    local sid, did = src.conn:call("CLUSTER", "MYID"), dst.conn:call("CLUSTER", "MYID")
    assert.are.equal("OK", dst.conn:call("CLUSTER", "SETSLOT", slot, "IMPORTING", sid))
    assert.are.equal("OK", src.conn:call("CLUSTER", "SETSLOT", slot, "MIGRATING", did))
    local bg, moved = {}, 0
    while true do
      local k = src.conn:call("CLUSTER", "GETKEYSINSLOT", slot, 1)[1]
      if not k then break end
      assert.are.equal("OK", src.conn:call("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", k))
      moved = moved + 1
      if moved % 2 == 1 then
        local b = #bg + 1
        host.write(dir .. "/bg" .. b, single_jobs("b" .. b .. "-", ids))
        bg[b] = host.spawn("enqueue " .. q(dir) .. " W " .. q(dir .. "/bg" .. b), "REDIS_URL=" .. cl.seeds)
      end
      core.sleep(0.1)
    end
    for _, m in ipairs(cl:masters()) do assert.are.equal("OK", m.conn:call("CLUSTER", "SETSLOT", slot, "NODE", did)) end
    assert.is_true(moved >= 5 and #bg >= 3, moved .. " keys moved, " .. #bg .. " pushes meanwhile")
    for _, b in ipairs(bg) do assert.are.equal(0, b:wait(15), b:log()) end
    push(5)
    host.eventually(function() return all_ran(dir, ids, v) end, 60, "every job ran", function()
      return p:log()
    end)
    -- each payload once, in order: no call ran on half a shard (that would
    -- lose, repeat or reorder jobs)
    host.eventually(function()
      local got = seen(dir)
      for _, id in ipairs(singles) do if not got[id] then return false end end
      return true
    end, 60, "every job of the backlog and of the background pushes ran")
    local got = seen(dir)
    for id = 1, ids do
      local want = {}
      for x = 1, v do want[x] = x end
      assert.are.same(want, got[tostring(id)], "id " .. id)
    end
    for _, id in ipairs(singles) do assert.are.same({ 1 }, got[id], id) end
    assert.is_nil(p:log():find("non local key", 1, true), p:log())
    assert.is_true(p:alive(), p:log())
    assert.is_true(p:signal("TERM"))
    assert.are.equal(0, p:wait(10), p:log())
    cl:await_ok()
    assert.is_true(host.sh("redis-cli --cluster check 127.0.0.1:" .. a.port .. " >/dev/null 2>&1"))
  end)

  -- Wake-ups on a cluster come by sharded Pub/Sub, a channel per shard: an
  -- elastic host subscribes the channels of shards a reshard added while it
  -- runs (poll_interval 30 s: only a wake-up runs the jobs at once).
  it("an elastic host hears the wake-ups of shards a reshard added while it runs", function()
    -- (an elastic thread also looks at its shards every beat, 2 s here:
    -- without the wake-up a job waits 1 s on average)
    local dir = scriptdir {
      ["config.lua"] = "return { threads_per_node = 2, poll_interval = 30, lease_ttl = 60, splitter = 'elastic', " ..
        "redis_timeout = 2 }",
    }
    local worker = host.read(dir .. "/workers/W.lua")
    -- each line: id, the payload (its enqueue time), the time it ran
    worker = worker:gsub('f:write%(id, " ", tostring%(p%), "\\n"%)',
      'f:write(id, " ", tostring(p), " ", string.format("%%.6f", require("luakiq.core").now()), "\\n")')
    assert(worker:find("core\").now()", 1, true), "the worker writes the time")
    host.write(dir .. "/workers/W.lua", (worker:gsub("shards_count = 6", "shards_count = 2")))
    local p = host.spawn("run " .. q(dir), "REDIS_URL=" .. cl.url)
    -- reshard refuses a queue no host has registered yet: wait for the host
    local reg = cl:node_of("luakiq:queues").conn
    host.eventually(function() return reg:call("HGET", "luakiq:queues", "W") == "2" end, 10,
      "the host registered W", function() return p:log() end)
    local rc, out, err = host.exec("reshard " .. q(dir) .. " W 6", nil, "REDIS_URL=" .. cl.url)
    assert.are.equal(0, rc, out .. err)
    host.write(dir .. "/workers/W.lua", worker) -- 6 shards, for the enqueue
    host.eventually(function() return p:log():find("takes its share of the new ones", 1, true) end, 10,
      "the host followed the reshard", function() return p:log() end)
    core.sleep(2.5) -- a beat: the new channels are subscribed
    -- one job at a time, each in a shard the reshard added
    local lat = {}
    for i = 1, 8 do
      local id
      repeat id = "n" .. math.random(1e9) until core.crc32(id) % 6 >= 2
      local t0 = core.now()
      rc, out, err = host.exec("enqueue " .. q(dir) .. " W", ('{"id":"%s","payload":%.6f}'):format(id, t0),
        "REDIS_URL=" .. cl.url)
      assert.are.equal(0, rc, out .. err)
      local line = host.eventually(function() return (host.read(dir .. "/seen") or ""):match(id .. " %S+ (%S+)") end,
        5, "job " .. id .. " ran")
      lat[i] = tonumber(line) - t0
    end
    table.sort(lat)
    assert.is_true(lat[4] < 0.5, "median enqueue -> perform " .. lat[4] .. " s (all: " .. table.concat(lat, ", ") .. ")")
    assert.is_true(p:signal("TERM"))
    assert.are.equal(0, p:wait(10), p:log())
  end)
end)
