-- The client of finished-memory.sh: per mode, FLUSHALL, N blank jobs
-- pushed into one shard (push.lua, calls of 1,000) and drained by
-- fetch.lua 100 at a time with acks (queue.fetch_cmd with the mode's
-- finished-jobs options, as the host sends them), then used_memory.
-- Usage: luakiq lua finished_memory.lua PORT N
local core = require "luakiq.core"
local queue = require "luakiq.runner.queue"
local port, N = arg[1], tonumber(arg[2])
local conn = assert(core.connect("redis://127.0.0.1:" .. port .. "/0", 30, "node"))
local P = "bench:{Q:0}:"

local function used()
  local info = conn:call("INFO", "memory")
  return tonumber(info:match("used_memory:(%d+)"))
end

local function run(w, result)
  conn:call("FLUSHALL")
  local now_s = string.format("%.17g", core.now())
  local seq = 0
  while seq < N do
    local cmd = { script = "push", P, "", now_s, "", "ids", now_s, "-1", now_s, '""' }
    for _ = 1, math.min(1000, N - seq) do
      seq = seq + 1
      cmd[#cmd + 1] = string.format("job%09d", seq)
    end
    local r = conn:pipeline({ cmd })[1]
    assert(type(r) == "table" and not r.err, tostring(r and r.err))
  end
  local fin = queue.finishing(w)
  local at, got, ack = string.format("%.17g", core.now() + 1), 0, nil
  while true do
    if fin and result then
      fin.results = {}
      for _, job in ipairs(ack and fin.jobs or {}) do
        fin.results[#fin.results + 1], fin.results[#fin.results + 2] = job.id, result
      end
    end
    local res = queue.parse_fetch(conn:pipeline({ queue.fetch_cmd(P, "tok", 30000, 100, ack, false, at, fin) })[1],
      { prefix = P })
    assert(not res.leased)
    if fin then fin.jobs = res.jobs end
    if not res.batch then break end
    got, ack = got + #res.jobs, res.batch
  end
  assert(got == N, "fetched " .. got .. " of " .. N)
  return used()
end

local base = run({})
local function show(what, w, result)
  local m = run(w, result)
  print(("%-58s %5.1f B/job"):format(what, (m - base) / N))
end
print(("%d jobs, one shard; plain drain: used_memory %d"):format(N, base))
show("keep_done (record + done:at entry, no result)", { keep_done = 86400, keep_done_max = N })
show('keep_done with a 16-byte result {"rows":12345678}', { keep_done = 86400, keep_done_max = N }, '{"rows":12345678}')
show("monotonic (P mono + P mono:at entry)", { monotonic = true, monotonic_ttl = 604800 })
pcall(conn.call, conn, "SHUTDOWN", "NOSAVE")
