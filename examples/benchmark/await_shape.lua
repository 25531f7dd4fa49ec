-- The benchmark of jobs that wait for a reply (bench.lua --await N; issue 36's
-- numbers; docs/benchmarks.md, "Jobs that wait for a reply"). App:
-- app-await/ (worker Await: a job whose id starts with "w" awaits, on_reply
-- writes to files, every other job is blank). One redis-server (bench.lua's).
--
-- 1. Memory: N blank jobs queued (used_memory), then, on a fresh database, a
--    host (5 threads, 24 shards, batch 100, a --replies listener) started and
--    left idle (its VmRSS), the same N jobs pushed and awaited: VmRSS and
--    used_memory once all N wait. The host is stopped (the waits stay).
-- 2. Replies through reply.lua, a third of the tokens, sent by CLIENTS
--    processes of await_client.lua, PIPE calls in flight each: replies/s
--    from the first call to the last (the script alone: no host runs).
-- 3. Replies through POST /api/v1/replies/TOKEN, the next third, sent by
--    wrk (Debian's package) with await_wrk.lua to the --replies listener of
--    a host that only takes replies (app-replies/): the intake alone;
--    replies/s by Redis's replies_accepted counters, first to last.
-- 4. The host again: it handles those replies (on_reply calls/s), then
--    takes the last third by HTTP while it handles them as they come
--    (replies/s and handled/s, each id handled once).
-- 5. Latency: L = min(1,000, N / 10) more jobs awaited; replies sent one at a time through
--    reply.lua, 2-4 ms apart, each carrying its send time; on_reply writes
--    now - t. Percentiles.
-- 6. A shard with 1,000 waiting ids against one with none: one shard,
--    batch 1, N blank jobs drained, in --rounds alternating pairs.
-- 7. The I/O-bound shape with a callback: J = max(100, N / 20) jobs, each awaits and POSTs its
--    reply URL to callback_provider.py, which calls it back 1 s later
--    (5 threads, 200 shards, batch 1), against Sidekiq's 5 threads each
--    blocked 1 s in one GET (spec/helpers/httpd.py --delay-ms 1000), or its
--    bound (threads / delay) when Sidekiq is not installed.
--
-- M.run(B, n, rounds) returns the results; M.print(B, res) prints them.
local core = require "luakiq.core"
local keys = require "luakiq.lib.keys"
local runtime = require "luakiq.lib.runtime"
local client = require "luakiq.client"

local NS, QUEUE = "benchawait", "Await"
local SHARDS, BATCH = 24, 100        -- phases 1-5
local CLIENTS, PIPE = 4, 100         -- phase 2
local WRK_THREADS, WRK_CONNS = 1, 32 -- phases 3, 4 (one wrk thread leaves a core to the listener and Redis)
local WAITING_OTHERS = 1000          -- phase 6
local IO_SHARDS, IO_DELAY_MS = 200, 1000
local SIDEKIQ_IO_JOBS = 50           -- 10 s at Sidekiq's bound

local M = {}

local function app(B) return B.BENCH_DIR .. "/app-await" end

local function vm(pid, field)
  local f = io.open("/proc/" .. pid .. "/status")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  local kb = s:match(field .. ":%s*(%d+)")
  return kb and tonumber(kb) * 1024
end

local function used(conn) return tonumber(conn:call("INFO", "memory"):match("used_memory:(%d+)")) end

-- A connection of this module's own (the driver's counts its commands).
local function connect(B, shards)
  local cfg = runtime.load(app(B))
  cfg.by_name[QUEUE].shards_count = shards
  cfg.redis = B.REDIS_URL
  local conn = assert(runtime.connect(cfg, 5))
  assert(runtime.register(conn, cfg))
  return conn, cfg
end

-- Pushes ids prefix .. 1 .. prefix .. n (no payload) in calls of ENQUEUE_CALL.
local function push(B, conn, cfg, prefix, n)
  for from = 1, n, B.ENQUEUE_CALL do
    local chunk = {}
    for i = from, math.min(from + B.ENQUEUE_CALL - 1, n) do chunk[#chunk + 1] = { id = prefix .. i } end
    client.push(conn, cfg, QUEUE, chunk)
  end
end

-- The sums over shards 0..shards-1 of: jobs queued, busy, waiting, pending
-- waits and replies accepted.
local function counts(conn, shards)
  local cmds = {}
  for sh = 0, shards - 1 do
    local p = keys.prefix(NS, QUEUE, sh)
    cmds[#cmds + 1] = { "ZCARD", p .. "jobs" }
    cmds[#cmds + 1] = { "HLEN", p .. "busy" }
    cmds[#cmds + 1] = { "HLEN", p .. "waits" }
    cmds[#cmds + 1] = { "HLEN", p .. "waits:new" }
    cmds[#cmds + 1] = { "HGET", p .. "counters", "replies_accepted" }
  end
  local r = conn:pipeline(cmds)
  local c = { jobs = 0, busy = 0, waits = 0, new = 0, accepted = 0 }
  for i = 0, #r - 1, 5 do
    c.jobs, c.busy = c.jobs + r[i + 1], c.busy + r[i + 2]
    c.waits, c.new = c.waits + r[i + 3], c.new + r[i + 4]
    c.accepted = c.accepted + (tonumber(r[i + 5]) or 0)
  end
  return c
end

-- Polls (every `every` s) until done(c) for the counts c; returns the time
-- of the first poll where started(c) held (nil if none before done) and
-- the counts then, and the time done.
local function poll(conn, shards, limit, what, started, done, every)
  local deadline, t_first, c_first = core.now() + limit, nil, nil
  while true do
    core.sleep(every or 0.01)
    local c, now = counts(conn, shards), core.now()
    if not t_first and started and started(c) then t_first, c_first = now, c end
    if done(c) then return t_first, c_first, now, c end
    if now > deadline then
      error(("%s did not finish within %d s (jobs %d, busy %d, waiting %d, pending %d, accepted %d)"):format(
        what, limit, c.jobs, c.busy, c.waits, c.new, c.accepted), 0)
    end
  end
end

local function lines(path)
  local t = {}
  local f = io.open(path)
  if not f then return t end
  for l in f:lines() do t[#t + 1] = l end
  f:close()
  return t
end

-- Every line of dir's files name-*.txt (one per worker thread).
local function all_lines(B, dir, name)
  local t = {}
  local p = io.popen("ls " .. B.q(dir) .. " 2>/dev/null")
  for f in p:lines() do
    if f:match("^" .. name .. "%-%d+%.txt$") then
      for _, l in ipairs(lines(dir .. "/" .. f)) do t[#t + 1] = l end
    end
  end
  p:close()
  return t
end

local function write_lines(path, list, from, to)
  local f = assert(io.open(path, "w"))
  for i = from, to do f:write(list[i], "\n") end
  f:close()
end

local function pct(sorted, x) return sorted[math.max(1, math.ceil(#sorted * x))] end

local function median(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  local k = #s
  return k % 2 == 1 and s[(k + 1) / 2] or (s[k / 2] + s[k / 2 + 1]) / 2
end

local function host_env(B, dir, shards, batch, extra)
  local env = { BENCH_SHARDS = shards, BENCH_BATCH = batch, BENCH_THREADS = B.THREADS, REDIS_URL = B.REDIS_URL,
                BENCH_AWAIT_DIR = dir }
  for k, v in pairs(extra or {}) do env[k] = v end
  return env
end

-- The machine's CPU ticks so far: busy (all but idle and iowait) and all.
local function machine()
  local f = io.open("/proc/stat")
  local line = f and f:read("*l") or ""
  if f then f:close() end
  local v, i = {}, 0
  for x in line:gmatch("%d+") do i = i + 1 v[i] = tonumber(x) end
  local all = 0
  for k = 1, math.min(i, 8) do all = all + v[k] end
  return all - (v[4] or 0) - (v[5] or 0), all
end
local TICKS = tonumber(io.popen("getconf CLK_TCK"):read("*l")) or 100

-- Replies by HTTP: wrk (await_wrk.lua) sends tokens[from..to] to the
-- --replies listener at base_url of host pid. Returns the count accepted,
-- the rate (Redis's replies_accepted counters, first poll that saw one to
-- the last), with `handling` (the host runs their on_reply calls) the rate
-- they were handled at (until nothing waits but the rest of the tokens),
-- and CPU per reply of Redis, the host and wrk while the replies came.
local function http_replies(B, conn, pid, base_url, tokens, from, to, handling)
  local m = to - from + 1
  local file = B.TMP .. "/await-tokens-" .. from .. ".txt"
  write_lines(file, tokens, from, to)
  local c0 = counts(conn, SHARDS)
  local want, rest = c0.accepted + m, c0.waits - m
  local rcpu, hcpu, dcpu = B.redis_cpu(), B.cpu_secs(pid), B.cpu_secs(core.getpid())
  local busy0, all0 = machine()
  local limit = math.max(20, math.ceil(m / 1000)) -- (1,000 replies/s at least)
  local log = B.TMP .. "/wrk-" .. from .. ".log"
  local wpid = B.spawn(nil, "wrk -t " .. WRK_THREADS .. " -c " .. WRK_CONNS .. " -d " .. limit .. "s -s "
    .. B.q(B.BENCH_DIR .. "/await_wrk.lua") .. " " .. base_url .. " -- " .. B.q(file) .. " " .. WRK_THREADS, log)
  local ok, t_first, c_first, t_end, c_end = pcall(poll, conn, SHARDS, limit, "the HTTP replies",
    function(c) return c.accepted > c0.accepted end, function(c) return c.accepted >= want end)
  local wcpu = B.cpu_secs(wpid)
  local busy1, all1 = machine()
  B.stop(wpid)
  if not ok then error(t_first .. "; wrk log: " .. log, 0) end
  local r = { n = m, accepted = c_end.accepted - c0.accepted,
              rate = (c_end.accepted - c_first.accepted) / math.max(t_end - t_first, 1e-3),
              rcpu = (B.redis_cpu() - rcpu) / m, hcpu = (B.cpu_secs(pid) - hcpu) / m, wcpu = wcpu / m }
  -- how busy the machine's CPUs were meanwhile, and the part of it that was
  -- not this benchmark's (Redis, the host, wrk, this driver): other work
  local ours = (r.rcpu + r.hcpu + r.wcpu) * m + B.cpu_secs(core.getpid()) - dcpu
  local total = math.max(all1 - all0, 1)
  r.busy, r.others = (busy1 - busy0) / total, math.max(0, (busy1 - busy0) / TICKS - ours) / (total / TICKS)
  if handling then
    local _, _, t_done = poll(conn, SHARDS, 300, "the on_reply calls", nil, function(c)
      return c.waits == rest and c.busy == 0 and c.jobs == 0
    end)
    r.handled = m / math.max(t_done - t_first, 1e-3)
  end
  return r
end

-- Phases 1-5 (one host). Fills res.
local function main_host(B, n, res)
  local dir = B.TMP .. "/await"
  os.execute("rm -rf " .. B.q(dir) .. " && mkdir -p " .. B.q(dir))
  -- 1. the queued jobs' own memory
  B.fresh_db()
  local conn, cfg = connect(B, SHARDS)
  local base = used(conn)
  push(B, conn, cfg, "w", n)
  res.queued_b = (used(conn) - base) / n
  conn:close()
  B.fresh_db()
  conn, cfg = connect(B, SHARDS)
  local port = core.free_port()
  local base_url = "http://127.0.0.1:" .. port
  local log = B.TMP .. "/host-await.log"
  local pid
  local function start()
    pid = B.spawn(host_env(B, dir, SHARDS, BATCH, { LUAKIQ_PUBLIC_URL = base_url }),
      B.q(B.LUAKIQ) .. " run " .. B.q(app(B)) .. " --replies 127.0.0.1:" .. port, log)
  end
  start()
  local ok, err = pcall(function()
    core.sleep(1.5) -- started, every thread has fetched once: idle
    res.rss_idle = vm(pid, "VmRSS")
    base = used(conn)
    local t0 = core.now()
    push(B, conn, cfg, "w", n)
    local _, _, t1 = poll(conn, SHARDS, 300, "the awaits", nil, function(c)
      return c.waits == n and c.jobs == 0 and c.busy == 0 and c.new == 0
    end, 0.05)
    res.await_rate = n / (t1 - t0)
    core.sleep(0.5)
    res.rss_waiting, res.hwm = vm(pid, "VmRSS"), vm(pid, "VmHWM")
    res.waiting_b = (used(conn) - base) / n
    res.extra_b = res.waiting_b - res.queued_b
    local tokens = all_lines(B, dir, "tokens")
    assert(#tokens == n, ("%d tokens written for %d awaits"):format(#tokens, n))

    -- 2. replies through reply.lua, no host running (the waits stay: they
    -- are the shards', not the host's): the script alone
    B.stop(pid)
    local third = math.floor(n / 3)
    local all = B.TMP .. "/await-tokens.txt"
    write_lines(all, tokens, 1, n)
    local go = core.now() + 1.5 -- every client has read its tokens and connected
    local outs, per = {}, math.ceil(third / CLIENTS)
    local rcpu0 = B.redis_cpu()
    for k = 1, CLIENTS do
      local from, to = (k - 1) * per + 1, math.min(k * per, third)
      outs[k] = B.TMP .. "/await-client-" .. k .. ".out"
      B.spawn(nil, B.q(B.LUAKIQ) .. " lua " .. B.q(B.BENCH_DIR .. "/await_client.lua") .. " " .. table.concat({
        B.q(B.REDIS_URL), NS, QUEUE, SHARDS, B.q(all), from, to, PIPE, string.format("%.6f", go), B.q(outs[k]) }, " "),
        outs[k] .. ".log")
    end
    local starts, ends, sent, accepted = math.huge, 0, 0, 0
    local deadline = go + 120
    for k = 1, CLIENTS do
      while not lines(outs[k])[1] do -- (the file is made before its line is written)
        if core.now() > deadline then error("await_client.lua did not finish; see " .. outs[k] .. ".log", 0) end
        core.sleep(0.02)
      end
      local a, b, s, acc = lines(outs[k])[1]:match("^(%S+) (%S+) (%d+) (%d+)")
      starts, ends = math.min(starts, tonumber(a)), math.max(ends, tonumber(b))
      sent, accepted = sent + tonumber(s), accepted + tonumber(acc)
    end
    res.script = { n = third, sent = sent, accepted = accepted, rate = sent / (ends - starts),
                   rcpu = (B.redis_cpu() - rcpu0) / sent }

    -- 3. replies through POST /api/v1/replies/TOKEN to a host that only
    -- takes them (app-replies): the intake alone
    local lpid = B.spawn({ REDIS_URL = B.REDIS_URL }, B.q(B.LUAKIQ) .. " run " .. B.q(B.BENCH_DIR .. "/app-replies")
      .. " --replies 127.0.0.1:" .. port, B.TMP .. "/host-replies.log")
    core.sleep(1)
    local ok3, r3 = pcall(http_replies, B, conn, lpid, base_url, tokens, third + 1, 2 * third)
    B.stop(lpid)
    if not ok3 then error(r3, 0) end
    res.http = r3

    -- 4. the host again: it handles those replies (on_reply calls alone),
    -- then takes the last third by HTTP while handling them as they come
    start()
    local t2, c2, t3 = poll(conn, SHARDS, 300, "the on_reply calls", function(c) return c.waits < n end,
      function(c) return c.waits == n - 2 * third and c.busy == 0 and c.jobs == 0 end)
    res.handled = { rate = (c2 and (c2.waits - (n - 2 * third)) or 2 * third) / math.max(t3 - (t2 or t3), 1e-3) }
    core.sleep(0.5)
    res.live = http_replies(B, conn, pid, base_url, tokens, 2 * third + 1, n, true)
    local seen, dup = {}, 0
    for _, id in ipairs(all_lines(B, dir, "done")) do
      if seen[id] then dup = dup + 1 end
      seen[id] = true
    end
    local lost = 0
    for i = 1, n do if not seen["w" .. i] then lost = lost + 1 end end
    res.handled.lost, res.handled.dup = lost, dup
    res.handled.accepted = res.script.accepted + res.http.accepted + res.live.accepted
    if B.INTAKE then return end -- (--intake: the replies alone)

    -- 5. latency: L jobs awaited, replied to one at a time
    local L = res.latency_n
    local lat_jobs = {}
    for i = 1, L do lat_jobs[i] = { id = "wl" .. i } end
    client.push(conn, cfg, QUEUE, lat_jobs)
    poll(conn, SHARDS, 60, "the latency awaits", nil, function(c)
      return c.waits == L and c.jobs == 0 and c.busy == 0 and c.new == 0
    end, 0.05)
    local by_id = {}
    for _, l in ipairs(all_lines(B, dir, "tokens")) do
      local id, token = l:match("^(wl%d+) (%S+)")
      if id then by_id[id] = token end
    end
    core.sleep(0.5) -- the host idle
    math.randomseed(42)
    local channel = keys.wake_channel(NS)
    for i = 1, L do
      local id = "wl" .. i
      local now = core.now()
      local r = conn:script("reply", keys.prefix(NS, QUEUE, keys.shard(id, SHARDS)), "reply",
        string.format("%.17g", now), channel, tostring(SHARDS), "token", assert(by_id[id], id),
        string.format('{"t":%.6f}', now))
      assert(r == "accepted", tostring(r))
      core.sleep(0.002 + math.random() * 0.002) -- idle in between: every reply finds a sleeping host
    end
    poll(conn, SHARDS, 30, "the latency replies", nil, function(c) return c.waits == 0 and c.busy == 0 end, 0.05)
    local lat = {}
    for _, l in ipairs(all_lines(B, dir, "lat")) do lat[#lat + 1] = tonumber(l) end
    table.sort(lat)
    res.latency = { n = #lat, p50 = pct(lat, 0.5), p90 = pct(lat, 0.9), p99 = pct(lat, 0.99), max = lat[#lat] }
  end)
  B.stop(pid)
  conn:close()
  if not ok then error(err .. "; host log: " .. log, 0) end
end

-- Phase 6: the Redis CPU and drain rate of n blank jobs on one shard, with
-- `others` ids waiting there (made first by a host of their own) or none.
local function one_shard(B, n, others)
  local dir = B.TMP .. "/await-one"
  os.execute("rm -rf " .. B.q(dir) .. " && mkdir -p " .. B.q(dir))
  B.fresh_db()
  local conn, cfg = connect(B, 1)
  local log = B.TMP .. "/host-await-one.log"
  local env = host_env(B, dir, 1, 1)
  local ok, r = pcall(function()
    if others > 0 then
      push(B, conn, cfg, "w", others)
      local pid = B.spawn(env, B.q(B.LUAKIQ) .. " run " .. B.q(app(B)), log)
      local ok1, e = pcall(poll, conn, 1, 60, "the waiting ids", nil, function(c)
        return c.waits == others and c.jobs == 0 and c.busy == 0 and c.new == 0
      end, 0.05)
      B.stop(pid)
      if not ok1 then error(e, 0) end
    end
    push(B, conn, cfg, "b", n)
    local rcpu0 = B.redis_cpu()
    local t_spawn = core.now()
    local pid = B.spawn(env, B.q(B.LUAKIQ) .. " run " .. B.q(app(B)), log)
    local ok2, t_first, c_first, t_end = pcall(poll, conn, 1, 300, "the drain",
      function(c) return c.jobs + c.busy < n end, function(c) return c.jobs + c.busy == 0 end)
    local rcpu = B.redis_cpu() - rcpu0
    B.stop(pid)
    if not ok2 then error(t_first, 0) end
    -- (as bench.lua's drains: the jobs left at the first poll that saw one
    -- taken, over the time to drain them; a drain within one poll: all of
    -- them over the time since the start)
    local left = c_first and (c_first.jobs + c_first.busy) or 0
    local rate = (left > 0 and t_end > t_first) and left / (t_end - t_first) or n / (t_end - t_spawn)
    return { rate = rate, rcpu = rcpu / n, waits = counts(conn, 1).waits }
  end)
  conn:close()
  if not ok then error(r .. "; host log: " .. log, 0) end
  assert(r.waits == others, ("%d ids waiting after the drain, %d expected"):format(r.waits, others))
  return r
end

local function start_python(B, script, args, name)
  local portfile = B.TMP .. "/" .. name .. ".port"
  local pid = B.spawn(nil, "python3 " .. B.q(script) .. " " .. B.q(portfile) .. " " .. args,
    B.TMP .. "/" .. name .. ".log")
  local deadline = core.now() + 10
  while core.now() < deadline do
    local f = io.open(portfile)
    if f then
      local port = tonumber(f:read("*a"))
      f:close()
      if port then return pid, "http://127.0.0.1:" .. port end
    end
    core.sleep(0.05)
  end
  error(name .. " did not start; see " .. B.TMP .. "/" .. name .. ".log", 0)
end

local function get(B, url) return B.capture("curl -s --max-time 10 " .. B.q(url)) end

-- Phase 7, luakiq: j jobs, each awaits and asks the provider for a callback
-- in 1 s. Rate: j / (the first call's arrival at the provider .. the last
-- on_reply's end, polled).
local function io_luakiq(B, j)
  local dir = B.TMP .. "/await-io"
  os.execute("rm -rf " .. B.q(dir) .. " && mkdir -p " .. B.q(dir))
  local ppid, purl = start_python(B, B.BENCH_DIR .. "/callback_provider.py", "--delay-ms " .. IO_DELAY_MS, "provider")
  B.fresh_db()
  local conn, cfg = connect(B, IO_SHARDS)
  local port = core.free_port()
  local base_url = "http://127.0.0.1:" .. port
  local log = B.TMP .. "/host-await-io.log"
  local pid = B.spawn(host_env(B, dir, IO_SHARDS, 1, { LUAKIQ_PUBLIC_URL = base_url, BENCH_PROVIDER_URL = purl }),
    B.q(B.LUAKIQ) .. " run " .. B.q(app(B)) .. " --replies 127.0.0.1:" .. port, log)
  local ok, r = pcall(function()
    core.sleep(1.0)
    push(B, conn, cfg, "w", j)
    local ndone, t_end
    local deadline = core.now() + 300
    repeat
      core.sleep(0.05)
      ndone = tonumber(B.capture("cat " .. B.q(dir) .. "/done-*.txt 2>/dev/null | wc -l")) or 0
      t_end = core.now()
      if t_end > deadline then error(("the callback shape did not finish in 300 s (%d of %d)"):format(ndone, j), 0) end
    until ndone >= j
    local st = get(B, purl .. "/stats")
    local first = tonumber(st:match('"first": ([%d%.e+]+)'))
    local c = counts(conn, IO_SHARDS)
    local seen, dup, lost = {}, 0, 0
    for _, id in ipairs(all_lines(B, dir, "done")) do
      if seen[id] then dup = dup + 1 end
      seen[id] = true
    end
    for i = 1, j do if not seen["w" .. i] then lost = lost + 1 end end
    return { jobs = j, rate = j / (t_end - first), rss = B.peak_rss(pid), cpu = B.cpu_secs(pid) / j,
             lost = lost, dup = dup, left = c.jobs + c.busy + c.waits + c.new,
             failed = tonumber(st:match('"failed": (%d+)')) or -1 }
  end)
  B.stop(pid)
  B.stop(ppid)
  conn:close()
  if not ok then error(r .. "; host log: " .. log .. ", provider log: " .. B.TMP .. "/provider.log", 0) end
  return r
end

-- Phase 7, Sidekiq: m jobs, each one GET the server answers after 1 s.
-- Rate: m / (the first request's arrival .. the last one's + 1 s).
local function io_sidekiq(B, m)
  local spid, base = start_python(B, B.ROOT .. "/spec/helpers/httpd.py", "--delay-ms " .. IO_DELAY_MS, "httpd-1s")
  local ok, r = pcall(function()
    B.fresh_db()
    local sk = B.BENCH_DIR .. "/sidekiq"
    assert(B.ok("cd " .. B.q(sk) .. " && REDIS_URL=" .. B.q(B.REDIS_URL) .. " ruby push_http.rb " .. m .. " "
      .. B.q(base) .. " 2>" .. B.q(B.TMP .. "/sidekiq-push-await.log")), "sidekiq push failed")
    local pid = B.spawn({ REDIS_URL = B.REDIS_URL }, "sidekiq -r " .. B.q(sk .. "/http_worker.rb") .. " -c "
      .. B.THREADS .. " -t 2 -C /dev/null", B.TMP .. "/sidekiq-await.log")
    local deadline = core.now() + 120
    local times
    repeat
      core.sleep(0.2)
      times = {}
      for t in get(B, base .. "/times"):gmatch(",%s*([%d%.e+]+)%]") do times[#times + 1] = tonumber(t) end
      if core.now() > deadline then B.stop(pid) error("Sidekiq did not finish; see " .. B.TMP .. "/sidekiq-await.log", 0) end
    until #times >= m
    core.sleep(IO_DELAY_MS / 1000 + 0.1) -- the last requests' answers
    local rss, cpu = B.peak_rss(pid), B.cpu_secs(pid)
    B.stop(pid)
    table.sort(times)
    return { jobs = m, rate = m / (times[#times] + IO_DELAY_MS / 1000 - times[1]), rss = rss, cpu = cpu / m }
  end)
  B.stop(spid)
  if not ok then error(r, 0) end
  return r
end

function M.run(B, n, rounds)
  local res = { n = n, latency_n = math.max(10, math.min(1000, math.floor(n / 10))),
                io_n = math.max(100, math.floor(n / 20)), drain_n = n, rounds = rounds }
  io.stderr:write(("  await: %d jobs waiting on one host, replies by script and by HTTP, latency ...\n"):format(n))
  main_host(B, n, res)
  if B.INTAKE then return res end
  res.pairs = {}
  for r = 1, rounds do
    io.stderr:write(("  await: round %d, one shard, %d jobs with %d ids waiting / with none ...\n"):format(
      r, n, WAITING_OTHERS))
    local with = one_shard(B, res.drain_n, WAITING_OTHERS)
    local without = one_shard(B, res.drain_n, 0)
    res.pairs[r] = { with = with, without = without }
  end
  io.stderr:write(("  await: the callback shape, %d jobs, %d ms callbacks ...\n"):format(res.io_n, IO_DELAY_MS))
  res.io = io_luakiq(B, res.io_n)
  if B.SIDEKIQ_VERSION then
    io.stderr:write(("  await: Sidekiq, %d jobs blocked %d ms each ...\n"):format(SIDEKIQ_IO_JOBS, IO_DELAY_MS))
    res.io_sk = io_sidekiq(B, SIDEKIQ_IO_JOBS)
  end
  return res
end

function M.print(B, res)
  local function ms(x) return x and string.format("%.3f ms", x * 1000) or "?" end
  local function us(x) return string.format("%.1f us", x * 1e6) end
  print()
  print(("Jobs that wait for a reply: %d jobs waiting on one host (%d threads, %d shards, batch %d)"):format(
    res.n, B.THREADS, SHARDS, BATCH))
  B.print_table({ "waiting at once", "value" }, {
    { "awaits/s (push to every job waiting)", B.fmt_int(res.await_rate) },
    { "host VmRSS idle / with all waiting / peak", ("%s / %s / %s"):format(B.mb(res.rss_idle), B.mb(res.rss_waiting),
      B.mb(res.hwm)) },
    { "Redis bytes a job: queued / waiting", ("%.0f / %.0f"):format(res.queued_b, res.waiting_b) },
  })
  print()
  local s, h, d, live = res.script, res.http, res.handled, res.live
  B.print_table({ "replies", "replies", "replies/s", "Redis CPU/reply", "host CPU/reply", "wrk CPU/reply" }, {
    { ("reply.lua, %d clients of %d in flight, no host running"):format(CLIENTS, PIPE), B.fmt_int(s.sent),
      B.fmt_int(s.rate), us(s.rcpu), "-", "-" },
    { ("POST /api/v1/replies/TOKEN, wrk -t%d -c%d, a host that only takes replies"):format(WRK_THREADS, WRK_CONNS),
      B.fmt_int(h.n), B.fmt_int(h.rate), us(h.rcpu), us(h.hcpu), us(h.wcpu) },
    { "on_reply calls of those replies, the worker's host started after them", B.fmt_int(s.sent + h.n),
      B.fmt_int(d.rate), "-", "-", "-" },
    { "POST ... as above, to the worker's host, which handles them meanwhile", B.fmt_int(live.n),
      ("%s (handled %s/s)"):format(B.fmt_int(live.rate), B.fmt_int(live.handled)), us(live.rcpu), us(live.hcpu),
      us(live.wcpu) },
  })
  print("CPU per reply: user+system time while the replies came (with the handling they caused meanwhile, in the last")
  print("row: the host's listener and worker threads, Redis's fetches). handled/s: on_reply calls run per second.")
  print(("While the HTTP replies came the machine's CPUs were %.0f %% and %.0f %% busy, %.0f %% and %.0f %% of them by"
    .. " other work than this benchmark's"):format(h.busy * 100, live.busy * 100, h.others * 100, live.others * 100))
  print("(a shared machine: others' load slows the listener and the handling).")
  print(("accepted %d of %d; on_reply: lost %d, duplicated %d"):format(d.accepted, res.n, d.lost, d.dup))
  if B.INTAKE then return end
  print()
  local l = res.latency
  B.print_table({ ("idle reply -> on_reply start (%d shards, %d threads)"):format(SHARDS, B.THREADS), "replies", "p50",
                  "p90", "p99", "max" },
    { { "luakiq, reply.lua", l.n .. "/" .. res.latency_n, ms(l.p50), ms(l.p90), ms(l.p99), ms(l.max) } })
  print()
  local prow, ratios = {}, {}
  for i, p in ipairs(res.pairs) do
    ratios[i] = p.with.rate / p.without.rate
    prow[i] = { tostring(i), B.fmt_int(p.without.rate), us(p.without.rcpu), B.fmt_int(p.with.rate), us(p.with.rcpu),
                string.format("%.0f %%", ratios[i] * 100), string.format("%.0f %%", p.without.rcpu / p.with.rcpu * 100) }
  end
  B.print_table({ ("one shard, batch 1, %d blank jobs"):format(res.drain_n), "none waiting: jobs/s", "Redis CPU/job",
                  WAITING_OTHERS .. " waiting: jobs/s", "Redis CPU/job", "rate", "Redis-bound rate" }, prow)
  print()
  local io_ = res.io
  local rows = { { ("luakiq, %d threads, %d shards, batch 1, await + callback"):format(B.THREADS, IO_SHARDS),
                   B.fmt_int(io_.jobs), B.fmt_int(io_.rate), B.mb(io_.rss), ms(io_.cpu),
                   ("%d / %d / %d"):format(io_.lost, io_.dup, io_.left) } }
  local sk_rate, sk_how
  if res.io_sk then
    sk_rate, sk_how = res.io_sk.rate, "measured"
    rows[2] = { "Sidekiq " .. B.SIDEKIQ_VERSION .. " (concurrency 5, each blocked in a 1 s GET)", B.fmt_int(res.io_sk.jobs),
                string.format("%.2f", res.io_sk.rate), B.mb(res.io_sk.rss), ms(res.io_sk.cpu), "-" }
  else
    sk_rate, sk_how = B.THREADS / (IO_DELAY_MS / 1000), "its bound, threads / delay: Sidekiq not installed"
    rows[2] = { "Sidekiq, concurrency 5 blocked 1 s (bound, not run)", "-", string.format("%.2f", sk_rate), "-", "-", "-" }
  end
  B.print_table({ "I/O-bound, 1 s reply", "jobs", "jobs/s", "peak RSS", "CPU/job", "lost / dup / left" }, rows)
  print("jobs/s: jobs / (the first request's arrival .. the last job's end); luakiq's ends when on_reply has run")
  print(("for every job (the provider calls the --replies listener back %d ms after the request)."):format(IO_DELAY_MS))

  print()
  local trows = {}
  local function target(name, value, goal, peer, met)
    trows[#trows + 1] = { name, value, goal, peer or "-", met and "met" or "MISSED" }
  end
  local growth = res.rss_waiting - res.rss_idle
  target(("host RSS growth, %d waiting, over idle"):format(res.n), B.mb(growth), "<= 10 MB", nil, growth <= 10 * 1048576)
  target("Redis bytes a waiting job beyond the queued job's own", string.format("%.0f", res.extra_b), "<= 300", nil,
    res.extra_b <= 300)
  target("replies/s through reply.lua", B.fmt_int(s.rate), ">= 20,000", nil, s.rate >= 20000 and s.accepted == s.sent)
  target("replies/s through POST /api/v1/replies/TOKEN", B.fmt_int(h.rate), ">= 5,000", nil,
    h.rate >= 5000 and h.accepted == h.n)
  target("idle reply -> on_reply start p50", ms(l.p50), "<= 2 ms", nil, l.p50 and l.p50 <= 0.002 and l.n == res.latency_n)
  target("idle reply -> on_reply start p99", ms(l.p99), "<= 10 ms", nil, l.p99 and l.p99 <= 0.010 and l.n == res.latency_n)
  local mr = median(ratios)
  target(("drain with %d ids waiting vs none, one shard"):format(WAITING_OTHERS),
    string.format("%.0f %%%s", mr * 100, #ratios > 1 and (" (median of " .. #ratios .. ")") or ""), ">= 90 %", nil,
    mr >= 0.9)
  local x = io_.rate / sk_rate
  target("I/O-bound with a 1 s callback, jobs/s", string.format("%.0fx Sidekiq", x), ">= 100x",
    string.format("Sidekiq %.2f jobs/s (%s)", sk_rate, sk_how), x >= 100 and io_.lost + io_.dup + io_.left == 0)
  target("on_reply calls: lost / duplicated", ("%d / %d"):format(d.lost, d.dup), "0", nil, d.lost + d.dup == 0)
  B.print_table({ "target (issue 36)", "measured", "goal", "peer", "" }, trows)
end

return M
