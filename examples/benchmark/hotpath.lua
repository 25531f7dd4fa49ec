-- Redis CPU and memory per job of the hot path (push.lua, fetch.lua with
-- acks) on one shard of a private redis-server, for whichever scripts the
-- running binary embeds (docs/benchmarks.md, "Layout 2 against layout 1").
-- Usage: BIN lua examples/benchmark/hotpath.lua [QUEUED...]   (default 100000 1000000)
-- Per QUEUED: push QUEUED blank jobs in calls of 1,000 (Redis CPU per job
-- from INFO cpu, used_memory per queued job), then fetch 100,000 of them
-- 10 at a time with acks, push 100,000 more (not measured) and fetch
-- 100,000 100 at a time (Redis CPU per fetched job). Before the fetches,
-- the Redis CPU of one listing page (100 jobs by perform_in) at offset 90 %
-- of QUEUED: as the shard is ("page_deep_ms"); walked instead of searched
-- (jobs.lua's "walk", the reference; only up to 100,000 queued:
-- "page_deep_walk_ms"); with 1,000 jobs of priority 50 besides
-- ("page_deep_levels_ms"); and then with 4 and 100 stale entries in ready
-- (jobs deleted: "page_deep_stale4_ms", "page_deep_stale100_ms", the latter
-- only up to 1,000,000 queued).
-- One line per figure: "QUEUED figure value".
-- BIN lua examples/benchmark/hotpath.lua fetch [QUEUED]   (default 100000):
-- fetch.lua alone on a shard of QUEUED blank jobs with nothing else in it
-- (no priorities, no stale entries): three rounds of, for limits 10 and 100,
-- push 20,000 more and fetch 20,000 with acks; per round and limit the Redis
-- CPU (INFO cpu) and the EVALSHA time (INFO commandstats) per fetched job.
-- Before the rounds it lets Redis finish growing P jobs' hash table
-- ("settle_ops": the lookups that took), which a push that crosses a power
-- of two (8,388,608 at 10M) leaves half-moved, one bucket a later command:
-- so the rounds measure a backlog that has waited, not the tail of its push.
-- BIN lua examples/benchmark/hotpath.lua flat [BIG] [SMALL]   (default
-- 10000000 10000): the same on one server, two shards, one with SMALL blank
-- jobs queued and one with BIG; ten rounds of, for limits 10 and 100, push
-- 2,000 more into each and fetch 2,000 from each with acks, the two shards in
-- turn (which one first alternates), so both points see the same moment of
-- a shared machine. Per round and limit: Redis CPU and EVALSHA time per
-- job on each, and BIG's over SMALL's; at the end the median ratios.
-- Run it against another tree's scripts with LUAKIQ_SCRIPTS=TREE/scripts.
-- HOTPATH_IDS=padded: ids "job" and ten digits (job0000000001, ...), which
-- sort as they are pushed, as fixed-width or time-ordered ids (ULIDs,
-- UUIDv7) do; by default "job1", "job2", ...: at 10M the oldest of those
-- interleave in byte order with millions of others ("job1", "job10",
-- "job100", ...), so fetch looks each of them up alone. HOTPATH_IDS=random:
-- 8 random hex digits, "-" and the number (as random UUIDs: every id is
-- looked up alone, at any size).
package.path = "spec/?.lua;" .. package.path
local core = require "luakiq.core"
local queue = require "luakiq.runner.queue"
local redis = require "helpers.redis"

local P, TOKEN = "bench:{Q:0}:", "bench-token" -- (P: the shard pushed and fetched)
local SAMPLE, CALL = 100000, 1000

local function info(srv, section, field)
  local text = srv.conn:call("INFO", section)
  return tonumber(text:match(field .. ":([%d%.]+)"))
end
local function cpu(srv) return info(srv, "cpu", "used_cpu_sys") + info(srv, "cpu", "used_cpu_user") end
local function mem(srv) return info(srv, "memory", "used_memory") end

local seq = 0
local ID_SHAPE = os.getenv("HOTPATH_IDS")
local function id_of(n)
  if ID_SHAPE == "padded" then return string.format("job%010d", n) end
  if ID_SHAPE == "random" then return string.format("%08x-%08x", math.random(0, 0x7fffffff), n) end
  return "job" .. n
