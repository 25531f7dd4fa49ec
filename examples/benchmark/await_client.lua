-- One client of the benchmark's replies through the Redis script
-- (await_shape.lua): `luakiq lua await_client.lua REDIS_URL NS QUEUE SHARDS
-- TOKENFILE FROM TO PIPE GO OUT`. Sends reply.lua by token (docs/redis.md,
-- "reply.lua") for lines FROM..TO of TOKENFILE ("ID TOKEN"), PIPE calls in
-- flight at a time on one connection, starting at Unix time GO (so that every
-- client starts together), and writes "START END SENT ACCEPTED" to OUT.
local core = require "luakiq.core"
local keys = require "luakiq.lib.keys"

local url, ns, queue, shards, file = arg[1], arg[2], arg[3], tonumber(arg[4]), arg[5]
local from, to, pipe, go, out = tonumber(arg[6]), tonumber(arg[7]), tonumber(arg[8]), tonumber(arg[9]), arg[10]

local calls, i = {}, 0
local channel = keys.wake_channel(ns)
for line in io.lines(file) do
  i = i + 1
  if i > to then break end
  if i >= from then
    local id, token = line:match("^(%S+) (%S+)")
    calls[#calls + 1] = { script = "reply", keys.prefix(ns, queue, keys.shard(id, shards)), "reply", "",
                          channel, tostring(shards), "token", token, '{"ok":true}' }
  end
end
local conn = assert(core.connect(url, 30))
conn:call("PING")
while core.now() < go do core.sleep(0.001) end
local t0 = core.now()
local accepted = 0
for k = 1, #calls, pipe do
  local batch, now = {}, string.format("%.17g", core.now())
  for j = k, math.min(k + pipe - 1, #calls) do
    calls[j][3] = now
    batch[#batch + 1] = calls[j]
  end
  for _, r in ipairs(conn:pipeline(batch)) do
    if r == "accepted" then accepted = accepted + 1 end
  end
end
local t1 = core.now()
local f = assert(io.open(out, "w"))
f:write(string.format("%.6f %.6f %d %d\n", t0, t1, #calls, accepted))
f:close()
conn:close()
