-- The large shapes of the benchmark (bench.lua --big N, --merge N); neither
-- is in the default run.
--
-- --big N: the large backlog. FLUSHALL; N blank jobs (ids 1..N; with
-- --big-ids padded the same numbers as 10 digits, which sort in push
-- order) pushed with perform_async in calls of 10,000, as the other
-- shapes: time, jobs/s, Redis CPU per job (all of it, and its first and
-- last tenth) and used_memory per job. Then the host of the Lowkiq shape (lag, 5 shards, batch 1, 5
-- threads) drains a sample (--sample, default 100,000 jobs) with the N jobs
-- queued and is stopped. Before the enqueue and again after the FLUSHALL
-- that ends it, in the same run, the same host drains as many jobs with
-- 10,000 queued: one host started for the rounds; each round pushes 10,000
-- jobs due 1 s later (so the push is over before any is taken, and the
-- threads, warm and idle, start together), then drains them to 0.
--
-- --merge N: the merge-heavy shape. N payloads, 100 for each of N/100 ids,
-- pushed as a producer would: in calls of 10,000, round by round (round r
-- pushes payload {seq = r} of every id, so after the first round each push
-- merges into a queued job); then the Lowkiq-shape host drains the N/100
-- jobs of 100 payloads. Sidekiq, when installed, gets the same N pushes
-- (args [id, {"seq" => r}], push_bulk in calls of 10,000): it has no merge,
-- so that is N jobs. Figures per payload.
--
-- Drains are measured as the others' rates are: from the first 10 ms poll
-- that saw a job taken to the poll that saw the goal, and here Redis CPU
-- (INFO cpu), EVALSHA time and commands (INFO commandstats) over that same
-- window; host CPU is the worker process's, start-up included, per job it
-- took. B is the driver's helpers (bench.lua).
local core = require "luakiq.core"
local runtime = require "luakiq.lib.runtime"
local client = require "luakiq.client"

local M = {}

local SMALL = 10000 -- the backlog --big is compared with
local PER_ID = 100 -- payloads per id in --merge

