-- Tags of jobs ("luakiq:include tags", after "keys" and "levels";
-- docs/redis.md, "Tags"). P tags[id] = the id's tags, sorted, joined by
-- "\n" (a tag holds no control character); P tag:<T> = SET of the ids
-- tagged T. An id keeps its tags while it is queued, in flight or dead
-- (pushes unite them). An ack (fetch.lua) drops the tags of the acked ids
-- that are gone from the shard, so a stream of tagged jobs does not grow
-- Redis; the other ways out (admin deletes) are cleaned lazily, by the next
-- push of the id (which then replaces them instead of uniting) and by
-- tagged.lua, which checks every id it lists. A shard that never saw a tag
-- has no P tags key: a push or an ack costs it one EXISTS.

-- Whether the shard has tags (cached in K like has_levels).
local function has_tags(K)
  if K.has_tags == nil then K.has_tags = redis.call("EXISTS", K.tags) == 1 end
  return K.has_tags
end

-- Where id is: "in_flight", "queued", "dead", "waiting" (the first that
-- holds, as in job.lua, but for waiting: there after dead) or nil when it is
-- gone from the shard. (Waiting: K.waits, named when the shard awaited,
-- lib/waits.lua W.keys, or push.lua.)
local function job_state(P, K, id)
  if redis.call("HEXISTS", K.busy, id) == 1 then return "in_flight" end
  if queued_at(P, K, id) then return "queued" end
  if redis.call("ZSCORE", K.morgue, id) then return "dead" end
  if K.waits and redis.call("HEXISTS", K.waits, id) == 1 then return "waiting" end
  return nil
end

-- Drops id's tags (text: its P tags entry) from every index.
local function forget_tags(P, K, id, text)
  for t in string.gmatch(text, "[^\n]+") do redis.call("SREM", tag_key(P, t), id) end
  redis.call("HDEL", K.tags, id)
end
