-- The Redis Cluster comparison of the benchmark (bench.lua --cluster): the
-- same shapes against (a) one redis-server and (b) a Redis Cluster of 3
-- masters (--masters; --replicas per master, none by default), each
-- started here on free ports and stopped by pid. Per shape and target:
-- enqueue and drain jobs/s, the host's CPU per job, and per Redis node its
-- CPU time per job (INFO's used_cpu_user + used_cpu_sys: the whole
-- redis-server process, in microseconds), the requests clients sent it per
-- job (EVALSHA... from INFO commandstats) and the commands it ran per job
-- (scripts' commands too), minus the driver's own polling and INFO. Then,
-- per target, a trickle (jobs pushed one at a time to an idle host) and
-- what a wake-up PUBLISH costs each node.
--
-- On one machine the masters share its cores with each other and with the
-- host, so jobs/s says little about a cluster of machines; the per-job costs
-- do, and the model (printed after the tables, and in docs/benchmarks.md,
-- "Redis Cluster") turns them into ceilings for N masters.
--
-- run(B, shapes, n, masters, trickle, replicas) with B the driver's
-- helpers returns rows, idle, pub, tr; print(B, rows, idle, masters, pub, tr)
-- prints them.
local core = require "luakiq.core"
local keys = require "luakiq.lib.keys"
local runtime = require "luakiq.lib.runtime"
local client = require "luakiq.client"

local M = {}

-- Requests a client sends itself (as bench.lua's TOP).
local TOP = { evalsha = true, eval = true, evalsha_ro = true, eval_ro = true, ["script|load"] = true,
              subscribe = true, select = true, auth = true, ping = true, hello = true }

local function free_ports(k, taken)
  local out = {}
  while #out < k do
    local p = core.free_port()
    if not taken[p] then taken[p] = true out[#out + 1] = p end
  end
  return out
end

-- Starts one redis-server (not daemonized: B.spawn gives its pid and a
-- watchdog) in a dir of its own; waits until it answers.
local function start_node(B, name, port, extra)
  local dir = B.TMP .. "/" .. name
  assert(B.ok("mkdir -p " .. B.q(dir)))
  local pid = B.spawn(nil, "redis-server --port " .. port .. " --bind 127.0.0.1 --save '' --appendonly no"
    .. " --dir " .. B.q(dir) .. (extra or ""), dir .. "/redis.log")
  local url = "redis://127.0.0.1:" .. port
  for _ = 1, 250 do
    local c = core.connect(url, 5, "node")
    if c and c:pcall("PING") == "PONG" then
      return { name = name, port = port, pid = pid, url = url, conn = c, dir = dir }
    end
    if c then c:close() end
    core.sleep(0.02)
  end
  error("redis-server " .. name .. " did not come up, see " .. dir .. "/redis.log", 0)
end

local function stop_all(B, target)
  for _, n in ipairs(target.nodes) do
    if n.conn then n.conn:close() n.conn = nil end
    os.execute("kill -TERM " .. n.pid .. " 2>/dev/null")
  end
  for _, n in ipairs(target.nodes) do B.stop(n.pid) end
end

local function single(B, taken)
  local port = free_ports(1, taken)[1]
  local n = start_node(B, "single", port)
  return { name = "1 redis-server", nodes = { n }, url = n.url .. "/0" }
end

-- A cluster of `masters` masters, no replicas, as `redis-cli --cluster
-- create` makes one. cluster-node-timeout 15 s: a node starved of CPU by
-- this benchmark must not be marked failing.
local function cluster(B, taken, masters, replicas)
  replicas = replicas or 0
  if replicas > 0 and masters < 3 then error("--replicas needs --masters 3 or more", 0) end
  local total = masters * (1 + replicas)
  local ports, bus = free_ports(total, taken), free_ports(total, taken)
  local t = { name = masters .. "-master cluster" .. (replicas > 0 and (", " .. replicas .. " replica each") or ""),
              nodes = {} }
  local ok_, err = pcall(function()
    for i = 1, total do
      t.nodes[i] = start_node(B, "node" .. i, ports[i], " --cluster-enabled yes --cluster-config-file nodes.conf"
        .. " --cluster-port " .. bus[i] .. " --cluster-node-timeout 15000 --repl-diskless-sync-delay 0")
    end
    local addrs = {}
    for i, n in ipairs(t.nodes) do addrs[i] = "127.0.0.1:" .. n.port end
    local log = B.TMP .. "/cluster-create.log"
    if masters < 3 then -- redis-cli wants 3: give the slots by hand (one master: all of them)
      for i, n in ipairs(t.nodes) do
        n.conn:call("CLUSTER", "ADDSLOTSRANGE", tostring(math.floor((i - 1) * 16384 / masters)),
          tostring(math.floor(i * 16384 / masters) - 1))
        if i > 1 then n.conn:call("CLUSTER", "MEET", "127.0.0.1", tostring(t.nodes[1].port), tostring(bus[1])) end
      end
    elseif not B.ok("redis-cli --cluster create " .. table.concat(addrs, " ") .. " --cluster-replicas " .. replicas
        .. " --cluster-yes >" .. B.q(log) .. " 2>&1") then
      error("redis-cli --cluster create failed, see " .. log, 0)
    end
    local deadline = core.now() + 60
    while true do
      local all = true
      for _, n in ipairs(t.nodes) do
        local info = n.conn:pcall("CLUSTER", "INFO")
        if not (type(info) == "string" and info:find("cluster_state:ok", 1, true)
            and info:find("cluster_known_nodes:" .. total, 1, true)) then all = false end
        local repl = n.conn:pcall("INFO", "replication")
        if type(repl) ~= "string" or (repl:find("role:slave", 1, true) and not repl:find("master_link_status:up", 1, true)) then
          all = false
        end
      end
      if all then break end
      if core.now() > deadline then error("the cluster did not become ok", 0) end
      core.sleep(0.1)
    end
    -- node order: the masters by their first slot, then the replicas in
    -- the order of their masters (the tables list nodes in this order)
    local first, ms, rs = {}, {}, {}
    for _, r in ipairs(t.nodes[1].conn:call("CLUSTER", "SLOTS")) do
      local port = tonumber(r[3][2])
      first[port] = math.min(first[port] or math.huge, r[1])
    end
    for _, n in ipairs(t.nodes) do
      local role = n.conn:call("ROLE")
      if role[1] == "master" then n.role = "master" ms[#ms + 1] = n
      else n.role, n.master_port = "replica", tonumber(role[3]) rs[#rs + 1] = n end
    end
    table.sort(ms, function(a, b) return first[a.port] < first[b.port] end)
    local rank = {}
    for i, n in ipairs(ms) do rank[n.port] = i end
    table.sort(rs, function(a, b) return (rank[a.master_port] or 0) < (rank[b.master_port] or 0) end)
    t.nodes = ms
    for _, n in ipairs(rs) do t.nodes[#t.nodes + 1] = n end
    t.url = "redis://" .. table.concat(addrs, ",", 1, math.min(3, #addrs))
  end)
  if not ok_ then stop_all(B, t) error(err, 0) end
  return t
end

-- The node (index into target.nodes) serving each slot range.
local function node_of_prefix(target, prefix)
  if #target.nodes == 1 then return 1 end
  local slot = core.key_slot(prefix)
  for _, r in ipairs(target.nodes[1].conn:call("CLUSTER", "SLOTS")) do
    if slot >= r[1] and slot <= r[2] then
      for i, n in ipairs(target.nodes) do
        if n.port == tonumber(r[3][2]) then return i end
      end
    end
  end
  error("no node serves slot " .. slot)
end

local function flush(target)
  for _, n in ipairs(target.nodes) do
    if n.role ~= "replica" then n.conn:call("FLUSHALL") end
  end
  for _, n in ipairs(target.nodes) do n.conn:call("MEMORY", "PURGE") end
  core.sleep(0.05)
end

-- One INFO per node: its commands' calls and its CPU seconds (user +
-- system, every thread of the process: getrusage, microseconds).
local function snapshot(n)
  local text = n.conn:call("INFO", "cpu", "commandstats")
  local t = {}
  for name, calls in text:gmatch("cmdstat_([^:]+):calls=(%d+),usec=%d+") do t[name] = tonumber(calls) end
  local sys, user = text:match("used_cpu_sys:([%d%.]+)"), text:match("used_cpu_user:([%d%.]+)")
  return t, tonumber(sys) + tonumber(user)
end

local function cpus(B, target)
  local t = {}
  for i, n in ipairs(target.nodes) do t[i] = select(2, snapshot(n)) end
  return t
end

-- Redis CPU per second of each node while nothing runs (the cluster bus's
-- pings and cron): measured over `secs`.
local function idle_cpu(B, target, secs)
  local c0 = cpus(B, target)
  core.sleep(secs)
  local c1 = cpus(B, target)
  local out = {}
  for i = 1, #c0 do out[i] = (c1[i] - c0[i]) / secs end
  return out
end

-- The app's config for shape s on target, the queue registered (flushed
-- first); returns cfg and a client connection.
local function prepare(B, target, s)
  flush(target)
  local cfg = runtime.load(B.APP)
  local w = cfg.by_name.Blank
  w.shards_count, w.batch_size = s.shards, s.batch
  if s.fetch then w.fetch_size, w.fetch_auto = s.fetch, nil end
  cfg.redis = target.url
  local rconn = assert(runtime.connect(cfg, 5))
  assert(runtime.register(rconn, cfg))
  return cfg, rconn
end

local function run_shape(B, target, s, n)
  local cfg, rconn = prepare(B, target, s)
  local jobs = {}
  for i = 1, n do jobs[i] = { id = i } end
  collectgarbage()
  local ecpu0 = cpus(B, target)
  local t0 = core.now()
  for from = 1, n, B.ENQUEUE_CALL do
    local chunk = {}
    for i = from, math.min(from + B.ENQUEUE_CALL - 1, n) do chunk[#chunk + 1] = jobs[i] end
    client.push(rconn, cfg, "Blank", chunk)
  end
  local enq = n / (core.now() - t0)
  local ecpu1 = cpus(B, target)
  rconn:close()
  jobs = nil

  -- the driver polls each node for its own shards: it knows what it sent where
  local poll, shards_on = {}, {}
  for i = 1, #target.nodes do poll[i], shards_on[i] = {}, 0 end
  for sh = 0, s.shards - 1 do
    local p = keys.prefix(cfg.namespace, "Blank", sh)
    local i = node_of_prefix(target, p)
    shards_on[i] = shards_on[i] + 1
    poll[i][#poll[i] + 1] = { "ZCARD", p .. "jobs" }
    poll[i][#poll[i] + 1] = { "HLEN", p .. "busy" }
  end
  local driver = {}
  local function pending()
    local sum = 0
    for i, node in ipairs(target.nodes) do
      if #poll[i] > 0 then
        driver[i] = driver[i] + #poll[i]
        for _, r in ipairs(node.conn:pipeline(poll[i])) do sum = sum + r end
      end
    end
    return sum
  end
  for i = 1, #target.nodes do driver[i] = 0 end
  assert(pending() == n, "enqueue lost jobs")

  local before, rcpu0 = {}, {}
  for i, node in ipairs(target.nodes) do driver[i] = 1 before[i], rcpu0[i] = snapshot(node) end -- that INFO counts
  local t_spawn = core.now()
  local env = { BENCH_SHARDS = s.shards, BENCH_BATCH = s.batch, BENCH_FETCH = s.fetch or "",
                BENCH_SCHEDULER = s.scheduler, BENCH_THREADS = B.THREADS, REDIS_URL = target.url, BENCH_THROTTLE = "" }
  local log = B.TMP .. "/host-" .. s.key .. "-" .. (#target.nodes > 1 and "cluster" or "single") .. ".log"
  local pid = B.spawn(env, B.q(B.LUAKIQ) .. " run " .. B.q(B.APP), log)
  local ok_, rate = pcall(B.wait_drain, n, pending, t_spawn)
  local hcpu = B.cpu_secs(pid)
  local per, rcpu1 = {}, {}
  for i, node in ipairs(target.nodes) do
    local after
    after, rcpu1[i] = snapshot(node)
    local total, top = 0, 0
    for name, c in pairs(after) do
      local d = c - (before[i][name] or 0)
      total = total + d
      if TOP[name] then top = top + d end
    end
    per[i] = { calls = top / n, cmds = (total - driver[i]) / n, rcpu = (rcpu1[i] - rcpu0[i]) / n,
               ercpu = (ecpu1[i] - ecpu0[i]) / n, shards = shards_on[i] }
  end
  B.stop(pid)
  if not ok_ then error(rate .. "; host log: " .. log, 0) end
  local r = { shape = s.name, target = target.name, enqueue = enq, drain = rate, hcpu = hcpu / n, per = per,
              calls = 0, cmds = 0, rcpu = 0, ercpu = 0, maxshare = 0 }
  r.replicas = 0
  for i, p in ipairs(per) do
    if target.nodes[i].role == "replica" then
      p.replica, r.replicas = true, r.replicas + p.rcpu + p.ercpu
    else
      r.calls, r.cmds, r.rcpu, r.ercpu = r.calls + p.calls, r.cmds + p.cmds, r.rcpu + p.rcpu, r.ercpu + p.ercpu
    end
  end
  for _, p in ipairs(per) do if not p.replica then r.maxshare = math.max(r.maxshare, p.rcpu / r.rcpu) end end
  return r
end

-- A wake-up's cost: push.lua PUBLISHes a shard's prefix on NS:wake when it
-- makes the shard's head earlier (one job into an idle shard), and on a
-- cluster a PUBLISH goes to every node over the cluster bus. K PUBLISHes
-- sent to the first node, pipelined, one subscriber (redis-cli, reading as
-- a host's subscriber would) on the last node; per node the CPU per
-- PUBLISH, less its idle rate over the time taken.
local PUBLISHES = 20000
local function publish_cost(B, target, idle)
  local last = target.nodes[#target.nodes]
  local sub = B.spawn(nil, "redis-cli -p " .. last.port .. " subscribe bench:wake", B.TMP .. "/subscriber.log")
  local deadline = core.now() + 10
  while tonumber(last.conn:call("PUBSUB", "NUMSUB", "bench:wake")[2]) < 1 do
    if core.now() > deadline then B.stop(sub) error("the subscriber did not subscribe", 0) end
    core.sleep(0.02)
  end
  local cmds = {}
  for i = 1, 1000 do cmds[i] = { "PUBLISH", "bench:wake", "bench:{Blank:0}:" } end
  local c0, t0 = cpus(B, target), core.now()
  for _ = 1, PUBLISHES / 1000 do target.nodes[1].conn:pipeline(cmds) end
  core.sleep(0.2) -- the bus delivers after the replies
  local c1, secs = cpus(B, target), core.now() - t0
  B.stop(sub)
  local out = {}
  for i = 1, #c0 do out[i] = math.max(0, c1[i] - c0[i] - idle[i] * secs) / PUBLISHES end
  return out
end

-- A trickle: an idle host (lag, 5 shards, 5 threads), the driver pushes m
-- jobs one at a time, 1 ms apart, each carrying its enqueue time (the
-- latency mode of bench.lua). Most pushes find their shard empty and
-- PUBLISH a wake-up. Per node: Redis CPU per job less the idle rate, and
-- the PUBLISHes per job (those run inside push.lua count on the node that
-- ran it); the enqueue -> perform latency percentiles.
local function run_trickle(B, target, m, idle)
  local s = B.SHAPES.lag1
  local cfg, rconn = prepare(B, target, s)
  local dir = B.TMP .. "/trickle-" .. #target.nodes
  assert(B.ok("mkdir -p " .. B.q(dir)))
  local env = { BENCH_SHARDS = s.shards, BENCH_BATCH = s.batch, BENCH_FETCH = "", BENCH_SCHEDULER = s.scheduler,
                BENCH_THREADS = B.THREADS, REDIS_URL = target.url, BENCH_THROTTLE = "", BENCH_LATENCY_DIR = dir }
  local log = B.TMP .. "/host-trickle-" .. #target.nodes .. ".log"
  local pid = B.spawn(env, B.q(B.LUAKIQ) .. " run " .. B.q(B.APP), log)
  local pending = B.pending_for(cfg, s, function(cmds) return rconn:pipeline(cmds) end)
  local function wait_empty(limit)
    local deadline = core.now() + limit
    while pending() > 0 do
      if core.now() > deadline then B.stop(pid) error("trickle: jobs left; host log: " .. log, 0) end
      core.sleep(0.01)
    end
  end
  -- warm-up, not recorded: every thread fetches once, the host goes idle
  client.push(rconn, cfg, "Blank", { { id = "w1" }, { id = "w2" }, { id = "w3" }, { id = "w4" }, { id = "w5" } })
  wait_empty(15)
  core.sleep(0.3)
  local before, c0 = {}, {}
  for i, node in ipairs(target.nodes) do before[i], c0[i] = snapshot(node) end
  local t0 = core.now()
  for i = 1, m do
    client.push(rconn, cfg, "Blank", { { id = "t" .. i, payload = { t = core.now() } } })
    core.sleep(0.001)
  end
  wait_empty(15)
  local secs = core.now() - t0
  local per = {}
  for i, node in ipairs(target.nodes) do
    local after, c1 = snapshot(node)
    if B.COMMANDSTATS then -- --commandstats: what ran per job, on each node
      for name, c in pairs(after) do
        local d = c - (before[i][name] or 0)
        if d > 0 then io.stderr:write(("      node %d %-20s %8.3f calls/job\n"):format(i, name, d / m)) end
      end
    end
    per[i] = { rcpu = math.max(0, c1 - c0[i] - idle[i] * secs) / m,
               -- wake-ups: PUBLISH on one server, SPUBLISH (sharded) on a cluster
               publish = ((after.publish or 0) + (after.spublish or 0)
                          - (before[i].publish or 0) - (before[i].spublish or 0)) / m }
  end
  B.stop(pid)
  rconn:close()
  local lat = {}
  local p = io.popen("cat " .. B.q(dir) .. "/lat-*.txt 2>/dev/null")
  for line in p:lines() do lat[#lat + 1] = tonumber(line) end
  p:close()
  table.sort(lat)
  local function pct(x) return lat[math.max(1, math.ceil(#lat * x))] end
  local r = { per = per, n = #lat, m = m, rate = m / secs, p50 = pct(0.5), p99 = pct(0.99), rcpu = 0, publish = 0 }
  for i, x in ipairs(per) do
    if target.nodes[i].role ~= "replica" then r.rcpu, r.publish = r.rcpu + x.rcpu, r.publish + x.publish end
  end
  return r
end

function M.run(B, shapes, n, masters, trickle, replicas)
  local taken = {}
  local rows, idle, pub, tr = {}, {}, {}, {}
  for _, which in ipairs { "single", "cluster" } do
    io.stderr:write("  " .. (which == "single" and "one redis-server" or (masters .. "-master cluster")) .. " ...\n")
    local target = which == "single" and single(B, taken) or cluster(B, taken, masters, replicas)
    local ok_, err = pcall(function()
      idle[which] = idle_cpu(B, target, 2)
      for _, key in ipairs(shapes) do
        local s = B.SHAPES[key]
        io.stderr:write("    luakiq " .. s.name .. " ...\n")
        local r = run_shape(B, target, setmetatable({ key = key }, { __index = s }), n)
        r.key, r.which = key, which
        rows[#rows + 1] = r
      end
      if trickle and trickle > 0 then
        io.stderr:write("    trickle: " .. trickle .. " jobs pushed one at a time ...\n")
        tr[which] = run_trickle(B, target, trickle, idle[which])
      end
      io.stderr:write("    " .. PUBLISHES .. " PUBLISHes ...\n")
      flush(target)
      pub[which] = publish_cost(B, target, idle[which])
    end)
    stop_all(B, target)
    if not ok_ then error(err, 0) end
  end
  return rows, idle, pub, tr
end

local function us(x) return string.format("%.1f", x * 1e6) end
local function list(per, f)
  local out = {}
  for i, p in ipairs(per) do out[i] = f(p) end
  return table.concat(out, " / ")
end

function M.print(B, rows, idle, masters, pub, tr)
  print()
  local cells = {}
  for _, r in ipairs(rows) do
    cells[#cells + 1] = { r.shape, r.target, B.fmt_int(r.enqueue), B.fmt_int(r.drain), us(r.hcpu),
      us(r.ercpu), us(r.rcpu), #r.per > 1 and list(r.per, function(p) return us(p.rcpu) end) or "-",
      string.format("%.4f", r.calls), #r.per > 1 and list(r.per, function(p) return string.format("%.4f", p.calls) end) or "-",
      string.format("%.1f", r.cmds), #r.per > 1 and list(r.per, function(p) return string.format("%.1f", p.cmds) end) or "-",
      #r.per > 1 and list(r.per, function(p) return tostring(p.shards) end) or "-" }
  end
  B.print_table({ "shape", "Redis", "enqueue jobs/s", "drain jobs/s", "host CPU us/job", "enqueue Redis CPU us/job",
    "drain Redis CPU us/job", "per node", "calls/job", "per node", "cmds/job", "per node", "shards per node" }, cells)
  print()
  local function fmt_idle(t)
    local out = {}
    for i, x in ipairs(t) do out[i] = string.format("%.2f", x * 1000) end
    return table.concat(out, " / ")
  end
  print("Redis CPU: used_cpu_user + used_cpu_sys (INFO) of each redis-server over the enqueue or the drain, per job;")
  print("calls: requests clients sent (EVALSHA, SCRIPT LOAD...), cmds: every command run, scripts' too, both from")
  print("INFO commandstats minus the driver's polling and INFO; per node in node order. Idle Redis CPU (ms/s):")
  print("one redis-server " .. fmt_idle(idle.single or {}) .. "; cluster " .. fmt_idle(idle.cluster or {}) .. ".")
  for _, r in ipairs(rows) do
    if r.replicas > 0 then
      print(string.format("%s: the sums are the masters'; per node the masters, then their replicas, whose CPU"
        .. " (enqueue + drain, all replicas) was %s us/job", r.shape, us(r.replicas / 1)))
    end
  end
  if pub and pub.single and pub.cluster then
    local function fmt_pub(t)
      local o = {}
      for i, x in ipairs(t) do o[i] = string.format("%.2f", x * 1e6) end
      return table.concat(o, " / ")
    end
    print(string.format("A wake-up PUBLISH (%d sent to the first node, a subscriber on the last) cost Redis CPU per"
      .. " message (us): one redis-server %s; cluster %s.", PUBLISHES, fmt_pub(pub.single), fmt_pub(pub.cluster)))
  end
  if tr and tr.single then
    print()
    local trows = {}
    for _, which in ipairs { "single", "cluster" } do
      local r = tr[which]
      if r then
        trows[#trows + 1] = { which == "single" and "1 redis-server" or (masters .. "-master cluster"), r.n .. "/" .. r.m,
          B.fmt_int(r.rate), string.format("%.3f ms", (r.p50 or 0) * 1e3), string.format("%.3f ms", (r.p99 or 0) * 1e3),
          us(r.rcpu), #r.per > 1 and list(r.per, function(p) return us(p.rcpu) end) or "-",
          string.format("%.2f", r.publish), #r.per > 1 and list(r.per, function(p) return string.format("%.2f", p.publish) end) or "-" }
      end
    end
    B.print_table({ "trickle (lag, 5 shards; one job a push, 1 ms apart)", "jobs", "jobs/s", "p50", "p99",
      "Redis CPU us/job", "per node", "PUBLISH/job", "per node" }, trows)
    print("(Redis CPU less each node's idle rate; p50/p99: enqueue -> start of perform)")
  end

  -- The model: N masters, each on a machine of its own, saturate at one CPU
  -- second per second; a job costs c us of Redis CPU (the cluster's sum over
  -- its nodes): the drain of a backlog c = drain's, a steady state (jobs
  -- enqueued as fast as they run) c = enqueue's + drain's. Spread evenly
  -- the ceiling is N / c; with the measured spread the busiest master
  -- bounds it first: 1 / (c x its share). The hosts: h us of CPU per job,
  -- 1 / h jobs/s per host core (and per shard: one thread serves a shard).
  print()
  local mrows = {}
  for _, r in ipairs(rows) do
    if r.which == "cluster" then
      for _, kind in ipairs { "drain", "enqueue + drain" } do
        local c, mx = 0, 0
        for _, p in ipairs(r.per) do
          if not p.replica then
            local x = p.rcpu + (kind == "drain" and 0 or p.ercpu)
            c, mx = c + x, math.max(mx, x)
          end
        end
        local cells_ = { r.shape, kind, us(c), string.format("%.0f %%", mx / c * 100), B.fmt_int(1 / mx),
                         kind == "drain" and B.fmt_int(1 / r.hcpu) or "" }
        for _, N in ipairs { 1, 3, 6, 12 } do cells_[#cells_ + 1] = B.fmt_int(N / c) end
        mrows[#mrows + 1] = cells_
      end
    end
  end
  B.print_table({ "model (the cluster's costs)", "of", "Redis CPU us/job", "busiest node", masters .. " masters as measured/s",
    "host core/s", "N=1 even/s", "N=3 even/s", "N=6 even/s", "N=12 even/s" }, mrows)
  print("(ceilings in jobs/s: N masters each with a CPU of its own, Redis CPU per job as measured, spread evenly or as")
  print("measured here; host core: 1 / host CPU per job)")
  print()
  -- The spread: a shard is one slot, N masters hold equal ranges of the
  -- 16384 slots (as redis-cli --cluster create splits them), so how evenly
  -- S shards load N masters is a matter of their names' CRC16. The busiest
  -- master's load over the even load (its share of a queue's shards x N),
  -- mean over 1000 queue names: the ceiling is N / (c x this), not N / c.
  print()
  local srows = {}
  local mults = { 1, 2, 4, 8, 16, 32 }
  for _, N in ipairs { 3, 6, 12 } do
    local row = { tostring(N) }
    local counts = { 5, 24 }
    for _, k in ipairs(mults) do counts[#counts + 1] = k * N end
    for _, S in ipairs(counts) do
      local sum = 0
      for qn = 1, 1000 do
        local per = {}
        for sh = 0, S - 1 do
          local node = math.floor(core.key_slot(keys.prefix("bench", "Q" .. qn, sh)) * N / 16384) + 1
          per[node] = (per[node] or 0) + 1
        end
        local mx = 0
        for _, c in pairs(per) do mx = math.max(mx, c) end
        sum = sum + mx / S * N
      end
      row[#row + 1] = string.format("%.2fx", sum / 1000)
    end
    srows[#srows + 1] = row
  end
  local cols = { "masters N", "5 shards", "24 shards" }
  for _, k in ipairs(mults) do cols[#cols + 1] = (k == 1 and "" or k) .. "N shards" end
  B.print_table(cols, srows)
  print("(the busiest master's load / the even load, mean over 1000 queue names; the slots split evenly)")
end

return M
