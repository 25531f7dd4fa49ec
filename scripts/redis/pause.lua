-- pause.lua: pause or resume one queue on every host (luakiq pause/resume,
-- POST /api/v1/workers/NAME/pause|resume).
-- KEYS[1] = NS:paused (HASH queue -> "1", and "" -> the pause generation;
-- a slot of its own, read by each host's main thread, which hands it to
-- its worker threads and acknowledges the generation it read in
-- NS:paused:acks: luakiq.ops.hosts.sync_pause).
-- ARGV[1] queue, [2] "1" pause | "0" resume, [3] wake channel, then the
-- queue's shard prefixes. Every call bumps the generation and publishes
-- KEYS[1]'s name on the channel (each host reads the paused queues again at
-- once); on resume each prefix is published too, so idle threads with a
-- backlog fetch at once.
-- Returns {changed, generation}: changed = 1 when the state changed, 0 when
-- it already was so.
local queue, pause, channel = ARGV[1], ARGV[2], ARGV[3]
if type(queue) ~= "string" or queue == "" or (pause ~= "1" and pause ~= "0") or type(channel) ~= "string" then
  error("BADARG luakiq pause: ARGV must be queue, 1|0, channel, prefixes...", 0)
end
local changed
if pause == "1" then changed = redis.call("HSET", KEYS[1], queue, "1")
else changed = redis.call("HDEL", KEYS[1], queue) end
local gen = redis.call("HINCRBY", KEYS[1], "", 1)
if channel ~= "" then
  redis.call("PUBLISH", channel, KEYS[1])
  if pause == "0" then
    for i = 4, #ARGV do redis.call("PUBLISH", channel, ARGV[i]) end
  end
end
return { changed, gen }
