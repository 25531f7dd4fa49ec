-- hipq's case over a message bus: each job is a shipment the warehouse
-- (provider.py) books. perform sends the request with a correlation key and
-- returns; the warehouse's answer comes back later as a message on a topic
-- (a Redis list here), which consumer.py hands to the job by its key with
-- luakiq's own Redis scripts (docs/redis.md, "Reply from another language").
local luakiq = require "luakiq"
local example = require "lib.example"

return {
  shards_count = 4,
  batch_size = 5,
  reply_timeout = 2,
  max_retry_count = 1,
  retry_in = function() return 0.5 end,
  timeout = 10,
  perform = function(batch, call)
    for id, payloads in pairs(batch) do
      -- one key per request: the same when these jobs are delivered again
      -- after a host died (call.delivery), another after a retry, so a late
      -- answer to the first request never completes the second
      local key = id .. "/" .. call.delivery
      local wait = luakiq.await(id, { key = key })
      example.ask("/ship", { id = id, key = key, plan = payloads[#payloads].plan })
      example.record { ev = "request", w = call.worker, id = id, attempt = wait.attempt, key = key,
                       steps = example.steps(payloads) }
    end
  end,
  -- the warehouse's answer, {"tracking": ...}
  on_reply = function(id, reply, payloads, call)
    example.replied(id, payloads, call, { tracking = reply.tracking })
  end,
}
