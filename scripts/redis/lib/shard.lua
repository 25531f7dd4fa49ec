-- Shared by several queue scripts: a script that needs these has a line
-- "luakiq:include shard" (as a comment, at the start of the line, after
-- "luakiq:include keys", whose shard_keys these use), which is
-- replaced by this file when the script is loaded (scripts/luakiq/include.lua:
-- at build time, with LUAKIQ_SCRIPTS and in tools/redis-scripts-test.sh).
-- Redis scripts cannot require each other, so this is how they share code.

-- Merges the payload set src into dst (docs/redis.md, "Merge rules": union, an equal
-- payload keeps the minimal score). src is gone afterwards.
local function merge_payloads(src, dst)
  if redis.call("EXISTS", dst) == 1 then
    redis.call("ZUNIONSTORE", dst, 2, dst, src, "AGGREGATE", "MIN")
    redis.call("DEL", src)
  else
    redis.call("RENAME", src, dst)
  end
end

-- Moves every payload of the zset src (id's, in flight) to the morgue: the
-- id's dead payloads united with them (an equal payload keeps the minimal
-- score), updated_at = now_s, the error err ("" = none). src is gone
-- afterwards. Returns the moved {payload, score, ...} (flat). For
-- delivery = "at_most_once" (fail.lua, fetch.lua): nothing of a call that may
-- have run is ever queued again.
local function morgue_all(K, P, id, src, now_s, err)
  local moved = redis.call("ZRANGE", src, 0, -1, "WITHSCORES")
  if #moved == 0 then return moved end
  redis.call("ZADD", K.morgue, now_s, id)
  redis.call("ZADD", K.morgue_ids, 0, id)
  merge_payloads(src, morgue_payloads_key(P, id))
  if err ~= "" then redis.call("HSET", K.morgue_errors, id, err) else redis.call("HDEL", K.morgue_errors, id) end
  return moved
end

-- The retries index holds only jobs waiting for a retry (retry_count >= 0);
-- a fresh job (-1) is not in it, which spares every push and fetch of a
-- fresh job one sorted-set write. K: shard_keys(P); rc: a Redis score string.
local function set_retry(K, id, rc)
  if tonumber(rc) >= 0 then redis.call("ZADD", K.retries, rc, id)
  else redis.call("ZREM", K.retries, id) end
end

-- Fencing for writers of a shard's batch in flight (fail.lua, bury.lua): the
-- caller must hold the lease, or be its last holder with nobody since (then it
-- takes it again). K: shard_keys(P). Returns the refusal {"LEASE", pttl}, or
-- nil after renewing.
local function hold_lease(K, token, lease_ms)
  local cur = redis.call("GET", K.lease)
  if cur ~= token and (cur or redis.call("GET", K.holder) ~= token) then
    return { "LEASE", tostring(redis.call("PTTL", K.lease)) }
  end
  redis.call("SET", K.lease, token, "PX", lease_ms)
end