end
-- Pushes n blank jobs (fresh ids, perform_in = score = now) in calls of
-- 1,000; of priority prio when given (else the default).
local function push(srv, n, now, prio)
  local now_s = string.format("%.17g", now)
  local left = n
  while left > 0 do
    local k = math.min(CALL, left)
    local cmd = { script = "push", P, "", now_s }
    for _ = 1, k do
      seq = seq + 1
      local m = #cmd
      cmd[m + 1], cmd[m + 2], cmd[m + 3], cmd[m + 4], cmd[m + 5] = id_of(seq), now_s, "-1", now_s, '""'
    end
    if prio then
      cmd[#cmd + 1], cmd[#cmd + 2] = "", "priority"
      for j = 1, k do cmd[#cmd + 1], cmd[#cmd + 2] = tostring(j), prio end
    end
    local r = srv.conn:pipeline({ cmd })[1]
    assert(type(r) == "table", tostring(r))
    left = left - k
  end
end

-- Fetches n jobs, limit at a time, acking each batch with the next call.
local function fetch(srv, n, limit, now)
  local now_s = string.format("%.17g", now + 1)
  local got, ack = 0, nil
  while got < n do
    local r = srv.conn:pipeline({ queue.fetch_cmd(P, TOKEN, 30000, limit, ack, false, now_s) })[1]
    local res = queue.parse_fetch(r, { prefix = P })
    assert(not res.leased, "the lease is held elsewhere")
    if not res.batch then break end
    got, ack = got + #res.jobs, res.batch
  end
  srv.conn:pipeline({ queue.fetch_cmd(P, TOKEN, 30000, 0, ack, false, now_s) })
  return got
end

-- Redis CPU (ms) of one page of 100 queued jobs by perform_in at offset off
-- (walked when walk).
local function page_ms(srv, off, walk)
  local c = cpu(srv)
  local args = { P, "queue", "perform_in", "asc", "-inf", "+inf", tostring(off), "100", "keys", walk and "walk" or nil }
  local r = srv.conn:script("jobs", unpack(args))
  assert(tonumber(r[1]) == 100, tostring(r[1]))
  return (cpu(srv) - c) * 1e3
end

local function evalsha_us(srv)
  return tonumber(srv.conn:call("INFO", "commandstats"):match("cmdstat_evalsha:calls=%d+,usec=(%d+)"))
end

-- Lookups in P jobs until its hash table is no longer being grown
-- (DEBUG HTSTATS-KEY; the server is started with debug commands allowed
-- from loopback); returns how many it took.
local function settle(srv)
  local ops = 0
  while srv.conn:call("DEBUG", "HTSTATS-KEY", P .. "jobs"):find("rehashing target", 1, true) do
    srv.conn:call("EVAL", "for i = 1, 100000 do redis.call('ZSCORE', KEYS[1], '') end", "1", P .. "jobs")
    ops = ops + 100000
  end
  return ops
end

-- The "fetch" mode (above).
local function fetch_only(srv, queued)
  local now = core.now()
  push(srv, queued, now)
  print(("%d settle_ops %d"):format(queued, settle(srv)))
  fetch(srv, 100, 10, now) -- (loads the script)
  for round = 1, 3 do
    for _, limit in ipairs { 10, 100 } do
      push(srv, 20000, now)
      local c0, e0 = cpu(srv), evalsha_us(srv)
      local got = fetch(srv, 20000, limit, now)
      local c1, e1 = cpu(srv), evalsha_us(srv)
      print(("%d fetch%d_round%d_us_per_job %.2f evalsha %.2f"):format(queued, limit, round,
        (c1 - c0) / got * 1e6, (e1 - e0) / got))
    end
  end
end

-- fn(srv, queued) on a fresh redis-server, stopped also on an error.
local function on_fresh_server(fn, ...)
  local srv = redis.start({ extra = " --enable-debug-command local" })
  local ok, err = pcall(fn, srv, ...)
  srv:stop()
  if not ok then
    redis.cleanup()
    error(err, 0)
  end
end

-- The "flat" mode (above). (push, fetch and settle work on the shard P
-- with the id counter seq: on(S, fn) points them at shard S for fn.)
local function on(S, fn)
  P, seq = S.P, S.seq
  fn()
  S.seq = seq
end
local function median(t)
  table.sort(t)
  local n = #t
  return n % 2 == 1 and t[(n + 1) / 2] or (t[n / 2] + t[n / 2 + 1]) / 2
end
local function flat(srv, big, small)
  local now = core.now()
  local A, B = { P = "bench:{Q:0}:", seq = 0, n = small }, { P = "bench:{Q:1}:", seq = 0, n = big }
  for _, S in ipairs({ A, B }) do
    on(S, function()
      push(srv, S.n, now)
      print(("%d settle_ops %d"):format(S.n, settle(srv)))
      fetch(srv, 100, 10, now) -- (loads the script)
    end)
  end
  local ratios = { [10] = {}, [100] = {} }
  for round = 1, 10 do
    for _, limit in ipairs({ 10, 100 }) do
      local us, ev = {}, {}
      for _, S in ipairs(round % 2 == 1 and { A, B } or { B, A }) do
        on(S, function()
          push(srv, 2000, now)
          local c0, e0 = cpu(srv), evalsha_us(srv)
          local got = fetch(srv, 2000, limit, now)
          us[S], ev[S] = (cpu(srv) - c0) / got * 1e6, (evalsha_us(srv) - e0) / got
        end)
      end
      local ratios_l = ratios[limit]
      ratios_l[#ratios_l + 1] = us[B] / us[A]
      print(("round %d fetch%d us_per_job %d: %.2f (evalsha %.2f) %d: %.2f (evalsha %.2f) ratio %.2f"):format(
        round, limit, small, us[A], ev[A], big, us[B], ev[B], us[B] / us[A]))
    end
  end
  for _, limit in ipairs({ 10, 100 }) do
    print(("fetch%d median_ratio %.2f"):format(limit, median(ratios[limit])))
  end
end

if ... == "fetch" then
  on_fresh_server(fetch_only, tonumber((select(2, ...))) or 100000)
  return
end
if ... == "flat" then
  on_fresh_server(flat, tonumber((select(2, ...))) or 10000000, tonumber((select(3, ...))) or 10000)
  return
end

local sizes = {}
for i = 1, select("#", ...) do sizes[#sizes + 1] = tonumber((select(i, ...))) end
if #sizes == 0 then sizes = { 100000, 1000000 } end
-- One size on a fresh redis-server (stopped by the caller, also on an error).
local function measure(srv, queued)
  local now = core.now()
  local m0, c0 = mem(srv), cpu(srv)
  push(srv, queued, now)
  local c1, m1 = cpu(srv), mem(srv)
  print(("%d push_us_per_job %.2f"):format(queued, (c1 - c0) / queued * 1e6))
  print(("%d bytes_per_queued_job %.1f"):format(queued, (m1 - m0) / queued))
  local off = math.floor(queued * 0.9)
  page_ms(srv, 0) -- (loads the script)
  print(("%d page_deep_ms %.2f"):format(queued, page_ms(srv, off)))
  if queued <= 100000 then -- (the walk: ~11 us per job skipped, past the client's timeout at 1M)
    print(("%d page_deep_walk_ms %.2f"):format(queued, page_ms(srv, off, true)))
  end
  -- priorities: 1,000 jobs of priority 50 over the same perform_in
  push(srv, 1000, now, "50")
  print(("%d page_deep_levels_ms %.2f"):format(queued, page_ms(srv, off)))
  -- stale entries: jobs spread over ready deleted (their entries stay)
  local function delete(from, to)
    local cmd = { script = "delete", P }
    for k = from, to do cmd[#cmd + 1] = "job" .. math.floor(k * queued / 101) end
    assert(type(srv.conn:pipeline({ cmd })[1]) == "number")
  end
  delete(1, 4)
  print(("%d page_deep_stale4_ms %.2f"):format(queued, page_ms(srv, off)))
  delete(5, 100)
  -- (100 stale ids: one pass over ready, ~0.15-0.2 us an entry, past the
  -- client's timeout of 5 s at 10M: measured up to 1M)
  if queued <= 1000000 then
    print(("%d page_deep_stale100_ms %.2f"):format(queued, page_ms(srv, off)))
  end
  local s = math.min(SAMPLE, queued)
  local c2 = cpu(srv)
  local got = fetch(srv, s, 10, now)
  local c3 = cpu(srv)
  print(("%d fetch10_us_per_job %.2f"):format(queued, (c3 - c2) / got * 1e6))
  push(srv, s, now)
  local c4 = cpu(srv)
  got = fetch(srv, s, 100, now)
  local c5 = cpu(srv)
  print(("%d fetch100_us_per_job %.2f"):format(queued, (c5 - c4) / got * 1e6))
end

for _, queued in ipairs(sizes) do on_fresh_server(measure, queued) end
redis.cleanup()
