-- The short soak (CI): tools/soak.lua with 20k payloads, 2 hosts killed with
-- -9 (or stopped) at random and restarted, ~10% failing batches, one Redis
-- restart; its checker must find nothing lost, no overlap per id, no order
-- violation. The long run (>= 1,000,000 payloads) is the same tool:
--   build/luakiq lua tools/soak.lua --payloads 1000000 --ids 20000 --kill-every 5
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
end)
