-- pause.lua: pause or resume one queue on every host (luakiq pause/resume,
-- POST /api/v1/workers/NAME/pause|resume).
-- KEYS[1] = NS:paused (HASH queue -> "1"; a slot of its own, read by every
-- worker thread at most every 0.5 s).
-- ARGV[1] queue, [2] "1" pause | "0" resume, [3] wake channel, then the
-- queue's shard prefixes: on resume each is published on the channel, so
-- idle threads with a backlog fetch at once.
-- Returns 1 when the state changed, 0 when it already was so.
local queue, pause, channel = ARGV[1], ARGV[2], ARGV[3]
if type(queue) ~= "string" or queue == "" or (pause ~= "1" and pause ~= "0") or type(channel) ~= "string" then
  error("BADARG luakiq pause: ARGV must be queue, 1|0, channel, prefixes...", 0)
end
if pause == "1" then return redis.call("HSET", KEYS[1], queue, "1") end
local changed = redis.call("HDEL", KEYS[1], queue)
if channel ~= "" then
  for i = 4, #ARGV do redis.call("PUBLISH", channel, ARGV[i]) end
end
return changed
