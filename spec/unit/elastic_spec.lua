-- luakiq.runner.elastic: the share of each thread of each elastic host (pure
-- functions; the running hosts are spec/faults/elastic_spec.lua).
local elastic = require "luakiq.runner.elastic"
local splitters = require "luakiq.splitters"

-- The handler list of workers {name, shards_count} (runtime.handlers, as a host makes it).
local function handlers(workers)
  local cfg = { workers = {} }
  for i, w in ipairs(workers) do cfg.workers[i] = { name = w[1], shards_count = w[2] } end
  return require("luakiq.lib.runtime").handlers(cfg)
end

local function key(h) return h.worker .. h.shard end

-- host token -> thread index -> set of keys, for every host of `hosts`
local function everyone(hs, hosts, threads)
  local out = {}
  for _, me in ipairs(hosts) do
    out[me] = {}
    for i, g in ipairs(elastic.share(hs, hosts, me, threads)) do
      local set = {}
      for _, h in ipairs(g) do set[key(h)] = true end
      out[me][i] = set
    end
  end
  return out
end

local function count(set) local n = 0 for _ in pairs(set) do n = n + 1 end return n end

describe("luakiq.elastic.share", function()
  local hs = handlers { { "A", 10 }, { "B", 7 }, { "C", 1 } } -- 18 shards

  it("gives every shard to exactly one thread of one host, each host and thread an even share", function()
    for _, hosts in ipairs { { "h1" }, { "h1", "h2" }, { "h1", "h2", "h3" }, { "a", "b", "c", "d", "e" } } do
      local all, seen = everyone(hs, hosts, 2), {}
      for _, me in ipairs(hosts) do
        local n = 0
        for _, set in ipairs(all[me]) do
          local c = count(set)
          n = n + c
          assert.is_true(math.abs(c - #hs / #hosts / 2) <= 1.5, "thread share " .. c)
          for k in pairs(set) do
            assert.is_nil(seen[k], k .. " twice")
            seen[k] = me
          end
        end
        assert.is_true(math.abs(n - #hs / #hosts) <= 1, "host share " .. n .. " of " .. #hs .. " over " .. #hosts)
      end
      assert.are.equal(#hs, count(seen))
    end
  end)

  it("is the same on every host whatever the order of the hosts list; a host counts itself live", function()
    local a = elastic.share(hs, { "h1", "h2", "h3" }, "h2", 3)
    local b = elastic.share(hs, { "h3", "h2", "h1", "h1" }, "h2", 3)
    assert.are.same(a, b)
    assert.are.same(elastic.share(hs, { "h1", "h3" }, "h2", 3), a)
  end)

  it("moves few shards when a host joins or leaves", function()
    local before = everyone(hs, { "h1", "h2" }, 1)
    local after = everyone(hs, { "h1", "h2", "h3" }, 1)
    local moved = 0
    for _, me in ipairs { "h1", "h2" } do
      for k in pairs(before[me][1]) do if not after[me][1][k] then moved = moved + 1 end end
    end
    -- h3 takes its 6; at most a few more move between h1 and h2
    assert.is_true(moved <= 9, "moved " .. moved)
  end)

  it("gives empty groups to threads beyond the shards; splitters.elastic drops them (the plan alone)", function()
    local groups = elastic.share(handlers { { "A", 2 } }, {}, "h", 4)
    assert.are.equal(4, #groups)
    local plan = splitters.elastic(handlers { { "A", 2 } }, 4)
    assert.are.equal(2, #plan)
    local n = 0
    for _, g in ipairs(splitters.elastic(hs, 3)) do n = n + #g end
    assert.are.equal(#hs, n)
  end)
end)

describe("luakiq.elastic.timing", function()
  it("beats at least every lease_ttl / 4 and counts a host gone before its leases end", function()
    local beat, dead = elastic.timing(30, 2, 10)
    assert.are.equal(2, beat)
    assert.are.equal(10, dead)
    beat, dead = elastic.timing(3, 2, 10)
    assert.are.equal(0.75, beat)
    assert.are.equal(2, dead)
  end)
end)
