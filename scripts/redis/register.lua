-- register.lua: record a queue's shards_count in the queue registry, once.
-- KEYS[1] = the registry hash "NS:queues" (queue name -> shards_count).
-- ARGV[1] = queue name, ARGV[2] = shards_count (integer >= 1).
-- Returns the stored shards_count as a string: the caller refuses to start
-- when it differs from its own: a queue's shards_count is fixed, because
-- shard = crc32(id) % shards_count (docs/configuration.md, "Changing
-- shards_count").
-- The namespace's layout version is checked in the same call (layout.lua
-- "check", docs/redis.md): a queue is registered only in a layout-2
-- namespace (a new one is marked so first); otherwise nothing is written and
-- the reply is {"LAYOUT", version} ("1": queues registered without a
-- version, else a newer luakiq's).
-- luakiq:include keys
local queue, count = ARGV[1], tonumber(ARGV[2])
if not queue or queue == "" then error("BADARG luakiq register: queue name is empty", 0) end
if not count or count ~= math.floor(count) or count < 1 or count > 1e9 then
  error("BADARG luakiq register: shards_count must be an integer >= 1, got '" .. tostring(ARGV[2]) .. "'", 0)
end
local v = layout_version(KEYS[1])
if v ~= "2" then return { "LAYOUT", v } end
redis.call("HSETNX", KEYS[1], queue, string.format("%d", count))
return redis.call("HGET", KEYS[1], queue)
