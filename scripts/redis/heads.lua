-- heads.lua: what the Lag scheduler's probe needs of one shard, cheaply.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:". ARGV[1] (optional) = the
-- caller's lease token, ARGV[2] (optional) = now.
-- Returns {head, orphaned[, best]}: head = the lowest perform_in in the
-- queue, or the first due time of a job that waits for a reply (its reply
-- came, or its deadline) when earlier ("" if none); best (with now, when the shard has jobs of other
-- priorities than 100) = the priority of its best due job ("" = none due); orphaned = "1" when jobs are in flight but nobody holds the lease
-- (their holder died or stopped without acking), or the caller itself holds
-- it: the caller's thread is between batches, so a batch in flight under its
-- own lease is one whose ack or failure never reached Redis (a Redis error
-- in between). Either way the shard must be fetched, even if its queue is
-- empty: fetch.lua restores (dead holder) or redelivers (own batch) them, or
-- the pending ack settles it. With the caller's token, jobs in flight under
-- another holder's lease make orphaned that holder's token instead of "0"
-- (the caller's fast recovery: a holder of its machine that is gone).
-- luakiq:include keys
-- luakiq:include levels
local P = KEYS[1]
local K = shard_keys(P)
-- a shard a reshard froze has nothing for anyone (fetch.lua refuses it;
-- the reshard wakes it when it is done), but a caller that still holds its
-- lease should fetch once: that fetch gives the lease back to the reshard
local frozen = redis.call("GET", K.reshard)
if frozen then
  local mine = ARGV[1] ~= nil and ARGV[1] ~= "" and redis.call("GET", K.lease) == ARGV[1]
  return { "", mine and "1" or "0" }
end
-- (a reply to handle or a deadline of a job that waits is due work too:
-- the first of P waits:due, lib/waits.lua)
local head = queue_head(P, K)
local wh = redis.call("ZRANGE", P .. WAITS_DUE, 0, 0, "WITHSCORES")[2]
if wh and (not head or tonumber(wh) < tonumber(head)) then head = score_str(tonumber(wh)) end
head = head or ""
local orphaned = "0"
if redis.call("EXISTS", K.busy) == 1 then
  local lease = redis.call("GET", K.lease)
  local caller = ARGV[1] ~= nil and ARGV[1] ~= ""
  if not lease or (caller and lease == ARGV[1]) then orphaned = "1"
  elseif caller then orphaned = lease end
end
local now = tonumber(ARGV[2])
if now and has_levels(K) then return { head, orphaned, best_due(P, K, now) } end
return { head, orphaned }
