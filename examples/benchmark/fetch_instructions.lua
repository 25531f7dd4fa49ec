-- The client of fetch-instructions.sh: pushes N blank jobs into one shard
-- (push.lua, calls of 1,000, ids in order, perform_in = now), then with
-- MODE "fetch" fetches them LIMIT at a time, each call acking the batch
-- before (the host's "records" form), then shuts the server down.
-- Usage: luakiq lua fetch_instructions.lua PORT N MODE LIMIT
local core = require "luakiq.core"
local port, N, MODE, LIMIT = arg[1], tonumber(arg[2]), arg[3], arg[4]
local conn = assert(core.connect("redis://127.0.0.1:" .. port .. "/0", 30, "node"))
local P = "bench:{Q:0}:"
local now_s = string.format("%.17g", core.now())
local seq, left = 0, N
while left > 0 do
  local k = math.min(1000, left)
  local cmd = { script = "push", P, "", now_s }
  for _ = 1, k do
    seq = seq + 1
    for _, v in ipairs({ string.format("job%09d", seq), now_s, "-1", now_s, '""' }) do cmd[#cmd + 1] = v end
  end
  local r = conn:pipeline({ cmd })[1]
  assert(type(r) == "table" and not r.err, tostring(r and r.err))
  left = left - k
end
if MODE == "fetch" then
  local at, got, ack = string.format("%.17g", core.now() + 1), 0, ""
  while true do
    local r = conn:script("fetch", P, "tok", "30000", at, LIMIT, ack, "1", "0", "records")
    assert(r[1] == "OK", tostring(r[1]))
    if tonumber(r[6]) == 0 then break end
    got, ack = got + tonumber(r[6]), r[2]
  end
  assert(got == N, "fetched " .. got .. " of " .. N)
end
pcall(conn.call, conn, "SHUTDOWN", "NOSAVE")
