-- luakiq.lib.keys: Redis key names and the id -> shard function (docs/redis.md).
-- Every key of one shard shares the hash tag {QUEUE:SHARD}, so each queue
-- script touches a single cluster slot.
-- This is the host-side half of the schema: the shard prefix (KEYS[1] of the
-- queue scripts), the registry and the wake channel. The names of the keys
-- under a prefix live in scripts/redis/lib/keys.lua, the Redis-side half,
-- which every queue script includes; keep the two in step.
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

-- A member of a shard's P jobs or P morgue:jobs (docs/redis.md): esc(id)
-- .. "\0\0" .. record, esc turning each byte 0 of the id into 0, 1. Returns
-- the id and the ZRANGEBYLEX bound just past every member of that id (the
-- next page of a listing by id starts there, whatever the id's record). A
-- member without the "\0\0" (junk written by someone else) is its own id.
function M.member_id(m)
  local id, E = M.member_split(m)
  if not E then return m, "(" .. m end
  return id, "[" .. E .. "\0\1"
end

-- The id of member m, its escaped form and the offset of its record (the
-- place byte, after the "\0\0"); nil when m has no "\0\0".
function M.member_split(m)
  local e = m:find("\0\0", 1, true)
  if not e then return nil end
  local E = m:sub(1, e - 1)
  local id = E:find("\0", 1, true) and (E:gsub("%z\1", "\0")) or E
  return id, E, e + 2
end

-- Prefix of a queue's own keys, in the queue's slot (tag {QUEUE}, apart
-- from its shards'): "NS:{QUEUE}:" (waitkey.lua's KEYS[1]: correlation
-- keys and the reply tokens' secret).
function M.queue_prefix(ns, queue) return ns .. ":{" .. queue .. "}:" end

function M.registry(ns) return ns .. ":queues" end
-- The namespace's layout version (STRING "2"; layout.lua): tagged with the
-- registry's whole name, so it shares the registry's slot on a Redis
-- Cluster (a namespace has no braces), and under NS: like every key (ACL
-- key patterns). Written by layout.lua and register.lua only.
function M.layout(ns) return ns .. ":{" .. M.registry(ns) .. "}:layout" end
function M.wake_channel(ns) return ns .. ":wake" end
-- The queue scripts' channel argument that makes them SPUBLISH on the
-- shard's own channel PREFIX .. "wake" (a Redis Cluster; lib/keys.lua wake).
M.SHARDED = "!"
-- concurrency: the calls holding units of a queue, on every host (ZSET
-- member -> expiry) and their costs (HASH); tag {QUEUE}, a slot apart from
-- the shards'. host/host.c derives the running key from a shard prefix.
function M.running(ns, queue) return ns .. ":{" .. queue .. "}:running" end
function M.units(ns, queue) return ns .. ":{" .. queue .. "}:units" end
-- throttle: the running calls' jobs (HASH member -> JSON {host, since,
-- jobs = {{id, cost, label}...}}) and a counter raised by each registration.
function M.calls(ns, queue) return ns .. ":{" .. queue .. "}:calls" end
function M.calls_version(ns, queue) return ns .. ":{" .. queue .. "}:calls_version" end
-- timing: a queue's wait and run times of one UTC day (luakiq.ops.timing).
function M.timing(ns, queue, day)
  local k = ns .. ":{" .. queue .. "}:timing:" .. day
  return k, k .. ":h"
end
-- history: a queue's jobs processed and failed per minute of one UTC day.
function M.history(ns, queue, day) return ns .. ":{" .. queue .. "}:history:" .. day end
-- the running hosts: ZSET token -> last beat (ms, Redis's clock), HASH
-- token -> JSON (luakiq.ops.hosts); one slot for both.
function M.hosts(ns) return ns .. ":{hosts}:beats", ns .. ":{hosts}:info" end
-- online reshard (luakiq.ops.reshard): HASH from, to, token, started, moved of
-- the reshard under way, and the lock of the running one (STRING token,
-- PX ttl); tag {QUEUE}, one slot (reshard_lock.lua).
function M.reshard(ns, queue)
  local k = ns .. ":{" .. queue .. "}:reshard"
  return k, k .. ":lock"
end
-- HASH queue -> "1" for paused queues, and the field "" -> the pause
-- generation, bumped by every pause and resume (a key of its own slot:
-- pause.lua). Its acknowledgements: HASH host token -> the generation
-- that host applied last (luakiq.ops.hosts.sync_pause).
function M.paused(ns) return ns .. ":paused" end
function M.paused_acks(ns) return ns .. ":paused:acks" end

return M
