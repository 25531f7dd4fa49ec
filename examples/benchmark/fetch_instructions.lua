-- The client of fetch-instructions.sh: pushes N blank jobs into one shard
-- (push.lua, calls of 1,000, ids in order, perform_in = now), then with
-- MODE "fetch" fetches them LIMIT at a time, each call acking the batch
-- before (queue.fetch_cmd, queue.parse_fetch: as the host does), then
-- shuts the server down.
-- With FETCH_LATER=1 each call's perform_in is 1 us below the last one's
-- (a producer whose clock lags): every job after the first call goes to
-- P later instead of P ready. With FETCH_IDS=random the ids start with 8
-- random hex digits (as random UUIDs: no range read, each id looked up
-- alone). With FETCH_IDS=spread the ids are the numbers 24, 48, 72, ...
-- (one shard's of 1, 2, 3, ... over 24 shards, as in run.sh's 24-shard
-- shape): those under 10,000 sort among longer ones (each looked up
-- alone), and a fetch across 9,984 and 10,008 reads two runs.
-- With FETCH_AWAITED=1 the shard has awaited before (P waits:seq set, none
-- waiting: docs/redis.md, "Jobs that wait for a reply"): the fetch's cost
-- for a worker that uses luakiq.await; FETCH_AWAITED=N (> 1): and N other
-- ids wait, their deadlines an hour away (their records stand-ins: the
-- fetch reads none).
-- MODE "none" pushes nothing (push's baseline). PUSH_FORM=groups sends
-- push.lua groups of 5 instead of its "ids" form, PUSH_FORM=pairs its
-- "pairs" form (docs/redis.md, push.lua).
-- FETCH_FIN=keep, mono or keep,mono: a worker with keep_done (a record kept
-- per job acked) and/or monotonic = true (docs/redis.md, "Finished jobs",
-- "Stale payloads").
-- Usage: luakiq lua fetch_instructions.lua PORT N MODE LIMIT
local core = require "luakiq.core"
local queue = require "luakiq.runner.queue"
local port, N, MODE, LIMIT = arg[1], tonumber(arg[2]), arg[3], arg[4]
local conn = assert(core.connect("redis://127.0.0.1:" .. port .. "/0", 30, "node"))
local P = "bench:{Q:0}:"
local now = core.now()
local now_s = string.format("%.17g", now)
local later = os.getenv("FETCH_LATER") == "1"
local random_ids = os.getenv("FETCH_IDS") == "random"
local spread_ids = os.getenv("FETCH_IDS") == "spread"
local form = os.getenv("PUSH_FORM") or "ids"
local seq, left, call = 0, MODE == "none" and 0 or N, 0
while left > 0 do
  local k = math.min(1000, left)
  local cmd = { script = "push", P, "", now_s }
  local pin_s = later and string.format("%.17g", now - call * 1e-6) or now_s
  call = call + 1
  if form == "ids" then
    for _, v in ipairs({ "", "ids", pin_s, "-1", pin_s, '""' }) do cmd[#cmd + 1] = v end
  elseif form == "pairs" then
    for _, v in ipairs({ "", "pairs", pin_s, "-1", pin_s }) do cmd[#cmd + 1] = v end
  end
  for _ = 1, k do
    seq = seq + 1
    local id = random_ids and string.format("%08x-%d", math.random(0, 0x7fffffff), seq)
      or spread_ids and tostring(24 * seq) or string.format("job%09d", seq)
    if form == "ids" then
      cmd[#cmd + 1] = id
    elseif form == "pairs" then
      cmd[#cmd + 1], cmd[#cmd + 2] = id, '""'
    else
      for _, v in ipairs({ id, pin_s, "-1", pin_s, '""' }) do cmd[#cmd + 1] = v end
    end
  end
  local r = conn:pipeline({ cmd })[1]
  assert(type(r) == "table" and not r.err, tostring(r and r.err))
  left = left - k
end
-- (in the push baseline too: the difference is the fetch's alone)
local awaited = MODE ~= "none" and tonumber(os.getenv("FETCH_AWAITED") or "0") or 0
if awaited > 0 then
  conn:call("EVAL", "redis.call('SET', KEYS[1] .. 'waits:seq', ARGV[1]) " ..
    "for i = 2, tonumber(ARGV[1]) do redis.call('ZADD', KEYS[1] .. 'waits:due', ARGV[2], 'waiting' .. i) " ..
    "redis.call('HSET', KEYS[1] .. 'waits', 'waiting' .. i, 'record') end", 1, P, tostring(awaited),
    string.format("%.17g", now + 3600))
end
if MODE == "fetch" then
  local at, got, ack = string.format("%.17g", core.now() + 1), 0, nil
  local fin_s = os.getenv("FETCH_FIN") or ""
  local fin = fin_s ~= "" and queue.finishing({ keep_done = fin_s:find("keep") and 86400 or 0, keep_done_max = N,
                                                monotonic = fin_s:find("mono") ~= nil, monotonic_ttl = 604800 }) or nil
  while true do
    local res = queue.parse_fetch(conn:pipeline({ queue.fetch_cmd(P, "tok", 30000, tonumber(LIMIT), ack, false, at,
      fin) })[1],
      { prefix = P })
    assert(not res.leased, "the lease is held elsewhere")
    if not res.batch then break end
    got, ack = got + #res.jobs, res.batch
  end
  assert(got == N, "fetched " .. got .. " of " .. N)
end
pcall(conn.call, conn, "SHUTDOWN", "NOSAVE")
