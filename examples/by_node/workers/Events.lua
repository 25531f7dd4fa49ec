-- Events: 8 shards, so with 2 nodes x 2 threads each thread owns 2 shards.
-- Records which node performed each id (Redis hash example:events, id -> node),
-- so you can see the cluster share the work and no id move between nodes.
local luakiq = require "luakiq"

local node = os.getenv("LUAKIQ_NODE") or "0"

return {
  shards_count = 8,
  batch_size = 20,
  perform = function(payloads_by_id)
    for id, payloads in pairs(payloads_by_id) do
      luakiq.redis.call("HSET", "example:events", id, node)
      luakiq.redis.call("HINCRBY", "example:events:count", node, #payloads)
    end
  end,
}
