-- The short soak (CI): tools/soak.lua with 20k payloads, 2 hosts killed with
-- -9 (or stopped) at random and restarted, ~10% failing batches, one Redis
-- restart; its checker must find nothing lost, no overlap per id, no order
-- violation. The long run (>= 1,000,000 payloads) is the same tool:
--   build/luakiq lua tools/soak.lua --payloads 1000000 --ids 20000 --kill-every 5
-- The I/O-bound mode (--io MS) is the second case: calls parked in HTTP
-- requests, many per thread, under the same faults.
local host = require "helpers.host"

describe("soak", function()
  it("20k payloads through kills, failures and a Redis restart: nothing lost, no overlap, in order", function()
    -- batch 5 with fetch_size 20: fetches of several perform calls (acks of
    -- "done" ids, partial acks at stops) under the same faults
    local args = "--payloads 20000 --ids 400 --backlog 120 --kill-every 1.5 --work 2 --redis-restarts 1 --timeout 150" ..
      " --batch 5 --fetch-size 20"
    local rc, out, err = host.exec("lua tools/soak.lua " .. args)
    assert.are.equal(0, rc, (out or "") .. (err or ""))
    assert.truthy(out:match("soak PASSED"), out)
    assert.truthy(out:match("lost 0"), out)
    assert.truthy(out:match("overlaps 0, order violations 0"), out)
    local kills = tonumber(out:match("(%d+) kill %-9")) + tonumber(out:match("(%d+) TERM"))
    assert.is_true(kills >= 2, "too few host faults: " .. out)
    assert.truthy(out:match("1 Redis restarts"), out)
  end)

  it("I/O-bound: 10k payloads, calls parked in HTTP requests, many in flight per thread, same faults", function()
    -- 40 shards on 2 x 2 threads, each call one request answered after 0-50 ms
    local args = "--io 50 --shards 40 --threads 2 --batch 3 --payloads 10000 --ids 400 --backlog 150" ..
      " --kill-every 1.5 --redis-restarts 1 --timeout 150"
    local rc, out, err = host.exec("lua tools/soak.lua " .. args)
    assert.are.equal(0, rc, (out or "") .. (err or ""))
    assert.truthy(out:match("soak PASSED"), out)
    assert.truthy(out:match("lost 0"), out)
    assert.truthy(out:match("overlaps 0, order violations 0"), out)
    local kills = tonumber(out:match("(%d+) kill %-9")) + tonumber(out:match("(%d+) TERM"))
    assert.is_true(kills >= 2, "too few host faults: " .. out)
    -- the mode's point: a thread had several calls waiting at once
    local inflight = tonumber(out:match("at most (%d+) calls in flight on one thread"))
    assert.is_true(inflight >= 4, "calls did not overlap on a thread: " .. out)
  end)
end)
