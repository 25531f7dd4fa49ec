-- layout.lua: the layout version of a namespace, read (and set) atomically
-- with the queue registry (docs/redis.md, "Layout version").
-- KEYS[1] = the registry "NS:queues"; the version is the STRING
-- "NS:{NS:queues}:layout" (keys.lua layout_key: the registry's slot on a Redis
-- Cluster, so one call sees both).
-- ARGV[1] = "check" (every entry point of luakiq, once at start): returns
--   the version. None stored: "1" when queues are registered (a registry
--   without a version, which this luakiq refuses), else the version is set
--   to "2" (a new namespace) and "2" returned. Else what is stored: "2", or
--   a later luakiq's.
-- luakiq:include keys
local op = ARGV[1]
if op ~= "check" then
  error("BADARG luakiq layout: operation must be check, got '" .. tostring(op) .. "'", 0)
end
return layout_version(KEYS[1])
