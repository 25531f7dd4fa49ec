-- luakiq benchmark: `luakiq lua examples/benchmark/bench.lua [options]`
-- (or examples/benchmark/run.sh). See docs/benchmarks.md.
--
-- Starts a private redis-server on a free port in a temp dir, then per shape:
-- enqueues N blank jobs (timed), starts `luakiq run examples/benchmark/app`,
-- polls the shard keys every 10 ms until nothing is queued or in flight, and
-- stops the host. Then the same N jobs through Sidekiq (when installed), and
-- the latency mode (idle host, one job at a time), and the I/O-bound shape
-- (io_shape.lua: one 100 ms HTTP request per job, against Sidekiq too).
-- Prints the tables. Apart (alone, each runs nothing else): --cluster
-- (cluster_shape.lua), --big and --merge (large_shapes.lua), --await
-- (await_shape.lua: jobs that wait for a reply), --clients (clients_shape.lua:
-- the clients in clients/ against their ecosystems' peers).
local core = require "luakiq.core"
local runtime = require "luakiq.lib.runtime"
local client = require "luakiq.client"
local keys = require "luakiq.lib.keys"

local USAGE = [[
usage: luakiq lua examples/benchmark/bench.lua [options]
  --jobs N            jobs per shape (default 100000)
  --shapes LIST       comma-separated, from lag1,seq1,lag1x,b10,b100,thr1 (default all; none: skip),
                      and one1,one100 (one shard: one thread at a time), lag10 (batch 1, a fixed fetch of 10; not in the default)
  --latency N         latency mode over N jobs (default 1000; 0 = skip)
  --io N              I/O-bound shape: N jobs of one 100 ms HTTP request each (default 5000; 0 = skip;
                      Sidekiq runs N/10 of them); needs python3 and curl
  --sidekiq auto|no   run Sidekiq too when ruby + ruby-sidekiq are installed (default auto)
  --install-sidekiq   apt-get install ruby ruby-sidekiq ruby-hiredis first (root)
  --rounds N          measure the targets that compare with Sidekiq N times (default 3): each round after the
                      first runs lag1, seq1 and b100 (those of --shapes), Sidekiq and the CLI enqueue back to
                      back; a target is judged on the median of its rounds, all of them printed
  --markdown          print the tables as Markdown
  --redis-server PATH redis-server binary (default: from PATH)
  --unix              every client talks to Redis over a Unix socket (default: TCP on 127.0.0.1)
  --keep              keep the temp dir (logs, Redis dir)
  --commandstats      also print, per shape, each Redis command's calls and time per job
  --cluster           the Redis Cluster comparison (cluster_shape.lua): the --cluster-shapes against one
                      redis-server and a cluster of --masters masters (no replicas), each started here on
                      free ports; alone it runs nothing else (as --shapes none --latency 0 --io 0)
  --cluster-shapes L  shapes for --cluster (default lag1,b100)
  --masters N         masters of the --cluster cluster (default 3; 1: one cluster-enabled node with every slot)
  --trickle N         --cluster also pushes N jobs one at a time, 1 ms apart, to an idle host (default 3000;
                      0 = skip): wake-up PUBLISHes, Redis CPU per node, latency
  --replicas N        replicas per master of the --cluster cluster (default 0; needs --masters >= 3)
  --big N             the large-backlog shape (large_shapes.lua): enqueue N blank jobs (memory, enqueue rate
                      and Redis CPU per job), then drain --sample jobs with N queued and, in the same run, with
                      10,000 queued; refused when N x 500 bytes + 1 GiB is more than MemAvailable; alone it
                      runs nothing else
  --sample N          jobs drained per backlog by --big (default 100000)
  --big-ids padded    --big's ids as 10 digits (0000000001, ...), which sort as they are pushed; by default
                      1..N, whose oldest scatter in byte order under a large backlog (1, 10, 100, ...)
  --merge N           the merge-heavy shape (large_shapes.lua): N payloads, 100 for each of N/100 ids, pushed
                      in calls of 10,000 and drained, against Sidekiq's N jobs; alone it runs nothing else
  --await N           jobs that wait for a reply (await_shape.lua; issue 36's numbers): N jobs waiting on one
                      host (host RSS, Redis bytes), replies/s through reply.lua and through POST
                      /api/v1/replies/TOKEN (wrk), idle reply -> on_reply latency, one shard's drain with 1,000
                      ids waiting against none (--rounds pairs), and the I/O-bound shape with a 1 s callback
                      against Sidekiq blocked on the same 1 s; needs wrk and python3; alone it runs nothing else
  --intake            with --await: only the waits and the replies (reply.lua; HTTP to a host that only takes
                      them; their on_reply calls; HTTP to the worker's host while it handles them), for comparing
                      two builds of the --replies listener and of the handling
  --clients           the clients in clients/ (clients_shape.lua): each one's enqueue of --jobs blank jobs beside
                      its peer in the same process (Python: redis-py pipelined LPUSH of Sidekiq-format jobs;
                      Node.js: ioredis's; Ruby: Sidekiq's push_bulk) and `luakiq enqueue` of the same, --rounds
                      times; a client not installed is skipped; alone it runs nothing else]]

local SHAPES = {
  lag1 = { name = "lag, 5 shards, batch 1", shards = 5, batch = 1, scheduler = "lag" },
  seq1 = { name = "seq, 5 shards, batch 1", shards = 5, batch = 1, scheduler = "seq" },
  -- Lowkiq's one fetch per batch (fetch_size = batch_size), for comparison
  lag1x = { name = "lag, 5 shards, batch 1, fetch 1", shards = 5, batch = 1, fetch = 1, scheduler = "lag" },
  -- lag1 with the fixed fetch of 10 that was the default before fetches
  -- adapted (not in the default run; docs/benchmarks.md, "Fetches sized by time")
  lag10 = { name = "lag, 5 shards, batch 1, fetch 10", shards = 5, batch = 1, fetch = 10, scheduler = "lag" },
  b10 = { name = "lag, 24 shards, batch 10", shards = 24, batch = 10, scheduler = "lag" },
  b100 = { name = "lag, 24 shards, batch 100", shards = 24, batch = 100, scheduler = "lag" },
  -- lag1 with a throttle that lets everything run: what the running-set
  -- snapshot and the registration cost per call
  thr1 = { name = "lag, 5 shards, batch 1, throttle", shards = 5, batch = 1, scheduler = "lag", throttle = true },
  -- one shard (not in the default run): what one shard, so one thread at
  -- a time, can do; docs/benchmarks.md, "Redis Cluster", the model
  one1 = { name = "lag, 1 shard, batch 1", shards = 1, batch = 1, scheduler = "lag" },
  one100 = { name = "lag, 1 shard, batch 100", shards = 1, batch = 100, scheduler = "lag" },
}
local SHAPE_ORDER = { "lag1", "seq1", "lag1x", "b10", "b100", "thr1" }
-- the shapes of a target that --rounds measures again in each later round
local ROUND_SHAPES = { "lag1", "seq1", "b100" }
local THREADS = 5
local ENQUEUE_CALL = 10000 -- jobs per perform_async call (Lowkiq's benchmark: 10 x 10,000)
local POLL = 0.01

-- --- options ------------------------------------------------------------------
local opt = { jobs = 100000, shapes = SHAPE_ORDER, latency = 1000, io = 5000, sidekiq = "auto", rounds = 3,
              cluster_shapes = { "lag1", "b100" }, masters = 3, trickle = 3000, replicas = 0, sample = 100000 }
do
  local given = {}
  local i = 1
  while arg[i] do
    local a = arg[i]
    local function val() i = i + 1; return arg[i] or error("missing value for " .. a, 0) end
    if a == "--jobs" then opt.jobs = assert(tonumber(val()), "--jobs: a number")
    elseif a == "--shapes" then
      opt.shapes = {}
      for s in val():gmatch("[^,]+") do
        if s == "none" then break end
        if not SHAPES[s] then io.stderr:write("unknown shape " .. s .. "\n", USAGE, "\n") os.exit(2) end
        opt.shapes[#opt.shapes + 1] = s
      end
    elseif a == "--latency" then opt.latency = assert(tonumber(val()), "--latency: a number")
    elseif a == "--io" then opt.io = assert(tonumber(val()), "--io: a number")
    elseif a == "--sidekiq" then opt.sidekiq = val()
    elseif a == "--install-sidekiq" then opt.install = true
    elseif a == "--rounds" then
      opt.rounds = tonumber(val())
      if not opt.rounds or opt.rounds < 1 or opt.rounds % 1 ~= 0 then
        io.stderr:write("--rounds: a positive integer\n", USAGE, "\n") os.exit(2)
      end
    elseif a == "--markdown" then opt.markdown = true
    elseif a == "--redis-server" then opt.redis_server = val()
    elseif a == "--unix" then opt.unix = true
    elseif a == "--keep" then opt.keep = true
    elseif a == "--commandstats" then opt.commandstats = true
    elseif a == "--cluster" then opt.cluster = true
    elseif a == "--cluster-shapes" then
      opt.cluster_shapes = {}
      for s in val():gmatch("[^,]+") do
        if not SHAPES[s] then io.stderr:write("unknown shape " .. s .. "\n", USAGE, "\n") os.exit(2) end
        opt.cluster_shapes[#opt.cluster_shapes + 1] = s
      end
    elseif a == "--masters" then opt.masters = assert(tonumber(val()), "--masters: a number")
    elseif a == "--trickle" then opt.trickle = assert(tonumber(val()), "--trickle: a number")
    elseif a == "--replicas" then opt.replicas = assert(tonumber(val()), "--replicas: a number")
    elseif a == "--big" then opt.big = assert(tonumber(val()), "--big: a number")
    elseif a == "--sample" then opt.sample = assert(tonumber(val()), "--sample: a number")
    elseif a == "--big-ids" then
      opt.big_ids = val()
      if opt.big_ids ~= "padded" then io.stderr:write("--big-ids: only padded\n", USAGE, "\n") os.exit(2) end
    elseif a == "--merge" then opt.merge = assert(tonumber(val()), "--merge: a number")
    elseif a == "--await" then opt.await = assert(tonumber(val()), "--await: a number")
    elseif a == "--intake" then opt.intake = true
    elseif a == "--clients" then opt.clients = true
    else io.stderr:write(USAGE, "\n") os.exit(a == "--help" and 0 or 2) end
    given[a] = true
    i = i + 1
  end
  if opt.cluster or opt.big or opt.merge or opt.await or opt.clients then -- alone, each runs nothing else
    if not given["--shapes"] then opt.shapes = {} end
    if not given["--latency"] then opt.latency = 0 end
    if not given["--io"] then opt.io = 0 end
  end
end

-- --big N must fit in this machine's memory: ~350 bytes of Redis per queued
-- blank job today, counted as 500 (allocator, rehashing) plus 1 GiB for the
-- rest. Refused with one line before anything starts.
if opt.big then
  if opt.big < 20000 or opt.sample < 1000 then
    io.stderr:write("--big N needs N >= 20000 and --sample >= 1000\n") os.exit(2)
  end
  local f = io.open("/proc/meminfo")
  local avail = f and tonumber(f:read("*a"):match("MemAvailable:%s*(%d+)"))
  if f then f:close() end
  local need = opt.big * 500 + 2 ^ 30
  if avail and need > avail * 1024 then
    io.stderr:write(("--big %d: needs about %.1f GiB of memory (N x 500 bytes + 1 GiB), %.1f GiB available; refused\n")
      :format(opt.big, need / 2 ^ 30, avail / 2 ^ 20))
    os.exit(2)
  end
end
if opt.await and (opt.await < 100 or opt.await % 1 ~= 0) then
  io.stderr:write("--await N needs an integer N >= 100\n") os.exit(2)
end
local has_wrk = opt.await and os.execute("command -v wrk >/dev/null 2>&1")
if opt.await and has_wrk ~= 0 and has_wrk ~= true then
  io.stderr:write("--await needs wrk, the HTTP load generator: apt-get install wrk\n") os.exit(2)
end
if opt.merge and (opt.merge < 100 or opt.merge % 100 ~= 0) then
  io.stderr:write("--merge N needs a multiple of 100 (100 payloads per id)\n") os.exit(2)
end

-- --- processes ----------------------------------------------------------------
local function here()
  local src = debug.getinfo(1, "S").source:sub(2)
  local dir = src:match("^(.*)/[^/]*$") or "."
  local p = io.popen("cd '" .. dir .. "' && pwd")
  local abs = p:read("*l")
  p:close()
  return abs
end
local BENCH_DIR = here()
local APP = BENCH_DIR .. "/app"

local function self_exe()
  local p = io.popen("readlink /proc/" .. core.getpid() .. "/exe")
  local exe = p:read("*l")
  p:close()
  return exe
end
local LUAKIQ = self_exe()

local function capture(cmd)
  local p = io.popen(cmd)
  local out = p:read("*a")
  p:close()
  return out
end

local function ok(cmd)
  local r = os.execute(cmd)
  return r == 0 or r == true
end

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- Kills pid (then runs `after`, a shell command) once this driver is gone,
-- e.g. after a Ctrl-C: no redis-server or host outlives the benchmark.
local DRIVER_PID = core.getpid()
local function watchdog(pid, after)
  os.execute("(while kill -0 " .. DRIVER_PID .. " && kill -0 " .. pid .. "; do sleep 0.5; done 2>/dev/null;"
    .. " kill " .. pid .. " && sleep 5 && kill -9 " .. pid .. "; " .. (after or ":") .. ") >/dev/null 2>&1 </dev/null &")
end

-- cmd run with env (a table) added to its environment, as a shell line.
local function with_env(env, cmd)
  local e = {}
  for k, v in pairs(env or {}) do e[#e + 1] = k .. "=" .. q(v) end
  return (#e > 0 and "env " .. table.concat(e, " ") .. " " or "") .. cmd
end

-- Starts cmd in the background with output to logfile; returns its pid.
local function spawn(env, cmd, logfile)
  local line = "exec " .. with_env(env, cmd)
  local pid = capture("(" .. line .. ") > " .. q(logfile) .. " 2>&1 & echo $!")
  pid = assert(tonumber(pid), "spawn failed: " .. cmd)
  watchdog(pid)
  return pid
end

local function alive(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return false end
  local s = f:read("*a")
  f:close()
  return not s:match("^%d+ %b() Z")
end

local function peak_rss(pid)
  local f = io.open("/proc/" .. pid .. "/status")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  local kb = s:match("VmHWM:%s*(%d+)")
  return kb and tonumber(kb) * 1024
end

-- CPU seconds (user + system) a process has used so far.
local CLK = tonumber(capture("getconf CLK_TCK")) or 100
local function cpu_secs(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return 0 end
  local s = f:read("*a")
  f:close()
  local rest = s:match("^%d+ %b() (.*)$")
  local fields = {}
  for x in rest:gmatch("%S+") do fields[#fields + 1] = x end
  return (tonumber(fields[12]) + tonumber(fields[13])) / CLK -- utime, stime (fields 14, 15 of stat)
end

local function stop(pid, timeout)
  os.execute("kill -TERM " .. pid .. " 2>/dev/null")
  local deadline = core.now() + (timeout or 10)
  while alive(pid) and core.now() < deadline do core.sleep(0.02) end
  if alive(pid) then os.execute("kill -KILL " .. pid .. " 2>/dev/null") end
end

local TMP = capture("mktemp -d /tmp/luakiq-bench.XXXXXX"):gsub("%s+$", "")

-- --- Sidekiq ------------------------------------------------------------------
if opt.install then
  io.stderr:write("installing ruby, ruby-sidekiq, ruby-hiredis (apt-get)\n")
  if not ok("DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ruby ruby-sidekiq ruby-hiredis >"
      .. q(TMP .. "/apt.log") .. " 2>&1") then
    io.stderr:write("apt-get install failed, see " .. TMP .. "/apt.log\n")
    os.exit(1)
  end
end
local SIDEKIQ_VERSION
if opt.sidekiq ~= "no" then
  local v = capture("ruby -e 'require \"sidekiq\"; require \"hiredis\"; print Sidekiq::VERSION' 2>/dev/null")
  if v:match("^%d") and ok("command -v sidekiq >/dev/null 2>&1") then SIDEKIQ_VERSION = v end
end

-- --- Redis ----------------------------------------------------------------------
local REDIS_PORT = core.free_port()
local REDIS_SOCK = TMP .. "/redis.sock"
local REDIS_URL = opt.unix and ("unix://" .. REDIS_SOCK) or ("redis://127.0.0.1:" .. REDIS_PORT .. "/0")
local redis_bin = opt.redis_server or "redis-server"
if not ok(q(redis_bin) .. " --port " .. REDIS_PORT .. " --bind 127.0.0.1 --save '' --appendonly no"
    .. " --dir " .. q(TMP) .. " --daemonize yes --pidfile " .. q(TMP .. "/redis.pid")
    .. " --logfile " .. q(TMP .. "/redis.log")
    .. (opt.unix and (" --unixsocket " .. q(REDIS_SOCK) .. " --unixsocketperm 700") or "")) then
  error("cannot start " .. redis_bin, 0)
end
local conn
for _ = 1, 200 do
  conn = core.connect(REDIS_URL, 10)
  if conn and conn:pcall("PING") then break end
  conn = nil
  core.sleep(0.02)
end
assert(conn, "redis-server did not come up, see " .. TMP .. "/redis.log")
local REDIS_PID = tonumber((io.open(TMP .. "/redis.pid"):read("*l")))
watchdog(REDIS_PID, opt.keep and ":" or ("sleep 0.5; rm -rf " .. q(TMP)))
local REDIS_VERSION = conn:call("INFO", "server"):match("redis_version:([%d%.]+)")

local function cleanup()
  if REDIS_PID then stop(REDIS_PID) end
  if not opt.keep then os.execute("rm -rf " .. q(TMP)) end
end

-- Driver commands sent since the last reset: subtracted from commandstats.
local driver_cmds = 0
local function call(...)
  driver_cmds = driver_cmds + 1
  return conn:call(...)
end
local function pipeline(cmds)
  driver_cmds = driver_cmds + #cmds
  return conn:pipeline(cmds)
end

local function info_field(section, field)
  return tonumber(call("INFO", section):match(field .. ":([%d%.]+)"))
end

-- CPU seconds (user + system) redis-server has used so far, from INFO cpu:
-- the same account as cpu_secs(REDIS_PID), to the microsecond instead of
-- the clock tick (10 ms), for the short windows of large_shapes.lua.
local function redis_cpu()
  local s = call("INFO", "cpu")
  return tonumber(s:match("used_cpu_sys:([%d%.]+)")) + tonumber(s:match("used_cpu_user:([%d%.]+)"))
end

local function commandstats()
  local t, us = {}, {}
  for name, calls, usec in call("INFO", "commandstats"):gmatch("cmdstat_([^:]+):calls=(%d+),usec=(%d+)") do
    t[name], us[name] = tonumber(calls), tonumber(usec)
  end
  return t, us
end

-- --commandstats: per command, calls and Redis time per job of one drain.
local function print_commandstats(title, n, b, bu, a, au)
  if not opt.commandstats then return end
  local rows = {}
  for name, calls in pairs(a) do
    local d = calls - (b[name] or 0)
    if d > 0 then rows[#rows + 1] = { name, d / n, ((au[name] or 0) - (bu[name] or 0)) / n } end
  end
  table.sort(rows, function(x, y) return x[3] > y[3] end)
  io.stderr:write("  commandstats per job, " .. title .. " (driver's ZCARD/HLEN/LLEN/INFO included):\n")
  for _, r in ipairs(rows) do io.stderr:write(string.format("    %-22s %8.3f calls %8.2f us\n", r[1], r[2], r[3])) end
end

-- Requests a client sends itself; every other command ran inside a script.
local TOP = { evalsha = true, eval = true, evalsha_ro = true, eval_ro = true, ["script|load"] = true,
              subscribe = true, select = true, auth = true, ping = true, hello = true }

-- Deltas between two commandstats snapshots, minus the driver's own commands
-- (those sent after the first snapshot, the first INFO included).
local function command_delta(before, after)
  local total, top = 0, 0
  for name, n in pairs(after) do
    local d = n - (before[name] or 0)
    total = total + d
    if TOP[name] then top = top + d end
  end
  return total - driver_cmds, top
end

-- FLUSHALL (on a connection of its own with a long timeout when `long`:
-- millions of keys take longer than the driver's 10 s), then MEMORY PURGE.
local function fresh_db(long)
  if long then
    local c = assert(core.connect(REDIS_URL, 600))
    c:call("FLUSHALL")
    c:close()
  else
    call("FLUSHALL")
  end
  call("MEMORY", "PURGE")
  core.sleep(0.05)
end

-- --- luakiq shapes ---------------------------------------------------------------
local function shape_env(s, extra)
  local env = { BENCH_SHARDS = s.shards, BENCH_BATCH = s.batch, BENCH_FETCH = s.fetch or "",
                BENCH_SCHEDULER = s.scheduler, BENCH_THREADS = THREADS, REDIS_URL = REDIS_URL,
                BENCH_THROTTLE = s.throttle and "1" or "" }
  for k, v in pairs(extra or {}) do env[k] = v end
  return env
end

local function load_cfg(s)
  local cfg = runtime.load(APP)
  local w = cfg.by_name.Blank
  w.shards_count, w.batch_size = s.shards, s.batch
  if s.fetch then w.fetch_size, w.fetch_auto = s.fetch, nil end
  cfg.redis = REDIS_URL
  return cfg
end

-- Polls until pending() is 0. Returns the rate measured from the first poll
-- that saw work taken (jobs left then / time to drain them), and times.
local function wait_drain(n, pending, t_spawn, limit)
  local t_first, left_first, t_end
  local deadline = core.now() + (limit or 600)
  while true do
    core.sleep(POLL)
    local left = pending()
    local now = core.now()
    if left < n and not t_first then t_first, left_first = now, left end
    if left == 0 then t_end = now break end
    if now > deadline then error("drain did not finish within " .. (limit or 600) .. " s (" .. left .. " left)", 0) end
  end
  local rate
  if t_first and t_end > t_first and left_first > 0 then rate = left_first / (t_end - t_first)
  else rate = n / (t_end - t_spawn) end
  return rate, t_first and (t_first - t_spawn) or nil
end

-- A function that returns the jobs of the shape's queue that are queued or
-- in flight (every shard's jobs ZCARD + busy HLEN, one pipeline sent by
-- pipe, default the driver's connection).
local function pending_for(cfg, s, pipe)
  pipe = pipe or pipeline
  local poll_cmds = {}
  for sh = 0, s.shards - 1 do
    local p = keys.prefix(cfg.namespace, "Blank", sh)
    poll_cmds[#poll_cmds + 1] = { "ZCARD", p .. "jobs" }
    poll_cmds[#poll_cmds + 1] = { "HLEN", p .. "busy" }
  end
  return function()
    local sum = 0
    for _, r in ipairs(pipe(poll_cmds)) do sum = sum + r end
    return sum
  end
end

local function run_luakiq(key)
  local s = SHAPES[key]
  local n = opt.jobs
  fresh_db()
  local cfg = load_cfg(s)
  local rconn = assert(runtime.connect(cfg, 5))
  assert(runtime.register(rconn, cfg))
  local jobs = {}
  for i = 1, n do jobs[i] = { id = i } end
  local mem0 = info_field("memory", "used_memory")
  collectgarbage()
  local ecpu0 = cpu_secs(REDIS_PID)
  local t0 = core.now()
  for from = 1, n, ENQUEUE_CALL do
    local chunk = {}
    for i = from, math.min(from + ENQUEUE_CALL - 1, n) do chunk[#chunk + 1] = jobs[i] end
    client.push(rconn, cfg, "Blank", chunk)
  end
  local enq = n / (core.now() - t0)
  local ecpu = cpu_secs(REDIS_PID) - ecpu0
  rconn:close()
  jobs = nil
  local mem1 = info_field("memory", "used_memory")
  local pending = pending_for(cfg, s)
  assert(pending() == n, "enqueue lost jobs")

  driver_cmds = 0
  local before, before_us = commandstats()
  local rcpu0 = cpu_secs(REDIS_PID)
  local t_spawn = core.now()
  local pid = spawn(shape_env(s), q(LUAKIQ) .. " run " .. q(APP), TMP .. "/host-" .. key .. ".log")
  local ok_, rate, startup = pcall(wait_drain, n, pending, t_spawn)
  local after, after_us = commandstats()
  print_commandstats(s.name, n, before, before_us, after, after_us)
  local total, top = command_delta(before, after)
  local rss, hcpu, rcpu = peak_rss(pid), cpu_secs(pid), cpu_secs(REDIS_PID) - rcpu0
  stop(pid)
  if not ok_ then error(rate .. "; host log: " .. TMP .. "/host-" .. key .. ".log", 0) end
  return { name = "luakiq " .. s.name, enqueue = enq, drain = rate, calls = top / n, cmds = total / n,
           rss = rss, mem = (mem1 - mem0) / n, startup = startup,
           hcpu = hcpu / n, rcpu = rcpu / n, ercpu = ecpu / n, key = key,
           script = ((after_us.evalsha or 0) - (before_us.evalsha or 0)) / n }
end

-- --- Sidekiq ------------------------------------------------------------------------
local function run_sidekiq()
  local n = opt.jobs
  fresh_db()
  local mem0 = info_field("memory", "used_memory")
  local ecpu0 = cpu_secs(REDIS_PID)
  local out = capture("cd " .. q(BENCH_DIR .. "/sidekiq") .. " && REDIS_URL=" .. q(REDIS_URL)
    .. " ruby push.rb " .. n .. " 2>" .. q(TMP .. "/sidekiq-push.log"))
  local secs = tonumber(out)
  local ecpu = cpu_secs(REDIS_PID)
  if not secs then error("sidekiq push failed, see " .. TMP .. "/sidekiq-push.log", 0) end
  local mem1 = info_field("memory", "used_memory")
  local function pending() driver_cmds = driver_cmds + 1 return conn:call("LLEN", "queue:default") end
  assert(pending() == n, "sidekiq push lost jobs")
  driver_cmds = 0
  local before, before_us = commandstats()
  local rcpu0 = cpu_secs(REDIS_PID)
  local t_spawn = core.now()
  local pid = spawn({ REDIS_URL = REDIS_URL }, "sidekiq -r " .. q(BENCH_DIR .. "/sidekiq/worker.rb")
    .. " -c " .. THREADS .. " -t 2 -C /dev/null", TMP .. "/sidekiq.log")
  local ok_, rate, startup = pcall(wait_drain, n, pending, t_spawn)
  local after, after_us = commandstats()
  print_commandstats("Sidekiq", n, before, before_us, after, after_us)
  local total = command_delta(before, after)
  local rss, hcpu, rcpu = peak_rss(pid), cpu_secs(pid), cpu_secs(REDIS_PID) - rcpu0
  stop(pid)
  if not ok_ then error(rate .. "; sidekiq log: " .. TMP .. "/sidekiq.log", 0) end
  return { name = "Sidekiq " .. SIDEKIQ_VERSION .. " (concurrency 5, hiredis)", enqueue = n / secs, drain = rate,
           calls = total / n, cmds = total / n, rss = rss, mem = (mem1 - mem0) / n, startup = startup,
           hcpu = hcpu / n, rcpu = rcpu / n, ercpu = (ecpu - ecpu0) / n }
end

-- --- latency ----------------------------------------------------------------------------
local function run_latency(m)
  local s = SHAPES.lag1
  fresh_db()
  local cfg = load_cfg(s)
  local rconn = assert(runtime.connect(cfg, 5))
  assert(runtime.register(rconn, cfg))
  local dir = TMP .. "/latency"
  os.execute("mkdir -p " .. q(dir))
  local pid = spawn(shape_env(s, { BENCH_LATENCY_DIR = dir }), q(LUAKIQ) .. " run " .. q(APP), TMP .. "/host-latency.log")
  local pending = pending_for(cfg, s, function(cmds) return rconn:pipeline(cmds) end)
  -- Warm-up (not recorded): every thread fetches once, the host goes idle.
  client.push(rconn, cfg, "Blank", { { id = "warm-1" }, { id = "warm-2" }, { id = "warm-3" }, { id = "warm-4" }, { id = "warm-5" } })
  local deadline = core.now() + 15
  while pending() > 0 and core.now() < deadline do core.sleep(0.01) end
  core.sleep(0.3)
  math.randomseed(42)
  for i = 1, m do
    client.push(rconn, cfg, "Blank", { { id = "lat-" .. i, payload = { t = core.now() } } })
    core.sleep(0.002 + math.random() * 0.002) -- idle in between: every job finds a sleeping host
  end
  deadline = core.now() + 15
  while pending() > 0 and core.now() < deadline do core.sleep(0.01) end
  stop(pid)
  rconn:close()
  local lat = {}
  local p = io.popen("cat " .. q(dir) .. "/lat-*.txt 2>/dev/null")
  for line in p:lines() do lat[#lat + 1] = tonumber(line) end
  p:close()
  table.sort(lat)
  local function pct(x) return lat[math.max(1, math.ceil(#lat * x))] end
  return { n = #lat, expected = m, p50 = pct(0.5), p90 = pct(0.9), p99 = pct(0.99), max = lat[#lat] }
end

-- --- output -------------------------------------------------------------------------------
local function fmt_int(x)
  local s = string.format("%.0f", x)
  return (s:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", ""))
end
local function mb(x) return x and string.format("%.1f MB", x / 1048576) or "?" end
local function ms(x) return x and string.format("%.3f ms", x * 1000) or "?" end

local COLS = { "shape", "enqueue jobs/s", "drain jobs/s", "calls/job", "cmds/job", "peak RSS", "Redis B/job",
               "host CPU/job", "Redis CPU/job" }
local function row_cells(r)
  return { r.name, fmt_int(r.enqueue), fmt_int(r.drain), string.format("%.3f", r.calls),
           string.format("%.1f", r.cmds), mb(r.rss), string.format("%.0f", r.mem),
           string.format("%.1f us", r.hcpu * 1e6), string.format("%.1f us", r.rcpu * 1e6) }
end

local function print_table(cols, rows)
  if opt.markdown then
    print("| " .. table.concat(cols, " | ") .. " |")
    local sep = {}
    for i = 1, #cols do sep[i] = i == 1 and "---" or "---:" end
    print("|" .. table.concat(sep, "|") .. "|")
    for _, r in ipairs(rows) do print("| " .. table.concat(r, " | ") .. " |") end
    return
  end
  local w = {}
  for i, c in ipairs(cols) do w[i] = #c end
  for _, r in ipairs(rows) do for i, c in ipairs(r) do w[i] = math.max(w[i], #c) end end
  local function line(r)
    local out = {}
    for i, c in ipairs(r) do
      out[i] = i == 1 and c .. string.rep(" ", w[i] - #c) or string.rep(" ", w[i] - #c) .. c
    end
    print(table.concat(out, "  "))
  end
  line(cols)
  local dash = {}
  for i = 1, #cols do dash[i] = string.rep("-", w[i]) end
  print(table.concat(dash, "  "))
  for _, r in ipairs(rows) do line(r) end
end

-- --- limits ---------------------------------------------------------------------------------
-- Round trips alone: redis-benchmark, 5 connections, one EVALSHA of
-- "return 1" in flight each (what 5 worker threads with batch_size 1 do,
-- minus all the work).
local function evalsha_rate()
  if not ok("command -v redis-benchmark >/dev/null 2>&1") then return nil end
  local sha = call("SCRIPT", "LOAD", "return 1")
  local where = opt.unix and (" -s " .. q(REDIS_SOCK)) or (" -h 127.0.0.1 -p " .. REDIS_PORT)
  local out = capture("redis-benchmark" .. where .. " -c 5 -n 100000 -q evalsha " .. sha .. " 0 2>&1")
  return tonumber(out:match("([%d%.]+) requests per second"))
end

-- The enqueue a user runs: `luakiq enqueue APP Blank FILE` of n JSON lines
-- {"id":i} (the lag shape's config), timed from the process's start to its
-- exit (start-up, both passes over the file and the pushes). Returns
-- jobs/s and Redis CPU seconds per job.
local function cli_enqueue(n)
  fresh_db()
  local file = TMP .. "/jobs.jsonl"
  local f = assert(io.open(file, "w"))
  for i = 1, n do f:write('{"id":', i, '}\n') end
  f:close()
  local c0, t0 = cpu_secs(REDIS_PID), core.now()
  local out = capture(with_env(shape_env(SHAPES.lag1), q(LUAKIQ) .. " enqueue " .. q(APP) .. " Blank " .. q(file)
    .. " --redis " .. q(REDIS_URL)) .. " 2>&1")
  local secs, used = core.now() - t0, cpu_secs(REDIS_PID) - c0
  assert(out:match("enqueued " .. n .. " jobs"), "luakiq enqueue: " .. out)
  os.remove(file)
  fresh_db()
  return n / secs, used / n
end

-- The floor of an enqueue: the writes push.lua makes for new blank jobs due
-- now in a shard whose P ready is empty (layout 2, docs/redis.md: a member
-- esc(id) .. "\0\0" .. record of P jobs per job and its id in P ready, each
-- variadic per 1,000 jobs, then P tail), sent as plain pipelined commands
-- without a script, against a Sidekiq-like LPUSH of the same number of
-- 50-byte JSON strings. Returns Redis CPU seconds per job for both
-- (FLUSHALL before and after).
local function enqueue_floor(n)
  local now = string.format("%.17g", core.now())
  -- the record of a blank job (place "r", perform_in, payload "", its score
  -- = perform_in written as nil), encoded by Redis's own cmsgpack as push.lua does
  local rec = "r" .. call("EVAL", "return cmsgpack.pack(tonumber(ARGV[1]), '', nil)", "0", now)
  local function measure(build)
    fresh_db()
    local c0 = cpu_secs(REDIS_PID)
    for i = 0, n - 1, 1000 do pipeline(build(i, math.min(i + 999, n - 1))) end
    local used = cpu_secs(REDIS_PID) - c0
    fresh_db()
    return used / n
  end
  local writes = measure(function(from, to)
    local jobs, ready = { "ZADD", "f:{Q:0}:jobs" }, { "RPUSH", "f:{Q:0}:ready" }
    for j = from, to do
      local id = tostring(j)
      jobs[#jobs + 1], jobs[#jobs + 2] = "0", id .. "\0\0" .. rec
      ready[#ready + 1] = id
    end
    return { jobs, ready, { "SET", "f:{Q:0}:tail", now } }
  end)
  local lpush = measure(function(from, to)
    local l = { "LPUSH", "queue:default" }
    for j = from, to do l[#l + 1] = string.format('{"class":"Blank","args":[],"jid":"%024d"}', j) end
    return { l }
  end)
  return writes, lpush
end

-- --- main -------------------------------------------------------------------------------------
local main_ok, main_err = xpcall(function()
  local cpu = capture("grep -m1 'model name' /proc/cpuinfo"):match(":%s*(.-)%s*$") or "?"
  print(string.format("luakiq benchmark, %s; %d jobs per shape, %d threads; Redis %s (%s); %s x %s",
    os.date("%Y-%m-%d %H:%M"), opt.jobs, THREADS, REDIS_VERSION, opt.unix and "Unix socket" or ("TCP 127.0.0.1:" .. REDIS_PORT),
    capture("nproc"):gsub("%s", ""), cpu))
  local results, by_key = {}, {}
  for _, key in ipairs(opt.shapes) do
    io.stderr:write("  luakiq " .. SHAPES[key].name .. " ...\n")
    results[#results + 1] = run_luakiq(key)
    by_key[key] = results[#results]
  end
  local sk
  if SIDEKIQ_VERSION and #results > 0 then
    io.stderr:write("  Sidekiq " .. SIDEKIQ_VERSION .. " ...\n")
    sk = run_sidekiq()
  elseif opt.sidekiq ~= "no" and not SIDEKIQ_VERSION then
    io.stderr:write("  Sidekiq: not installed (ruby, ruby-sidekiq, ruby-hiredis; --install-sidekiq), skipped\n")
  end
  -- (right after Sidekiq, whose push_bulk it is compared with)
  local cli_rate, cli_cpu
  if #results > 0 then
    io.stderr:write("  luakiq enqueue FILE ...\n")
    cli_rate, cli_cpu = cli_enqueue(opt.jobs)
  end
  -- Round 1 is the above; each further round measures the target shapes,
  -- Sidekiq and the CLI again, back to back (ROUND_SHAPES), so that a slow
  -- minute of this shared machine meets both sides of a ratio
  local rounds = { { by_key = by_key, sk = sk, cli_rate = cli_rate } }
  for r = 2, #results > 0 and opt.rounds or 1 do
    local rd = { by_key = {} }
    for _, key in ipairs(ROUND_SHAPES) do
      if by_key[key] then
        io.stderr:write("  round " .. r .. ": luakiq " .. SHAPES[key].name .. " ...\n")
        rd.by_key[key] = run_luakiq(key)
      end
    end
    if sk then
      io.stderr:write("  round " .. r .. ": Sidekiq ...\n")
      rd.sk = run_sidekiq()
    end
    io.stderr:write("  round " .. r .. ": luakiq enqueue FILE ...\n")
    rd.cli_rate = cli_enqueue(opt.jobs)
    rounds[r] = rd
  end
  local lat
  if opt.latency > 0 then
    io.stderr:write("  latency, " .. opt.latency .. " jobs one at a time ...\n")
    lat = run_latency(opt.latency)
  end
  local io_shape, io_lk, io_sk
  if opt.io > 0 then
    io_shape = dofile(BENCH_DIR .. "/io_shape.lua")
    local B = { capture = capture, q = q, ok = ok, spawn = spawn, stop = stop, peak_rss = peak_rss,
                cpu_secs = cpu_secs, fresh_db = fresh_db, TMP = TMP, BENCH_DIR = BENCH_DIR,
                ROOT = BENCH_DIR .. "/../..", LUAKIQ = LUAKIQ, THREADS = THREADS, REDIS_URL = REDIS_URL,
                SIDEKIQ_VERSION = SIDEKIQ_VERSION, print_table = print_table, fmt_int = fmt_int, mb = mb }
    io_lk, io_sk = io_shape.run(B, opt.io)
    io_shape.B = B
  end
  local cl_shape, cl_rows, cl_idle, cl_pub, cl_tr
  if opt.cluster then
    cl_shape = dofile(BENCH_DIR .. "/cluster_shape.lua")
    local B = { ok = ok, q = q, spawn = spawn, stop = stop, cpu_secs = cpu_secs, wait_drain = wait_drain,
                TMP = TMP, APP = APP, LUAKIQ = LUAKIQ, THREADS = THREADS, SHAPES = SHAPES,
                ENQUEUE_CALL = ENQUEUE_CALL, print_table = print_table, fmt_int = fmt_int, COMMANDSTATS = opt.commandstats,
                pending_for = pending_for }
    cl_rows, cl_idle, cl_pub, cl_tr = cl_shape.run(B, opt.cluster_shapes, opt.jobs, opt.masters, opt.trickle, opt.replicas)
    cl_shape.B = B
  end
  local large, big_res, merge_rows
  if opt.big or opt.merge then
    large = dofile(BENCH_DIR .. "/large_shapes.lua")
    large.B = { call = call, info_field = info_field, redis_cpu = redis_cpu, commandstats = commandstats,
                command_delta = command_delta, reset_driver = function() driver_cmds = 0 end,
                print_commandstats = print_commandstats,
                fresh_db = fresh_db, pending_for = pending_for, load_cfg = load_cfg, shape_env = shape_env,
                capture = capture, q = q, spawn = spawn, stop = stop, cpu_secs = cpu_secs, TMP = TMP,
                BENCH_DIR = BENCH_DIR, APP = APP, LUAKIQ = LUAKIQ, THREADS = THREADS, REDIS_URL = REDIS_URL,
                SIDEKIQ_VERSION = SIDEKIQ_VERSION, SHAPES = SHAPES, ENQUEUE_CALL = ENQUEUE_CALL, POLL = POLL,
                print_table = print_table, fmt_int = fmt_int, mb = mb }
    if opt.merge then merge_rows = large.merge(large.B, opt.merge) end
    if opt.big then big_res = large.big(large.B, opt.big, opt.sample, opt.big_ids == "padded") end
  end
  local await_shape, await_res
  if opt.await then
    await_shape = dofile(BENCH_DIR .. "/await_shape.lua")
    await_shape.B = { capture = capture, q = q, ok = ok, spawn = spawn, stop = stop, peak_rss = peak_rss,
                      cpu_secs = cpu_secs, redis_cpu = redis_cpu, fresh_db = fresh_db, TMP = TMP,
                      BENCH_DIR = BENCH_DIR, ROOT = BENCH_DIR .. "/../..", LUAKIQ = LUAKIQ, THREADS = THREADS,
                      REDIS_URL = REDIS_URL, SIDEKIQ_VERSION = SIDEKIQ_VERSION, ENQUEUE_CALL = ENQUEUE_CALL,
                      print_table = print_table, fmt_int = fmt_int, mb = mb, INTAKE = opt.intake }
    await_res = await_shape.run(await_shape.B, opt.await, opt.rounds)
  end
  local clients_shape, clients_res
  if opt.clients then
    clients_shape = dofile(BENCH_DIR .. "/clients_shape.lua")
    clients_shape.B = { capture = capture, q = q, ok = ok, fresh_db = fresh_db, cli_enqueue = cli_enqueue, TMP = TMP,
                        BENCH_DIR = BENCH_DIR, ROOT = BENCH_DIR .. "/../..", REDIS_URL = REDIS_URL,
                        ENQUEUE_CALL = ENQUEUE_CALL, print_table = print_table, fmt_int = fmt_int }
    clients_res = clients_shape.run(clients_shape.B, opt.jobs, opt.rounds)
  end
  local rtt, floor_w, floor_l
  if #results > 0 then
    io.stderr:write("  redis-benchmark ...\n")
    rtt = evalsha_rate()
    io.stderr:write("  enqueue floor ...\n")
    floor_w, floor_l = enqueue_floor(opt.jobs)
  end

  if #results > 0 then
  print()
  local rows = {}
  for _, r in ipairs(results) do rows[#rows + 1] = row_cells(r) end
  if sk then rows[#rows + 1] = row_cells(sk) end
  print_table(COLS, rows)
  print()
  print("enqueue: perform_async in calls of " .. ENQUEUE_CALL .. " jobs (Sidekiq: one push_bulk); drain: jobs left at the")
  print("first poll that saw work taken / time until nothing is queued or in flight (10 ms polls, start-up excluded);")
  print("calls/job: requests sent to Redis (EVALSHA...) per job; cmds/job: every command Redis ran, inside scripts too;")
  print("peak RSS: VmHWM of the worker process; Redis B/job: used_memory growth per queued job;")
  print("CPU/job: user+system time of the worker process (start-up included) and of redis-server during the drain.")
  if sk then
    print()
    local rrows = {}
    for _, r in ipairs(results) do
      rrows[#rrows + 1] = { r.name, string.format("%.2fx", r.enqueue / sk.enqueue), string.format("%.2fx", r.drain / sk.drain),
        string.format("%.3fx", r.calls / sk.calls), string.format("%.2fx", r.cmds / sk.cmds),
        string.format("%.2fx", (r.rss or 0) / (sk.rss or 1)), string.format("%.2fx", r.mem / sk.mem) }
    end
    print_table({ "luakiq / Sidekiq", "enqueue", "drain", "calls/job", "cmds/job", "peak RSS", "Redis B/job" }, rrows)
  end
  if lat then
    print()
    print_table({ "idle enqueue -> perform (lag, 5 shards, 5 threads)", "jobs", "p50", "p90", "p99", "max" },
      { { "luakiq", lat.n .. "/" .. lat.expected, ms(lat.p50), ms(lat.p90), ms(lat.p99), ms(lat.max) } })
  end

  -- What bounds each rate: redis-server is one thread, so a rate cannot pass
  -- 1 / (Redis CPU per job); 5 unpipelined connections cannot pass the raw
  -- EVALSHA round-trip rate.
  print()
  local lrows = {}
  for _, r in ipairs(results) do
    lrows[#lrows + 1] = { r.name, string.format("%.1f us", r.ercpu * 1e6), fmt_int(1 / r.ercpu),
      string.format("%.1f us", r.rcpu * 1e6), string.format("%.1f us", r.script), fmt_int(1 / r.rcpu) }
  end
  if sk then
    lrows[#lrows + 1] = { sk.name, string.format("%.1f us", sk.ercpu * 1e6), fmt_int(1 / sk.ercpu),
      string.format("%.1f us", sk.rcpu * 1e6), "-", fmt_int(1 / sk.rcpu) }
  end
  print_table({ "Redis-bound ceilings", "enqueue Redis CPU/job", "enqueue ceiling/s",
                "drain Redis CPU/job", "of it in scripts", "drain ceiling/s" }, lrows)
  if rtt then
    print(string.format("raw round trips: redis-benchmark -c 5 EVALSHA 'return 1': %s calls/s", fmt_int(rtt)))
  end
  print(string.format("enqueue by the CLI: luakiq enqueue APP Blank FILE of %d JSON lines: %s jobs/s%s, Redis %.1f us/job",
    opt.jobs, fmt_int(cli_rate), sk and string.format(" (%.2fx push_bulk)", cli_rate / sk.enqueue) or "", cli_cpu * 1e6))
  print(string.format("enqueue floor: a new job's writes as plain pipelined commands (no script) cost Redis %.1f us/job"
    .. " (ceiling %s jobs/s); LPUSH of the same number of jobs: %.2f us/job", floor_w * 1e6, fmt_int(1 / floor_w),
    floor_l * 1e6))
  end -- #results > 0
  if io_lk then
    print()
    io_shape.print(io_shape.B, io_lk, io_sk)
  end

  if cl_rows then cl_shape.print(cl_shape.B, cl_rows, cl_idle, opt.masters, cl_pub, cl_tr) end
  if merge_rows then large.print_merge(large.B, merge_rows) end
  if big_res then large.print_big(large.B, big_res) end
  if await_res then await_shape.print(await_shape.B, await_res) end
  if clients_res then clients_shape.print(clients_shape.B, clients_res) end

  -- The issue's targets.
  if #results == 0 and not lat and not io_lk then return end
  print()
  local trows = {}
  local function target(name, value, goal, met)
    trows[#trows + 1] = { name, value, goal, met == nil and "n/a" or (met and "met" or "MISSED") }
  end
  -- (the storage issue's goals, docs/benchmarks.md "The targets": drain
  -- >= 12x Sidekiq in Lowkiq's shape and >= 20x with 24 shards of batch
  -- 100, Redis CPU <= 4 us a job in Lowkiq's shape, enqueue >= 2x push_bulk
  -- in-process and by the CLI; before it, 3x and 10x.) Each is a figure of
  -- one round (rd: its shapes by key, its Sidekiq, its CLI rate), judged
  -- on the median of the rounds that have it.
  local function drain_x(key)
    return function(rd)
      local r = rd.by_key[key]
      return r and rd.sk and r.drain / rd.sk.drain
    end
  end
  local function per_round(name, fmt, goal, met, figure)
    local xs = {}
    for _, rd in ipairs(rounds) do xs[#xs + 1] = figure(rd) end
    if #xs == 0 then return end
    table.sort(xs)
    local m = #xs % 2 == 1 and xs[(#xs + 1) / 2] or (xs[#xs / 2] + xs[#xs / 2 + 1]) / 2
    local shown = string.format(fmt, m)
    if #xs > 1 then shown = shown .. " (median of " .. #xs .. ")" end
    target(name, shown, goal, met(m))
  end
  local function at_least(v) return function(x) return x >= v end end
  for _, key in ipairs { "lag1", "seq1" } do
    per_round("drain, " .. SHAPES[key].name, "%.2fx Sidekiq", ">= 12x", at_least(12), drain_x(key))
  end
  local function rcpu_lag1(rd) return rd.by_key.lag1 and rd.by_key.lag1.rcpu * 1e6 end
  per_round("Redis CPU per job drained, " .. SHAPES.lag1.name, "%.1f us", "<= 4 us", function(x) return x <= 4.05 end, rcpu_lag1)
  if by_key.lag1x and sk then -- not a target: shows what fetch_size buys
    target("drain, " .. SHAPES.lag1x.name, string.format("%.2fx Sidekiq", by_key.lag1x.drain / sk.drain), "(info)", nil)
  end
  per_round("drain, " .. SHAPES.b100.name, "%.2fx Sidekiq", ">= 20x", at_least(20), drain_x("b100"))
  -- (round 1 has every shape of --shapes, a later round its ROUND_SHAPES)
  local function enqueue_worst(rd)
    if not rd.sk then return nil end
    local worst
    for _, r in pairs(rd.by_key) do worst = math.min(worst or math.huge, r.enqueue / rd.sk.enqueue) end
    return worst
  end
  local function cli_x(rd) return rd.sk and rd.cli_rate and rd.cli_rate / rd.sk.enqueue end
  per_round("enqueue (worst shape)", "%.2fx push_bulk", ">= 2x", at_least(2), enqueue_worst)
  per_round("enqueue by `luakiq enqueue FILE`", "%.2fx push_bulk", ">= 2x", at_least(2), cli_x)
  if #rounds > 1 then
    -- every round's figures, so a median hides nothing
    local rows = {}
    for i, rd in ipairs(rounds) do
      local function cell(fmt, v) return v and string.format(fmt, v) or "-" end
      rows[i] = { tostring(i), rd.sk and fmt_int(rd.sk.drain) or "-", rd.sk and fmt_int(rd.sk.enqueue) or "-",
        cell("%.2fx", drain_x("lag1")(rd)), cell("%.2fx", drain_x("seq1")(rd)), cell("%.1f us", rcpu_lag1(rd)),
        cell("%.2fx", drain_x("b100")(rd)), cell("%.2fx", enqueue_worst(rd)), cell("%.2fx", cli_x(rd)),
        cell("%s", rd.cli_rate and fmt_int(rd.cli_rate)) }
    end
    print_table({ "round", "Sidekiq drain/s", "push_bulk/s", "drain lag1", "drain seq1", "Redis CPU lag1",
                  "drain b100", "enqueue (worst)", "enqueue CLI", "CLI jobs/s" }, rows)
    print()
  end
  -- (a throttle adds one round trip per perform call by design, its
  -- registration: docs/benchmarks.md, "A throttled worker's cost"; its
  -- shape is held to that allowance apart, 1 + 1 per call of batch 1)
  local calls, plain = 0, false
  for key, r in pairs(by_key) do
    if not SHAPES[key].throttle then calls, plain = math.max(calls, r.calls), true end
  end
  if plain then target("Redis calls per job (worst shape)", string.format("%.3f", calls), "<= 1", calls <= 1.005) end
  if by_key.thr1 then
    local c = by_key.thr1.calls
    target("Redis calls per job, " .. SHAPES.thr1.name, string.format("%.3f", c), "<= 2", c <= 2.005)
  end
  if lat then
    target("idle enqueue -> perform p50", ms(lat.p50), "<= 1 ms", lat.p50 and lat.p50 <= 0.001)
    target("idle enqueue -> perform p99", ms(lat.p99), "<= 5 ms", lat.p99 and lat.p99 <= 0.005)
  end
  local rss = 0
  for _, r in ipairs(results) do rss = math.max(rss, r.rss or 0) end
  if #results > 0 then
    target("host peak RSS, 5 threads (worst shape)", mb(rss), "<= 20 MB", rss <= 20 * 1048576)
    local mem = 0
    for _, r in ipairs(results) do mem = math.max(mem, r.mem) end
    target("Redis memory per queued blank job", string.format("%.0f bytes", mem), "reported", true)
  end
  if io_lk then
    local clean = io_lk.lost + io_lk.dup + io_lk.order + io_lk.left == 0
    target("I/O-bound, 100 ms HTTP: lost, duplicated, out of order, left", ("%d / %d / %d / %d"):format(
      io_lk.lost, io_lk.dup, io_lk.order, io_lk.left), "0", clean)
    if io_sk then
      local x = io_lk.rate / io_sk.rate
      target("I/O-bound, 100 ms HTTP: jobs/s", string.format("%.1fx Sidekiq", x), ">= 20x", x >= 20)
    end
  end
  print_table({ "target", "measured", "goal", "" }, trows)
end, debug.traceback)
cleanup()
if not main_ok then
  io.stderr:write("benchmark failed: " .. tostring(main_err) .. "\n")
  if not opt.keep then io.stderr:write("(re-run with --keep to keep the logs)\n") end
  return 1 -- not os.exit: the host closes its Lua state and connections on the way out
end
