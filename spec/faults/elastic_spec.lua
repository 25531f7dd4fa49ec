-- Elastic hosts (issue 14, item 4; docs/operations.md, "Adding and removing
-- hosts"): splitter = "elastic". Real hosts, a real Redis.
--   1. tools/soak.lua --elastic: 1 host, a 2nd and a 3rd join, one is killed
--      with -9, one stopped with TERM, under a steady stream of jobs; the
--      soak's checker finds nothing lost, no overlap (per id and per shard:
--      never two holders of one shard at once), no order violation, and the
--      hand-overs are measured: even shares after each join, the killed
--      host's shards taken as its leases end (lease_ttl), the stopped host's
--      at once.
--   2. `luakiq hosts` and GET /api/v1/hosts show which shards each thread of
--      each host holds as hosts come and go; `luakiq plan` says the plan is
--      dynamic; a HUP reloads an elastic host, which keeps its shards.
local core = require "luakiq.core"
local json = require "luakiq.json"
local host = require "helpers.host"
local web = require "web.support"
local q = host.quote

local LEASE_TTL = 3

-- "name secs s (leases secs s) [shares]" entries of the soak's elastic line
local function phases(out)
  local line = out:match("elastic %(lease_ttl[^\n]*")
  assert.truthy(line, out)
  local by = {}
  for name, secs, leases, shares in line:gmatch("([%w%s%-]-) ([%d.]+) s %(leases ([%d.?]+) s%) %[([%d,]*)%]") do
    by[name:gsub("^%s+", "")] = { secs = tonumber(secs), leases = tonumber(leases), shares = shares }
  end
  return by, line
end

