-- hipq's case over HTTP: each job is a payment a slow provider
-- (provider.py) makes. perform sends the request with the job's reply URL
-- and returns: the job then waits for the provider's callback without
-- holding its shard, its thread or a call (luakiq.await); on_reply gets the
-- answer as a call of its own. Payloads pushed for an id while it waits run
-- after its reply. A payment whose payload says "cached" needs no provider:
-- done at once.
local luakiq = require "luakiq"
local example = require "lib.example"

return {
  shards_count = 4,
  batch_size = 5,
  reply_timeout = 2,    -- the provider answers within a second, or too late
  max_retry_count = 1,  -- no answer in time: requested once more, then the morgue
  retry_in = function() return 0.5 end,
  timeout = 10,
  perform = function(batch, call)
    for id, payloads in pairs(batch) do
      local last = payloads[#payloads]
      if last.plan == "cached" then
        example.record { ev = "done", w = call.worker, id = id, at = last.at, shard = call.shard }
      else
        -- the wait is in Redis before the request goes out: a provider that
        -- calls back at once (even before it answers) is not lost
        local wait = luakiq.await(id) -- {token =, url =, attempt =}
        example.ask("/pay", { id = id, attempt = wait.attempt, reply_url = wait.url, plan = last.plan })
        example.record { ev = "request", w = call.worker, id = id, attempt = wait.attempt, shard = call.shard,
                         steps = example.steps(payloads) }
      end
    end
  end,
  -- the provider's answer, {"charge": ..., "status": "paid"}; payloads are
  -- the job's that awaited (those pushed meanwhile run next, as a job)
  on_reply = function(id, reply, payloads, call)
    example.replied(id, payloads, call, { charge = reply.charge })
  end,
}
