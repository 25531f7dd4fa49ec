-- Jobs that wait for a reply (luakiq.await; docs/redis.md, "Jobs that wait
-- for a reply") on a real Redis Cluster (3 masters with a replica each,
-- helpers.redis): a host's waiting jobs go through a slot migration of
-- their shard's and the queue's slots (replies by token and by key during
-- and after it) and a failover of their shard's master, manual or by
-- kill -9 (replies after it, a short wait timeout that still fires). Each reply is accepted once, on_reply
-- runs once per reply, the payloads pushed while an id waits run after its
-- reply (per-id order), nothing is lost.
local core = require "luakiq.core"
local json = require "luakiq.json"
local redis = require "helpers.redis"
local host = require "helpers.host"
local q = host.quote

-- Appends a line per event to FILE (outside Redis: a failover must not take
-- the record with it): "perform ID V", "token ID TOKEN" (await returned),
-- "reply ID N" (on_reply, the reply's n). A payload {v, await, key,
-- timeout} awaits with that key and timeout.
local WORKER = [[
local luakiq = require "luakiq"
local function log(s)
  local f = assert(io.open(%q, "a"))
  f:write(s, "\n")
  f:close()
end
return {
  shards_count = 6, batch_size = 5, max_retry_count = 1, retry_in = function() return 0 end,
  perform = function(batch)
    for id, pls in pairs(batch) do
      for _, p in ipairs(pls) do
        log("perform " .. id .. " " .. tostring(p.v))
        if p.await then
          local w = luakiq.await(id, { key = p.key, timeout = p.timeout })
          log("token " .. id .. " " .. w.token)
        end
      end
    end
  end,
  on_reply = function(id, reply, pls, call) log("reply " .. id .. " " .. tostring(reply.n)) end,
}]]

