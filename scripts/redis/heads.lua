-- heads.lua: what the Lag scheduler's probe needs of one shard, cheaply.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:". No ARGV.
-- Returns {head, orphaned}: head = the lowest perform_in in the queue ("" if
-- empty); orphaned = "1" when jobs are in flight but nobody holds the lease
-- (their holder died or stopped without acking): the shard must be fetched so
-- that fetch.lua restores them, even if its queue is empty.
local P = KEYS[1]
local head = redis.call("ZRANGE", P .. "queue", 0, 0, "WITHSCORES")[2] or ""
local orphaned = redis.call("EXISTS", P .. "busy") == 1 and redis.call("EXISTS", P .. "lease") == 0
return { head, orphaned and "1" or "0" }
