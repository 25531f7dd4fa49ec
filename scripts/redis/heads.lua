-- heads.lua: the shard's lowest perform_in, for the Lag scheduler's probe.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".  No ARGV.
-- Returns {head} (a Redis score string) or {""} when the queue is empty.
return { redis.call("ZRANGE", KEYS[1] .. "queue", 0, 0, "WITHSCORES")[2] or "" }
