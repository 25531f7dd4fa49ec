-- Job priorities on a running host (DESIGN §6): one thread serving two
-- shards runs the jobs of the lowest priority number first, across its
-- shards and within each, while every id keeps its own order.
local json = require "luakiq.json"
local keys = require "luakiq.lib.keys"
local host = require "helpers.host"
local q = host.quote

local srv = host.fixture()

local WORKER = [[
local luakiq = require "luakiq"
return {
  shards_count = 2, batch_size = 1, fetch_size = 1,
  perform = function(batch)
    for id, payloads in pairs(batch) do
      for _, p in ipairs(payloads) do luakiq.redis.call("RPUSH", "t:ran", id .. "=" .. tostring(p)) end
    end
  end,
}
]]

describe("priority on a host", function()
  local box = host.dir_per_test { ["config.lua"] = "return { threads_per_node = 1, poll_interval = 0.2 }",
                                  ["workers/W.lua"] = WORKER }

  it("runs the lowest numbers first across the thread's shards; an id's payloads stay in order", function()
    local env = "REDIS_URL=" .. srv.url
    local in_shard = { [0] = {}, [1] = {} }
    for i = 1, 100 do table.insert(in_shard[keys.shard("j" .. i, 2)], "j" .. i) end
    local now = os.time()
    local jobs = {}
    -- shard 0: 6 old jobs of the default priority; shard 1: 3 newer urgent
    -- ones and 3 newer of priority 500 (after the default ones)
    for k = 1, 6 do jobs[#jobs + 1] = { id = in_shard[0][k], payload = "d", perform_in = now - 100 + k } end
    for k = 1, 3 do jobs[#jobs + 1] = { id = in_shard[1][k], payload = "u", perform_in = now - 10 + k, priority = 1 } end
    for k = 4, 6 do jobs[#jobs + 1] = { id = in_shard[1][k], payload = "l", perform_in = now - 200 + k, priority = 500 } end
    -- one id, three pushes of different priorities: one job (merged: the
    -- lowest priority), its payloads in score order
    local seq = in_shard[0][7]
    host.enqueue(box.dir, "W", jobs, env)
    for k, prio in ipairs { 300, 2, 100 } do
      host.enqueue(box.dir, "W", { { id = seq, payload = "s" .. k, score = now + k, perform_in = now - 5, priority = prio } }, env)
    end
    local _, out = host.exec("job " .. q(box.dir) .. " W " .. seq, nil, env)
    assert.are.equal(2, json.decode(out).priority)
    box.proc = host.spawn("run " .. q(box.dir), env)
    local ran = host.eventually(function()
      local l = srv.conn:call("LRANGE", "t:ran", 0, -1)
      return #l == 15 and l
    end, 15, "15 payloads ran")
    local kinds = {}
    for i, v in ipairs(ran) do kinds[i] = v:match("=(%a)") end
    -- priority 1 (shard 1), 2 (shard 0: the merged id), then the default
    -- ones (shard 0) before the 500s (shard 1), though these are the oldest
    assert.are.same({ "u", "u", "u", "s", "s", "s", "d", "d", "d", "d", "d", "d", "l", "l", "l" }, kinds)
    assert.are.same({ seq .. "=s1", seq .. "=s2", seq .. "=s3" }, { ran[4], ran[5], ran[6] })
    -- within a level, perform_in order
    for k = 1, 6 do assert.are.equal(in_shard[0][k] .. "=d", ran[6 + k]) end
    for k = 1, 3 do assert.are.equal(in_shard[1][k] .. "=u", ran[k]) end
  end)
end)
