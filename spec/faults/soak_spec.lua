-- The short soak (CI): tools/soak.lua with 20k payloads, 2 hosts killed with
-- -9 (or stopped) at random and restarted, ~10% failing batches, one Redis
-- restart; its checker must find nothing lost, no overlap per id, no order
-- violation. The long run (>= 1,000,000 payloads) is the same tool:
--   build/luakiq lua tools/soak.lua --payloads 1000000 --ids 20000 --kill-every 5
-- The I/O-bound mode (--io MS) is the second case: calls parked in HTTP
-- requests, many per thread, under the same faults. The third (--await) makes
-- jobs wait for replies, which a replier sends by token (some twice, some
-- late, some never, some again after the wait ended) under the same kills
-- and Redis restart; its long run:
--   build/luakiq lua tools/soak.lua --await 0.75 --payloads 200000 --ids 5000 --backlog 4000 \
--       --kill-every 4 --redis-restarts 3 --max-retry 2 --work 5 --reply-timeout 3
local host = require "helpers.host"

-- Runs the soak with args; checks what every case must show and returns its report.
local function soak(args)
  local rc, out, err = host.exec("lua tools/soak.lua " .. args)
  assert.are.equal(0, rc, (out or "") .. (err or ""))
  assert.truthy(out:match("soak PASSED"), out)
  assert.truthy(out:match("lost 0"), out)
  assert.truthy(out:match("overlaps 0, order violations 0"), out)
  local kills = tonumber(out:match("(%d+) kill %-9")) + tonumber(out:match("(%d+) TERM"))
  assert.is_true(kills >= 2, "too few host faults: " .. out)
  return out
end

describe("soak", function()
  it("20k payloads through kills, failures and a Redis restart: nothing lost, no overlap, in order", function()
    -- batch 5 with fetch_size 20: fetches of several perform calls (acks of
    -- "done" ids, partial acks at stops) under the same faults
    local args = "--payloads 20000 --ids 400 --backlog 120 --kill-every 1.5 --work 2 --redis-restarts 1 --timeout 150" ..
      " --batch 5 --fetch-size 20"
    local out = soak(args)
    assert.truthy(out:match("1 Redis restarts"), out)
  end)

  it("I/O-bound: 10k payloads, calls parked in HTTP requests, many in flight per thread, same faults", function()
    -- 40 shards on 2 x 2 threads, each call one request answered after 0-50 ms
    local args = "--io 50 --shards 40 --threads 2 --batch 3 --payloads 10000 --ids 400 --backlog 150" ..
      " --kill-every 1.5 --redis-restarts 1 --timeout 150"
    local out = soak(args)
    -- the mode's point: a thread had several calls waiting at once
    local inflight = tonumber(out:match("at most (%d+) calls in flight on one thread"))
    assert.is_true(inflight >= 4, "calls did not overlap on a thread: " .. out)
  end)

  it("jobs that wait for a reply: duplicate, late and missing replies through kills and a Redis restart", function()
    -- 3 of 4 ids await; replies by token (luakiq.lib.replies; odd ids by
    -- correlation key, one per attempt) after 0-0.5 s,
    -- 20% twice, 7% late (after the 2 s reply_timeout), 5% never (the retry
    -- path), 10% again after the wait ended; perform and on_reply work 0-20 ms
    -- after their records, so kills land between await and the ack and inside
    -- on_reply
    local args = "--await 0.75 --payloads 3000 --ids 100 --backlog 100 --kill-every 1.5 --work 20" ..
      " --redis-restarts 1 --timeout 150 --batch 5 --fetch-size 20 --reply-timeout 2"
    local out = soak(args)
    assert.truthy(out:match("double completions 0, reply calls without an accepted reply 0, wrong replies 0, " ..
      "accepted replies dropped 0, stale tokens revived 0"), out)
    assert.truthy(out:match("1 Redis restarts"), out)
    -- every kind of reply was sent and answered as designed
    local acc, dup, stale = out:match("replies: accepted (%d+), duplicate (%d+), stale (%d+), other 0")
    assert.is_true(tonumber(acc) > 500 and tonumber(dup) > 0 and tonumber(stale) > 0, out)
    local kacc, kdup = out:match("by correlation key %(odd ids%): accepted (%d+), duplicate (%d+)")
    assert.is_true(tonumber(kacc) > 100 and tonumber(kdup) > 0, out)
    local late = tonumber(out:match("late: (%d+) stale"))
    local after = tonumber(out:match("again after the wait ended: (%d+) stale"))
    assert.is_true(late > 0 and after > 0, out)
    assert.is_true(tonumber(out:match("(%d+) attempts timed out")) > 0, out)
  end)
end)