-- Pushes n jobs through client.push in calls of B.ENQUEUE_CALL; job(k) is
-- the k-th (1-based). Each call's jobs are built before its clock starts,
-- so only the push calls are timed. Returns seconds, Redis CPU seconds, and
-- per call the running totals {done, secs, cpu}; progress(that mark), if
-- given, runs after every call.
local function enqueue(B, cfg, n, job, progress)
  local rconn = assert(runtime.connect(cfg, 5))
  assert(runtime.register(rconn, cfg))
  local secs, cpu0, marks = 0, B.redis_cpu(), {}
  for from = 1, n, B.ENQUEUE_CALL do
    local chunk = {}
    for k = from, math.min(from + B.ENQUEUE_CALL - 1, n) do chunk[#chunk + 1] = job(k) end
    local t0 = core.now()
    client.push(rconn, cfg, "Blank", chunk)
    secs = secs + core.now() - t0
    local m = { done = from + #chunk - 1, secs = secs, cpu = B.redis_cpu() - cpu0 }
    marks[#marks + 1] = m
    if progress then progress(m) end
  end
  rconn:close()
  return secs, marks[#marks].cpu, marks
end

-- With a worker process (pid) on n queued jobs, polls pending() every
-- B.POLL until at most `left` remain. Returns the window from the first poll
-- that saw a job taken to that poll: {jobs, secs, cpu (Redis), script
-- (EVALSHA seconds), cmds (commands Redis ran, the driver's own left out),
-- hcpu (the process's so far, start-up included), taken (jobs it took),
-- wait (seconds from the call to the first poll that saw one taken)}.
local function drain(B, pid, pending, n, left, title)
  local t0 = core.now()
  local first, r
  local ok, err = pcall(function()
    local deadline = t0 + 900
    while true do
      core.sleep(B.POLL)
      local now_left = pending()
      local now = core.now()
      if first and now_left <= left then
        local cpu, cs, us = B.redis_cpu(), B.commandstats()
        B.print_commandstats(title, first.left - now_left, first.cs, first.us, cs, us)
        r = { jobs = first.left - now_left, secs = now - first.t, cpu = cpu - first.cpu,
              script = ((us.evalsha or 0) - (first.us.evalsha or 0)) / 1e6,
              cmds = B.command_delta(first.cs, cs), hcpu = B.cpu_secs(pid), taken = n - now_left,
              wait = first.t - t0 }
        return
      elseif not first and now_left < n then
        if now_left <= left then error("drained before a second poll: too few jobs to measure", 0) end
        first = { t = now, left = now_left, cpu = B.redis_cpu() }
        first.cs, first.us = B.commandstats()
        B.reset_driver()
      end
      if now > deadline then error(("drain did not finish within 900 s (%d left)"):format(now_left), 0) end
    end
  end)
  if not ok then error(err, 0) end
  return r
end

-- Starts a worker process (start() returns its pid), runs fn(pid), stops
-- the process (its log named in an error); returns fn's result.
local function with_process(B, start, log, fn)
  local pid = start()
  local ok, r = pcall(fn, pid)
  B.stop(pid, 60)
  if not ok then error(tostring(r) .. "; log: " .. log, 0) end
  return r
end

local function sum(rs)
  local t = {}
  for _, r in ipairs(rs) do for k, v in pairs(r) do t[k] = (t[k] or 0) + v end end
  return t
end

local function host(B, s, tag)
  local log = B.TMP .. "/host-" .. tag .. ".log"
  return function()
    return B.spawn(B.shape_env(s), B.q(B.LUAKIQ) .. " run " .. B.q(B.APP), log)
  end, log
end

-- The k-th id: k, or with --big-ids padded k as 10 digits.
local function id_of(k, padded) return padded and string.format("%010d", k) or k end
local function blank(k) return { id = k } end
local function blank_padded(k) return { id = id_of(k, true) } end

-- Waits until redis-server is idle (under 20 ms of CPU in a second, at most
-- 120 s): after a large enqueue or FLUSHALL its allocator's background
-- thread returns pages for a while, which would count in the next window.
-- Returns the seconds waited.
local function settle(B)
  local t0 = core.now()
  repeat
    local c0 = B.redis_cpu()
    core.sleep(1)
  until B.redis_cpu() - c0 < 0.02 or core.now() - t0 > 120
  return core.now() - t0
end

-- One line on stderr as soon as a drain is measured (a long run that fails
-- later keeps it).
local function report(B, tag, d)
  io.stderr:write(("  %s: %s jobs, %s jobs/s, Redis %.2f us/job (scripts %.2f us), %.1f cmds/job\n"):format(
    tag, B.fmt_int(d.jobs), B.fmt_int(d.jobs / d.secs), d.cpu / d.jobs * 1e6, d.script / d.jobs * 1e6, d.cmds / d.jobs))
end

-- The 10,000-queued side of --big: one host, rounds of 10,000 jobs (due
-- 1 s after the round starts) drained to 0, until `sample` jobs; summed. A
-- push that outlasts that second (a busy machine) still leaves a clean
-- window (it starts at the first poll after the push); such rounds are
-- counted in `late`.
local function small_rounds(B, cfg, s, pending, sample, tag, padded)
  local start, log = host(B, s, tag)
  return with_process(B, start, log, function(pid)
    local rounds = {}
    for i = 1, math.ceil(sample / SMALL) do
      local due = core.now() + 1
      enqueue(B, cfg, SMALL, function(k) return { id = id_of(k, padded), perform_in = due } end)
      local late = core.now() >= due and 1 or 0
      rounds[i] = drain(B, pid, pending, SMALL, 0, tag .. " round " .. i)
      rounds[i].late = late
    end
    local t = sum(rounds)
    t.rounds = #rounds
    report(B, tag, t)
    return t
  end)
end

-- --- --big ------------------------------------------------------------------------
function M.big(B, n, sample, padded)
  local s = B.SHAPES.lag1
  sample = math.min(sample, math.floor(n / 2))
  local cfg = B.load_cfg(s)
  local pending = B.pending_for(cfg, s)
  local res = { n = n, sample = sample, shape = s.name, padded = padded }

  -- 1. 10,000 queued, before
  B.fresh_db()
  io.stderr:write(("  --big: %d jobs with %d queued ...\n"):format(sample, SMALL))
  res.before = small_rounds(B, cfg, s, pending, sample, "big-before", padded)

  -- 2. N queued: memory, enqueue, then the sample
  B.fresh_db()
  local mem0 = B.info_field("memory", "used_memory")
  local tenth = math.max(1, math.floor(n / 10))
  local next_report = tenth
  io.stderr:write(("  --big: enqueue %d jobs ...\n"):format(n))
  local t_wall = core.now()
  local secs, cpu, marks = enqueue(B, cfg, n, padded and blank_padded or blank, function(m)
    if m.done >= next_report then
      next_report = next_report + tenth
      io.stderr:write(("  --big: %s queued, %.1f s, %s jobs/s, Redis %.2f us/job, used_memory %s\n"):format(
        B.fmt_int(m.done), m.secs, B.fmt_int(m.done / m.secs), m.cpu / m.done * 1e6,
        B.mb(B.info_field("memory", "used_memory") - mem0)))
    end
  end)
  res.wall = core.now() - t_wall
  local mem1 = B.info_field("memory", "used_memory")
  res.enq = { jobs = n, secs = secs, cpu = cpu, mem = mem1 - mem0, used = mem1,
              rss = B.info_field("memory", "used_memory_rss") }
  -- first and last tenth, to the call: up to the first mark at n/10 or
  -- past it, and after the last mark at 9n/10 or before it
  local a, b = nil, { done = 0, secs = 0, cpu = 0 }
  for _, m in ipairs(marks) do
    if not a and m.done >= tenth then a = m end
    if m.done <= n - tenth then b = m end
  end
  local last = marks[#marks]
  res.first = { jobs = a.done, secs = a.secs, cpu = a.cpu }
  res.last = { jobs = last.done - b.done, secs = last.secs - b.secs, cpu = last.cpu - b.cpu }
  assert(pending() == n, "enqueue lost jobs")
  res.settle1 = settle(B)
  io.stderr:write(("  --big: drain %d of %d queued ...\n"):format(sample, n))
  local start, log = host(B, s, "big")
  res.large = with_process(B, start, log, function(pid)
    return drain(B, pid, pending, n, n - sample, B.fmt_int(n) .. " queued")
  end)
  report(B, "big", res.large)
  io.stderr:write("  --big: FLUSHALL ...\n")
  local t = core.now()
  B.fresh_db(true)
  res.flush = core.now() - t
  res.settle2 = settle(B)

  -- 3. 10,000 queued, after
  io.stderr:write(("  --big: %d jobs with %d queued, again ...\n"):format(sample, SMALL))
  res.after = small_rounds(B, cfg, s, pending, sample, "big-after", padded)
  return res
end

local function us(x) return string.format("%.2f us", x * 1e6) end

function M.print_big(B, r)
  print()
  print(("large backlog: %s blank jobs (ids %s), enqueue with perform_async in calls of %s, drain by luakiq %s"):format(
    B.fmt_int(r.n), r.padded and "0000000001.. as 10 digits" or "1..N", B.fmt_int(B.ENQUEUE_CALL), r.shape))
  local e = r.enq
  local rows = {
    { "all " .. B.fmt_int(e.jobs), string.format("%.1f s", e.secs), B.fmt_int(e.jobs / e.secs), us(e.cpu / e.jobs),
      string.format("%.0f", e.mem / e.jobs), string.format("%.2f GB", e.mem / 1e9) },
  }
  for _, x in ipairs { { "first " .. B.fmt_int(r.first.jobs), r.first }, { "last " .. B.fmt_int(r.last.jobs), r.last } } do
    local t = x[2]
    rows[#rows + 1] = { x[1], string.format("%.1f s", t.secs), B.fmt_int(t.jobs / t.secs), us(t.cpu / t.jobs), "-", "-" }
  end
  B.print_table({ "enqueue", "time", "jobs/s", "Redis CPU/job", "Redis B/job", "Redis memory" }, rows)
  print(("wall time of the enqueue %.1f s (jobs built between calls included); used_memory after it %.2f GB,"
    .. " used_memory_rss %.2f GB"):format(r.wall, e.used / 1e9, e.rss / 1e9))
  print()
  local function row(name, queued, d)
    return { name, B.fmt_int(queued), B.fmt_int(d.jobs), B.fmt_int(d.jobs / d.secs), us(d.cpu / d.jobs),
             us(d.script / d.jobs), string.format("%.1f", d.cmds / d.jobs) }
  end
  local lg, sm = r.large, sum { r.before, r.after }
  local function ratio(f) return string.format("%.2fx", f(lg) / f(sm)) end
  local function rate(d) return d.jobs / d.secs end
  local function cpu(d) return d.cpu / d.jobs end
  B.print_table({ "drain with a backlog", "queued", "jobs measured", "drain jobs/s", "Redis CPU/job",
                  "of it in scripts", "cmds/job" }, {
    row(("%s queued, before (%d rounds)"):format(B.fmt_int(SMALL), r.before.rounds), SMALL, r.before),
    row(B.fmt_int(r.n) .. " queued", r.n, lg),
    row(("%s queued, after (%d rounds)"):format(B.fmt_int(SMALL), r.after.rounds), SMALL, r.after),
    { ("%s vs %s (both rounds)"):format(B.fmt_int(r.n), B.fmt_int(SMALL)), "", "", ratio(rate), ratio(cpu),
      ratio(function(d) return d.script / d.jobs end), ratio(function(d) return d.cmds / d.jobs end) },
  })
  print("drain: from the first 10 ms poll that saw a job taken to the poll that saw the sample done; Redis CPU")
  print("(INFO cpu), EVALSHA time and commands over that window. 10,000 queued: one host, rounds of 10,000 jobs")
  print("due 1 s after their push began, each drained to 0, summed; before the enqueue and after the FLUSHALL")
  print(("(rounds whose push took longer than that second: %d)."):format(r.before.late + r.after.late))
  print(("the host's first job with %s queued: %.2f s after its start; FLUSHALL of them: %.1f s;"):format(
    B.fmt_int(r.n), lg.wait, r.flush))
  print(("Redis idle (< 2%% CPU, waited for before the next window) %.0f s after the enqueue, %.0f s after the"
    .. " FLUSHALL."):format(r.settle1, r.settle2))
  local x = cpu(lg) / cpu(sm)
  print(("fetch cost with %s queued vs %s: Redis CPU/job %.2fx (target <= 1.5x): %s"):format(
    B.fmt_int(r.n), B.fmt_int(SMALL), x, x <= 1.5 and "met" or "MISSED"))
end

-- --- --merge ------------------------------------------------------------------------
local function merge_luakiq(B, n)
  local s = B.SHAPES.lag1
  local ids = n / PER_ID
  local cfg = B.load_cfg(s)
  local pending = B.pending_for(cfg, s)
  B.fresh_db()
  local mem0 = B.info_field("memory", "used_memory")
  local secs, cpu = enqueue(B, cfg, n, function(k)
    return { id = (k - 1) % ids + 1, payload = { seq = math.floor((k - 1) / ids) + 1 } }
  end)
  local mem = B.info_field("memory", "used_memory") - mem0
  local queued = pending()
  if queued ~= ids then error(("merge: %d jobs queued, expected %d (one per id)"):format(queued, ids), 0) end
  local start, log = host(B, s, "merge")
  local d = with_process(B, start, log, function(pid) return drain(B, pid, pending, ids, 0, "merge, luakiq") end)
  return { name = "luakiq " .. s.name .. (" (%s jobs of %d payloads)"):format(B.fmt_int(ids), PER_ID),
           payloads = n, enqueue = n / secs, ecpu = cpu / n, mem = mem / n, d = d, per = PER_ID }
end

local function merge_sidekiq(B, n)
  local ids = n / PER_ID
  B.fresh_db()
  local mem0 = B.info_field("memory", "used_memory")
  local cpu0 = B.redis_cpu()
  local out = B.capture("cd " .. B.q(B.BENCH_DIR .. "/sidekiq") .. " && REDIS_URL=" .. B.q(B.REDIS_URL)
    .. " ruby push.rb " .. n .. " " .. ids .. " " .. B.ENQUEUE_CALL .. " 2>" .. B.q(B.TMP .. "/sidekiq-push-merge.log"))
  local secs = tonumber(out)
  if not secs then error("sidekiq push failed, see " .. B.TMP .. "/sidekiq-push-merge.log", 0) end
  local cpu = B.redis_cpu() - cpu0
  local mem = B.info_field("memory", "used_memory") - mem0
  local function pending() return B.call("LLEN", "queue:default") end
  assert(pending() == n, "sidekiq push lost jobs")
  local log = B.TMP .. "/sidekiq-merge.log"
  local d = with_process(B, function()
    return B.spawn({ REDIS_URL = B.REDIS_URL }, "sidekiq -r " .. B.q(B.BENCH_DIR .. "/sidekiq/worker.rb")
      .. " -c " .. B.THREADS .. " -t 2 -C /dev/null", log)
  end, log, function(pid) return drain(B, pid, pending, n, 0, "merge, Sidekiq") end)
  return { name = "Sidekiq " .. B.SIDEKIQ_VERSION .. (" (%s jobs: no merge)"):format(B.fmt_int(n)),
           payloads = n, enqueue = n / secs, ecpu = cpu / n, mem = mem / n, d = d, per = 1 }
end

function M.merge(B, n)
  io.stderr:write(("  --merge: luakiq, %d payloads, %d ids ...\n"):format(n, n / PER_ID))
  local rows = { merge_luakiq(B, n) }
  if B.SIDEKIQ_VERSION then
    io.stderr:write(("  --merge: Sidekiq, %d jobs ...\n"):format(n))
    rows[2] = merge_sidekiq(B, n)
  end
  return rows
end

function M.print_merge(B, rows)
  print()
  print(("merge-heavy: %s payloads, %d for each of %s ids, pushed in calls of %s, round by round; per payload"):format(
    B.fmt_int(rows[1].payloads), PER_ID, B.fmt_int(rows[1].payloads / PER_ID), B.fmt_int(B.ENQUEUE_CALL)))
  local out = {}
  for _, r in ipairs(rows) do
    local d, p = r.d, r.per -- d counts jobs; p payloads per job
    out[#out + 1] = { r.name, B.fmt_int(r.enqueue), us(r.ecpu), string.format("%.0f", r.mem),
      B.fmt_int(d.jobs * p / d.secs), us(d.cpu / (d.jobs * p)), r.per > 1 and us(d.script / (d.jobs * p)) or "-",
      us(d.hcpu / (d.taken * p)) }
  end
  if rows[2] then
    local l, s = rows[1], rows[2]
    local function rate(r) return r.d.jobs * r.per / r.d.secs end
    local function cpu(r) return r.d.cpu / (r.d.jobs * r.per) end
    out[#out + 1] = { "luakiq / Sidekiq", string.format("%.2fx", l.enqueue / s.enqueue),
      string.format("%.2fx", l.ecpu / s.ecpu), string.format("%.2fx", l.mem / s.mem),
      string.format("%.2fx", rate(l) / rate(s)), string.format("%.2fx", cpu(l) / cpu(s)), "",
      string.format("%.2fx", (l.d.hcpu / (l.d.taken * l.per)) / (s.d.hcpu / (s.d.taken * s.per))) }
  end
  B.print_table({ "merge-heavy, per payload", "enqueue payloads/s", "enqueue Redis CPU", "Redis B/payload",
                  "drain payloads/s", "drain Redis CPU", "of it in scripts", "host CPU" }, out)
  print("enqueue: the push calls only (luakiq: perform_async; Sidekiq: push_bulk), Redis CPU over them (INFO cpu);")
  print("Redis B/payload: used_memory growth per pushed payload; drain: as --big's (first poll that saw a job taken")
  print("to nothing queued or in flight); Sidekiq has no merge: each payload is a job of its own.")
end

return M
