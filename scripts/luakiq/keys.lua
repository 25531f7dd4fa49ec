-- luakiq.keys: Redis key names and the id -> shard function (docs/redis.md).
-- Every key of one shard shares the hash tag {QUEUE:SHARD}, so each queue
-- script touches a single cluster slot.
local core = require "luakiq.core"

local M = {}

-- Prefix of every key of one shard: "NS:{QUEUE:SHARD}:".
function M.prefix(ns, queue, shard)
  return ns .. ":{" .. queue .. ":" .. shard .. "}:"
end

-- zlib CRC-32 of the id's string form, modulo shards_count (as Lowkiq).
function M.shard(id, shards_count)
  return core.crc32(id) % shards_count
end

function M.registry(ns) return ns .. ":queues" end
function M.wake_channel(ns) return ns .. ":wake" end

return M
