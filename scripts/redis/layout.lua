-- layout.lua: the layout version of a namespace, read (and set) atomically
-- with the queue registry (docs/redis.md, "Migration from layout 1").
-- KEYS[1] = the registry "NS:queues"; the version is the STRING
-- "NS:{NS:queues}:layout" (keys.lua layout_key: the registry's slot on a Redis
-- Cluster, so one call sees both).
-- ARGV[1] = operation:
--   "check" (every entry point of luakiq, once at start): returns the
--     version. None stored: "1" when queues are registered (a namespace
--     written by layout 1, which never stored one), else the version is set
--     to "2" (a new namespace) and "2" returned. Else what is stored: "2",
--     "1>2" (a migration under way or interrupted), or a later luakiq's.
--   "begin" (luakiq migrate): as "check", but a layout-1 namespace is marked
--     "1>2" (from then on every luakiq of layout 2 refuses it, until "done")
--     and "1" returned.
--   "done": "1>2" becomes "2". Returns the version then.
-- luakiq:include keys
local reg = KEYS[1]
local lk = layout_key(reg)
local op = ARGV[1]
if op ~= "check" and op ~= "begin" and op ~= "done" then
  error("BADARG luakiq layout: operation must be check, begin or done, got '" .. tostring(op) .. "'", 0)
end
if op == "done" then
  local v = redis.call("GET", lk)
  if v == "1>2" then
    redis.call("SET", lk, "2")
    return "2"
  end
  return v or ""
end
local v = layout_version(reg)
if op == "begin" and v == "1" then redis.call("SET", lk, "1>2") end
return v
