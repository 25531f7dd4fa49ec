-- Orders, version 2: the same worker as before the migration, with more shards.
-- A queue's shards_count is fixed (shard = crc32(id) % shards_count), so the new
-- count needs a new queue: queue_name "Orders_V2". Producers keep calling
-- perform_async("Orders", ...): jobs go by worker name, so they now land in
-- Orders_V2. The jobs still waiting in the old queue "Orders" are moved here
-- by OrdersMigration.
local luakiq = require "luakiq"

return {
  queue_name = "Orders_V2",
  shards_count = 10,
  batch_size = 10,

  -- payloads: order snapshots {version=, status=}, scored by version, oldest first.
  perform = function(payloads_by_id)
    for id, snapshots in pairs(payloads_by_id) do
      local newest = snapshots[#snapshots]
      local applied = tonumber(luakiq.redis.call("HGET", "example:migration", id)) or 0
      if newest.version > applied then
        luakiq.redis.call("HSET", "example:migration", id, newest.version)
      end
    end
  end,
}