describe("jobs that wait for a reply on a Redis Cluster", function()
  local cl
  setup(function() cl = redis.cluster() end)
  teardown(function() cl:stop() end)
  before_each(function() cl:flush() end)

  local P0 = "luakiq:{A:0}:x" -- a key of shard 0's slot

  local function scriptdir()
    local dir = host.tmpdir()
    host.sh("mkdir -p " .. q(dir .. "/workers"))
    host.write(dir .. "/config.lua", "return { threads_per_node = 3, poll_interval = 0.2, redis_timeout = 2 }")
    host.write(dir .. "/workers/A.lua", WORKER:format(dir .. "/log"))
    return dir
  end
  -- The log's lines of id, without the id: {"perform 1", "token T", ...}.
  local function events(dir, id)
    local out = {}
    for line in (host.read(dir .. "/log") or ""):gmatch("[^\n]+") do
      local i = line:match("^%a+ (%S+) ")
      if i == id then out[#out + 1] = line:match("^(%a+) ") .. " " .. line:match("(%S+)$") end
    end
    return out
  end
  local function tokens(dir, id)
    local t = {}
    for _, e in ipairs(events(dir, id)) do t[#t + 1] = e:match("^token (%S+)$") end
    return t
  end
  -- n ids of shard 0 (in0) and n of other shards (out0).
  local function ids(n)
    local in0, out0 = {}, {}
    for i = 1, 1000 do
      local id = "j" .. i
      local t = core.crc32(id) % 6 == 0 and in0 or out0
      if #t < n then t[#t + 1] = id end
      if #in0 == n and #out0 == n then break end
    end
    return in0, out0
  end
  -- `luakiq reply` by token, or by key (key given): its exit code and output.
  local function reply_args(dir, n, key, token)
    local body = json.encode { n = n }
    if key then return "reply " .. q(dir) .. " A --key " .. q(key) .. " " .. q(body) end
    return "reply " .. q(dir) .. " A " .. q(token) .. " " .. q(body)
  end
  local function reply(dir, id, n, key)
    local rc, out, err = host.exec(reply_args(dir, n, key, tokens(dir, id)[1]), nil, "REDIS_URL=" .. cl.seeds)
    return rc, out .. err
  end
  -- Every id waits: its await returned, and stats count them all waiting.
  local function all_waiting(dir, all, p)
    host.eventually(function()
      for _, id in ipairs(all) do if #tokens(dir, id) == 0 then return false end end
      return host.stats(dir, "REDIS_URL=" .. cl.seeds).total.waiting == #all
    end, 20, "every job waits", function() return p:log() end)
  end
  -- Each id of ids: performed once, its reply handled once (n), then the
  -- payload pushed while it waited (v 2): nothing lost, nothing twice, in order.
  local function handled_in_order(dir, list, n, p)
    host.eventually(function()
      for _, id in ipairs(list) do if #events(dir, id) < 4 then return false end end
      return true
    end, 30, "every reply was handled and the held jobs ran", function() return p:log() end)
    core.sleep(0.5) -- (anything more would come now)
    for _, id in ipairs(list) do
      assert.are.same({ "perform 1", "token " .. tokens(dir, id)[1], "reply " .. n, "perform 2" }, events(dir, id), id)
    end
  end
  local function push(dir, list, payload)
    local jobs = {}
    for i, id in ipairs(list) do
      local pl = {}
      for k, v in pairs(payload) do pl[k] = v end
      if pl.key then pl.key = pl.key .. id end
      jobs[i] = { id = id, payload = pl }
    end
    host.enqueue(dir, "A", jobs, "REDIS_URL=" .. cl.seeds)
  end

  it("keeps every wait while its shard's slot migrates: replies by token and key during and after, once each, in order", function()
    local dir = scriptdir()
    local p = host.spawn("run " .. q(dir), "REDIS_URL=" .. cl.seeds)
    local in0, out0 = ids(6)
    -- the even ones of shard 0 wait with a key (replied to by it), the rest without
    local keyed = {}
    for i, id in ipairs(in0) do if i % 2 == 0 then keyed[id] = "k-" .. id end end
    local all = {}
    for _, id in ipairs(in0) do all[#all + 1] = id end
    for _, id in ipairs(out0) do all[#all + 1] = id end
    local jobs = {}
    for i, id in ipairs(all) do jobs[i] = { id = id, payload = { v = 1, await = true, key = keyed[id] } } end
    host.enqueue(dir, "A", jobs, "REDIS_URL=" .. cl.seeds)
    all_waiting(dir, all, p)
    push(dir, all, { v = 2 }) -- held until each reply is handled
    -- shard 0's slot and the queue's (its correlation keys, waitkey.lua)
    -- each to another master, one key per MIGRATE, 100 ms apart, as
    -- redis-cli --cluster reshard moves a slot
    local moving = {}
    for _, key in ipairs { P0, "luakiq:{A}:x" } do
      local m = { slot = core.key_slot(key), src = cl:node_of(key), key = key }
      for _, n in ipairs(cl:masters()) do if n ~= m.src then m.dst = n break end end
      local sid, did = m.src.conn:call("CLUSTER", "MYID"), m.dst.conn:call("CLUSTER", "MYID")
      assert.are.equal("OK", m.dst.conn:call("CLUSTER", "SETSLOT", m.slot, "IMPORTING", sid))
      assert.are.equal("OK", m.src.conn:call("CLUSTER", "SETSLOT", m.slot, "MIGRATING", did))
      m.did = did
      moving[#moving + 1] = m
    end
    -- during it: shard 0's first three ids (one by key) in the background
    -- (their calls wait for the slots), the other shards' ids at once
    local bg = {}
    for i = 1, 3 do
      local id = in0[i]
      bg[id] = host.spawn(reply_args(dir, 1, keyed[id], tokens(dir, id)[1]), "REDIS_URL=" .. cl.seeds)
    end
    local moved = 0
    while true do
      local any = false
      for _, m in ipairs(moving) do
        local k = m.src.conn:call("CLUSTER", "GETKEYSINSLOT", m.slot, 1)[1]
        if k then
          any = true
          assert.are.equal("OK", m.src.conn:call("MIGRATE", "127.0.0.1", m.dst.port, "", 0, 5000, "KEYS", k))
          moved = moved + 1
          if out0[moved] then
            local rc, out = reply(dir, out0[moved], 1)
            assert.are.equal(0, rc, out)
            assert.are.same({ accepted = true }, json.decode(out))
          end
          core.sleep(0.1)
        end
      end
      if not any then break end
    end
    -- the background replies waited for the slots: none answered yet
    for id, b in pairs(bg) do assert.is_true(b:alive(), id .. ": " .. b:log()) end
    for _, m in ipairs(moving) do
      for _, n in ipairs(cl:masters()) do assert.are.equal("OK", n.conn:call("CLUSTER", "SETSLOT", m.slot, "NODE", m.did)) end
      assert.are.equal(m.dst, cl:node_of(m.key))
    end
    assert.is_true(moved >= 6, moved .. " keys moved")
    for id, b in pairs(bg) do
      assert.are.equal(0, b:wait(15), b:log())
      assert.are.same({ accepted = true }, json.decode(b:log()), id)
    end
    -- after it: the rest, by token and by key
    for i = 4, #in0 do
      local rc, out = reply(dir, in0[i], 1, keyed[in0[i]])
      assert.are.equal(0, rc, out)
      assert.are.same({ accepted = true }, json.decode(out), in0[i])
    end
    for i = moved + 1, #out0 do
      local rc, out = reply(dir, out0[i], 1)
      assert.are.equal(0, rc, out)
    end
    -- a repeat is a duplicate, another body a conflict or stale (never a second reply)
    local rc, out = reply(dir, in0[1], 1)
    assert.is_true((rc == 0 and json.decode(out).duplicate == true) or (rc == 1 and out:find("STALE", 1, true) ~= nil),
      out)
    handled_in_order(dir, all, 1, p)
    rc, out = reply(dir, in0[2], 1, keyed[in0[2]])
    assert.are.equal(1, rc, out)
    assert.matches("STALE", out)
    local total = host.stats(dir, "REDIS_URL=" .. cl.seeds).total
    assert.are.same({ 0, 0, 0 }, { total.length, total.waiting, total.morgue_length })
    assert.is_true(p:alive(), p:log())
    assert.is_true(p:signal("TERM"))
    assert.are.equal(0, p:wait(10), p:log())
    cl:await_ok()
  end)

  -- Jobs wait (three of shard 0 and two of others, some by key, with
  -- payloads held behind them), then one of shard 0 with a 4 s reply_timeout;
  -- what they wrote reached the replica (WAIT), then failover(master,
  -- replica) makes the replica shard 0's master. The waits are the new
  -- master's, replies after it are accepted and handled once, in order; the
  -- 4 s wait times out after the failover into the retry path (performed
  -- and awaited again, a new token), then into the morgue.
  local function through_failover(failover)
    local dir = scriptdir()
    local p = host.spawn("run " .. q(dir), "REDIS_URL=" .. cl.seeds)
    local in0, out0 = ids(4)
    local keyed = { [in0[2]] = "k-" .. in0[2], [out0[2]] = "k-" .. out0[2] }
    local long = { in0[1], in0[2], in0[3], out0[1], out0[2] }
    local jobs = {}
    for i, id in ipairs(long) do jobs[i] = { id = id, payload = { v = 1, await = true, key = keyed[id] } } end
    host.enqueue(dir, "A", jobs, "REDIS_URL=" .. cl.seeds)
    all_waiting(dir, long, p)
    push(dir, long, { v = 2 })
    local short = in0[4]
    host.enqueue(dir, "A", { { id = short, payload = { v = 1, await = true, timeout = 4 } } }, "REDIS_URL=" .. cl.seeds)
    local all = { short }
    for _, id in ipairs(long) do all[#all + 1] = id end
    all_waiting(dir, all, p)
    local master = cl:node_of(P0)
    local replica
    for _, n in ipairs(cl.nodes) do
      local role = n ~= master and n.conn and n.conn:pcall("ROLE")
      if type(role) == "table" and role[1] == "slave" and tonumber(role[3]) == master.port then replica = n end
    end
    assert.is_not_nil(replica, "a replica of shard 0's master")
    assert.are.equal(1, master.conn:call("WAIT", 1, 1500))
    failover(master, replica)
    host.eventually(function() return replica.conn:call("ROLE")[1] == "master" end, 20, "the replica took over")
    -- the waits are the new master's; the short one has not timed out yet
    assert.are.equal(#in0, #replica.conn:call("HKEYS", "luakiq:{A:0}:waits"))
    assert.are.equal(1, #tokens(dir, short), "the 4 s wait timed out before the failover was over")
    for _, id in ipairs(long) do
      local rc, out = reply(dir, id, 7, keyed[id])
      assert.are.equal(0, rc, out)
      assert.are.same({ accepted = true }, json.decode(out), id)
    end
    handled_in_order(dir, long, 7, p)
    host.eventually(function() return host.stats(dir, "REDIS_URL=" .. cl.seeds).total.morgue_length == 1 end, 20,
      "the short wait timed out twice", function() return p:log() end)
    local ev = events(dir, short)
    assert.are.equal(4, #ev, table.concat(ev, "\n"))
    assert.are.same({ "perform 1", "perform 1" }, { ev[1], ev[3] })
    local tk = tokens(dir, short)
    assert.are_not.equal(tk[1], tk[2])
    local rc, out, err = host.exec("jobs " .. q(dir) .. " A morgue", nil, "REDIS_URL=" .. cl.seeds)
    assert.are.equal(0, rc, err)
    assert.matches("reply timeout after 4 s", out)
    local total = host.stats(dir, "REDIS_URL=" .. cl.seeds).total
    assert.are.same({ 0, 0 }, { total.length, total.waiting })
    assert.is_true(p:alive(), p:log())
    assert.is_true(p:signal("TERM"))
    assert.are.equal(0, p:wait(10), p:log())
    return master
  end

  it("keeps every wait through a manual failover of its shard's master; replies after it are accepted, deadlines fire", function()
    local old = through_failover(function(_, replica)
      assert.are.equal("OK", replica.conn:call("CLUSTER", "FAILOVER"))
    end)
    assert.are.equal("slave", old.conn:call("ROLE")[1])
    cl:await_ok()
  end)

  it("keeps every wait the replica had when its shard's master is killed and the replica promoted", function()
    local dead
    through_failover(function(master)
      dead = master.conn:call("CLUSTER", "MYID")
      host.sh("kill -9 " .. master.pid)
      master.pid, master.conn = nil, nil
    end)
    for _, n in ipairs(cl.nodes) do
      if n.conn then assert.are.equal("OK", n.conn:call("CLUSTER", "FORGET", dead)) end
    end
    cl:await_ok()
  end)
end)
