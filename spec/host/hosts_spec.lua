-- The running hosts (issue 15, item 5): every host beats every 2 s with what
-- it runs; `luakiq hosts`, GET /api/v1/hosts and the dashboard list them; a
-- host killed with -9 is gone within the 10 s timeout, one that stops is gone
-- at once. Real hosts, a real Redis.
local core = require "luakiq.core"
local json = require "luakiq.json"
local host = require "helpers.host"
local web = require "web.support"
local q = host.quote

local srv = host.fixture()

-- The job "long" waits in luakiq.sleep until t:go is set (a call parked in I/O).
local WORKER = [[
local luakiq = require "luakiq"
return {
  shards_count = 3, batch_size = 1,
  perform = function(batch)
    if batch.long then
      while not luakiq.redis.call("GET", "t:go") do luakiq.sleep(0.05) end
    end
  end,
}
]]

local function list(dir)
  local rc, out, err = host.exec("hosts " .. q(dir), nil, "REDIS_URL=" .. srv.url)
  assert.are.equal(0, rc, err)
  local hosts = {}
  for line in out:gmatch("[^\n]+") do local h = json.decode(line) hosts[h.pid] = h end
  return hosts
end

describe("hosts", function()
  local dir, procs = nil, {}
  before_each(function()
    dir = host.scriptdir { ["config.lua"] = "return { threads_per_node = 2, poll_interval = 0.2 }",
                           ["workers/W.lua"] = WORKER }
  end)
  host.stop_after_each(function() return procs, dir end)

  it("lists each running host with its threads, shards and calls; drops a killed one within 10 s", function()
    local port = core.free_port()
    procs[1] = host.spawn("run " .. q(dir) .. " --web 127.0.0.1:" .. port, "REDIS_URL=" .. srv.url)
    procs[2] = host.spawn("run " .. q(dir) .. " --threads 1", "REDIS_URL=" .. srv.url)
    local a, b = procs[1].pid, procs[2].pid
    local hosts = host.eventually(function()
      local l = list(dir)
      return l[a] and l[b] and l
    end, 10, "both hosts listed")
    assert.are.equal(2, #hosts[a].threads)
    assert.are.equal(1, #hosts[b].threads)
    assert.are.equal("127.0.0.1:" .. port, hosts[a].web)
    assert.are.equal(core.hostname(), hosts[a].hostname)
    assert.are.equal(require("luakiq").version, hosts[a].version)
    assert.is_true(hosts[a].seen < 3)
    -- the splitter's plan: all 3 shards over each host's threads
    local function shards(h)
      local s = {}
      for _, t in ipairs(h.threads) do for _, x in ipairs(t.shards) do s[#s + 1] = x.worker .. x.shard end end
      table.sort(s)
      return table.concat(s, ",")
    end
    assert.are.equal("W0,W1,W2", shards(hosts[a]))
    assert.are.equal("W0,W1,W2", shards(hosts[b]))
    -- a call in flight shows on the host that runs it, with its age; once
    -- the worker has parked in luakiq.sleep, as waiting (a beat taken
    -- between the call's start and its sleep lists it running, not waiting)
    host.enqueue(dir, "W", { { id = "long" } }, "REDIS_URL=" .. srv.url)
    local shard = core.crc32("long") % 3
    local found = host.eventually(function()
      for pid, h in pairs(list(dir)) do
        for _, t in ipairs(h.threads) do
          for _, c in ipairs(t.calls) do
            if c.worker == "W" and c.shard == shard and c.running >= 1 and c.waiting then return { pid, c } end
          end
        end
      end
    end, 15, "the long call listed, parked in luakiq.sleep")
    local runner, call = found[1], found[2]
    assert.is_true(call.waiting, "parked in luakiq.sleep")
    assert.is_true(runner == a or runner == b)
    -- the API says the same; the dashboard shows it
    local base = "http://127.0.0.1:" .. port
    local st, text, v = web.request(base, "GET", "/api/v1/hosts")
    assert.are.equal(200, st, text)
    local pids = {}
    for _, h in ipairs(v.hosts) do pids[#pids + 1] = h.pid end
    table.sort(pids)
    local want = { a, b }
    table.sort(want)
    assert.are.same(want, pids)
    web.browser_test("hosts", base, core.hostname() .. ":" .. runner, "W" .. shard .. " ")
    srv.conn:call("SET", "t:go", "1")
    -- kill -9 b: still listed for a while (nobody said it left), gone by 10 s
    procs[2]:kill()
    local killed = core.now()
    assert.truthy(list(dir)[b], "not dropped at once")
    host.eventually(function() return list(dir)[b] == nil end, 15, "the killed host dropped")
    local after = core.now() - killed
    assert.is_true(after >= 6 and after < 13, ("dropped %.1f s after the kill"):format(after))
    -- TERM a: gone as soon as it exits
    procs[1]:signal("TERM")
    assert.are.equal(0, procs[1]:wait(10), procs[1]:log())
    assert.is_nil(list(dir)[a], "a stopped host leaves at once")
  end)
end)