describe("elastic hosts", function()
  it("join, kill -9 and TERM under a steady stream: nothing lost, one holder per shard, in order, even shares", function()
    local args = ("--elastic --shards 12 --threads 2 --lease-ttl %d --ids 200 --rate 400 --work 2 --batch 5" ..
      " --fail 0.1 --timeout 100"):format(LEASE_TTL)
    local rc, out, err = host.exec("lua tools/soak.lua " .. args)
    assert.are.equal(0, rc, (out or "") .. (err or ""))
    assert.truthy(out:match("soak PASSED"), out)
    assert.truthy(out:match("lost 0"), out)
    assert.truthy(out:match("overlaps 0, order violations 0"), out)
    assert.truthy(out:match("shard overlaps 0"), out)
    assert.truthy(out:match("1 kill %-9, 1 TERM"), out)
    local by, line = phases(out)
    for _, name in ipairs { "start", "join 2", "join 3", "kill -9", "TERM" } do
      assert.truthy(by[name], name .. " missing: " .. line)
    end
    -- joins: each live host holds an even share within a few seconds
    assert.are.equal("6,6", by["join 2"].shares, line)
    assert.are.equal("4,4,4", by["join 3"].shares, line)
    assert.is_true(by["join 2"].secs < 6 and by["join 3"].secs < 6, line)
    -- kill -9: its shards are taken as its leases end (at most lease_ttl
    -- after its last renewal; the check runs every 0.1 s), and listed by
    -- the next beats (lease_ttl / 4 each)
    assert.is_true(by["kill -9"].leases <= LEASE_TTL + 0.5, line)
    assert.is_true(by["kill -9"].secs <= LEASE_TTL + 2, line)
    assert.are.equal("6,6", by["kill -9"].shares, line)
    -- TERM: handed over at once (it released its leases as it stopped)
    assert.is_true(by["TERM"].leases <= 2, line)
    assert.is_true(by["TERM"].secs <= 3, line)
    assert.are.equal("12", by["TERM"].shares, line)
  end)

  describe("luakiq hosts and GET /api/v1/hosts", function()
    local srv = host.fixture()
    local dir, procs
    before_each(function()
      procs = {}
      dir = host.scriptdir {
        ["config.lua"] = ("return { splitter = 'elastic', threads_per_node = 2, poll_interval = 0.2, lease_ttl = %d }")
          :format(LEASE_TTL),
        ["workers/W.lua"] = "return { shards_count = 6, perform = function() end }",
      }
    end)
    host.stop_after_each(function() return procs, dir end)

    -- pid -> {threads = {"W0,W3", ...}, all = "W0,W1,W3,..."} from `luakiq hosts DIR`
    local function held(d)
      local rc, out, err = host.exec("hosts " .. q(d), nil, "REDIS_URL=" .. srv.url)
      assert.are.equal(0, rc, err)
      local by = {}
      for l in out:gmatch("[^\n]+") do
        local h = json.decode(l)
        local threads, all = {}, {}
        for i, t in ipairs(h.threads) do
          local s = {}
          for _, x in ipairs(t.shards) do
            s[#s + 1] = x.worker .. x.shard
            all[#all + 1] = x.worker .. x.shard
          end
          table.sort(s)
          threads[i] = table.concat(s, ",")
        end
        table.sort(all)
        by[h.pid] = { threads = threads, all = table.concat(all, ","), n = #all, elastic = h.elastic }
      end
      return by
    end

    it("show the shards each thread holds now, as hosts join and stop", function()
      local rc, out = host.exec("plan " .. q(dir))
      assert.are.equal(0, rc)
      assert.truthy(out:match("^elastic: the plan is dynamic"), out)
      local port = core.free_port()
      procs[1] = host.spawn("run " .. q(dir) .. " --web 127.0.0.1:" .. port, "REDIS_URL=" .. srv.url)
      local a = procs[1].pid
      host.eventually(function()
        local h = held(dir)[a]
        return h and h.all == "W0,W1,W2,W3,W4,W5"
      end, 10, "the first host holds every shard")
      local h = held(dir)[a]
      assert.is_true(h.elastic)
      assert.are.equal(2, #h.threads)
      assert.are.equal(3, #h.threads[1]:gsub("[^,]", "") + 1) -- 3 shards a thread
      -- HUP: elastic to elastic reloads; the threads keep their tokens and shards
      assert.is_true(procs[1]:signal("HUP"))
      host.eventually(function() return procs[1]:log():match("reload done: 2 of 2 worker threads") end, 15, "reloaded")
      host.eventually(function()
        local x = held(dir)[a]
        return x and x.all == "W0,W1,W2,W3,W4,W5"
      end, 5, "every shard held after the reload")
      assert.falsy(procs[1]:log():match("reload refused"))
      -- a second host: 3 shards each, every shard once
      procs[2] = host.spawn("run " .. q(dir), "REDIS_URL=" .. srv.url)
      local b = procs[2].pid
      local joined = core.now()
      host.eventually(function()
        local l = held(dir)
        if not (l[a] and l[b] and l[a].n == 3 and l[b].n == 3) then return nil end
        local all = {}
        for x in (l[a].all .. "," .. l[b].all):gmatch("[^,]+") do all[#all + 1] = x end
        table.sort(all)
        return table.concat(all, ",") == "W0,W1,W2,W3,W4,W5"
      end, 10, "an even share each")
      assert.is_true(core.now() - joined < 8)
      -- the API says the same
      local st, text, v = web.request("http://127.0.0.1:" .. port, "GET", "/api/v1/hosts")
      assert.are.equal(200, st, text)
      local api = {}
      for _, x in ipairs(v.hosts) do
        local n = 0
        for _, t in ipairs(x.threads) do n = n + #t.shards end
        api[x.pid] = n
      end
      assert.are.equal(3, api[a])
      assert.are.equal(3, api[b])
      -- the second one stops: the first holds everything again at once
      procs[2]:signal("TERM")
      local stopped = core.now()
      assert.are.equal(0, procs[2]:wait(10), procs[2]:log())
      host.eventually(function() return held(dir)[a].all == "W0,W1,W2,W3,W4,W5" end, 5, "the shards back")
      assert.is_true(core.now() - stopped < 4, ("%.1f s"):format(core.now() - stopped))
      assert.truthy(procs[1]:log():match("shards handed over"), "the first host gave the second its share")
    end)
  end)
end)
