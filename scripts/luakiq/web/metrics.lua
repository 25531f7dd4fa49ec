-- luakiq.web.metrics: GET /metrics of luakiq.web, in Prometheus text format
-- 0.0.4 (docs/operations.md, "Metrics"): every worker's queue numbers and
-- today's wait and run times (from Redis: all hosts), then this host's own
-- (memory, jobs per thread, the oldest call, timeouts); the jobs that wait
-- for a reply and the replies by outcome too. A scrape never fails
-- for Redis: luakiq_redis_up says 0 and this host's own numbers still come.
local core = require "luakiq.core"
local log = require "luakiq.lib.log"
local admin = require "luakiq.ops.admin"
local timing = require "luakiq.ops.timing"

local M = {}

-- A Prometheus label value, escaped.
local function label_value(v)
  return (v:gsub('[\\"\n]', { ["\\"] = "\\\\", ['"'] = '\\"', ["\n"] = "\\n" }))
end

local function num(x)
  if x == math.floor(x) and math.abs(x) < 2 ^ 53 then return string.format("%.0f", x) end
  return string.format("%.6f", x)
end

-- The wait and run histograms of every worker, today (UTC day: the counters
-- start again at 00:00): {wait = {line...}, run = {line...}}.
local function histograms(conn, cfg)
  local lines, names = { wait = {}, run = {} }, {}
  for i, w in ipairs(cfg.workers) do names[i] = w.name end
  for i, rep in ipairs(timing.read_all(conn, cfg, names)) do
    local label = 'worker="' .. label_value(names[i]) .. '"'
    for _, kind in ipairs { "wait", "run" } do
      local name, r, l = "luakiq_job_" .. kind .. "_seconds", rep[kind], lines[kind]
      for _, b in ipairs(timing.prom_buckets(r)) do
        l[#l + 1] = ('%s_bucket{%s,le="%.10g"} %s'):format(name, label, b[1], num(b[2]))
      end
      l[#l + 1] = ('%s_bucket{%s,le="+Inf"} %s'):format(name, label, num(r.count))
      l[#l + 1] = ("%s_sum{%s} %s"):format(name, label, num(r.sum))
      l[#l + 1] = ("%s_count{%s} %s"):format(name, label, num(r.count))
    end
  end
  return lines
end

-- handler(w, req) of luakiq.web's route table.
function M.scrape(w)
  local cfg = w.cfg
  local out = {}
  -- samples: {label, value, number[, label2, value2]} (label nil: none)
  local function metric(name, typ, help, samples)
    out[#out + 1] = "# HELP " .. name .. " " .. help
    out[#out + 1] = "# TYPE " .. name .. " " .. typ
    for _, s in ipairs(samples) do
      local labels = ""
      if s[1] then
        labels = "{" .. s[1] .. '="' .. label_value(s[2]) .. '"' ..
          (s[4] and "," .. s[4] .. '="' .. label_value(s[5]) .. '"' or "") .. "}"
      end
      out[#out + 1] = name .. labels .. " " .. num(s[3])
    end
  end
  local ok, by = pcall(function() return admin.worker_stats(w.conn(), cfg) end)
  metric("luakiq_redis_up", "gauge", "1 when Redis answered this scrape.", { { nil, nil, ok and 1 or 0 } })
  if ok then
    local function per(field)
      local s = {}
      for _, wk in ipairs(cfg.workers) do s[#s + 1] = { "worker", wk.name, by[wk.name][field] } end
      return s
    end
    metric("luakiq_queue_length", "gauge", "Queued jobs (fresh + retries), in-flight ones not included.", per("length"))
    metric("luakiq_queue_fresh", "gauge", "Queued jobs that never failed.", per("fresh"))
    metric("luakiq_queue_retries", "gauge", "Queued jobs waiting for a retry.", per("retries"))
    metric("luakiq_morgue_length", "gauge", "Dead jobs (the morgue).", per("morgue_length"))
    metric("luakiq_queue_lag_seconds", "gauge", "Seconds since the earliest due job became due (0 when none is due).", per("lag"))
    metric("luakiq_busy_jobs", "gauge", "Jobs in flight.", per("busy"))
    metric("luakiq_processed_total", "counter", "Jobs performed successfully (all hosts).", per("processed"))
    metric("luakiq_failed_total", "counter", "Job failures (all hosts).", per("failed"))
    metric("luakiq_snoozed_total", "counter", "Jobs put back by a snooze, not failures (all hosts).", per("snoozed"))
    metric("luakiq_expired_total", "counter", "Payloads that expired before they ran (moved to the morgue).",
      per("expired"))
    metric("luakiq_stale_payloads_total", "counter",
      "Payloads dropped at fetch as stale: not above the highest score performed for their id (monotonic = true).",
      per("stale"))
    metric("luakiq_jobs_waiting", "gauge", "Jobs that wait for a reply (luakiq.await).", per("waiting"))
    local replies = {}
    for _, wk in ipairs(cfg.workers) do
      for _, o in ipairs(admin.REPLY_OUTCOMES) do
        replies[#replies + 1] = { "worker", wk.name, by[wk.name].replies[o], "outcome", o }
      end
    end
    metric("luakiq_replies_total", "counter", "Replies to waiting jobs by outcome (all hosts): accepted, " ..
      "duplicate, conflict (another reply was accepted), stale (the wait was over), unknown (no such wait).", replies)
    local okt, lines = pcall(function() return histograms(w.conn(), cfg) end)
    if okt then
      for _, kind in ipairs { "wait", "run" } do
        local name = "luakiq_job_" .. kind .. "_seconds"
        out[#out + 1] = "# HELP " .. name .. " " .. (kind == "wait" and
          "Seconds from when a job was due to the start of its call, today (UTC; all hosts)." or
          "Seconds one perform call ran, today (UTC; all hosts).")
        out[#out + 1] = "# TYPE " .. name .. " histogram"
        for _, l in ipairs(lines[kind]) do out[#out + 1] = l end
      end
    else log.warn("metrics: timing: " .. tostring(lines):match("^[^\n]*")) end
  else
    log.warn("metrics: " .. tostring(by):match("^[^\n]*"))
  end
  local rss = core.rss()
  if rss then metric("process_resident_memory_bytes", "gauge", "Resident memory of this host process.", { { nil, nil, rss } }) end
  local jobs, mem = {}, { { "thread", "web", collectgarbage("count") * 1024 } }
  for i, t in ipairs(core.thread_stats()) do
    jobs[#jobs + 1] = { "thread", "t" .. (i - 1), t.jobs }
    mem[#mem + 1] = { "thread", "t" .. (i - 1), t.lua_bytes }
  end
  metric("luakiq_thread_jobs_performed_total", "counter", "Jobs this host's thread performed (success or failure).", jobs)
  metric("luakiq_thread_lua_memory_bytes", "gauge", "Memory of the thread's Lua VM.", mem)
  -- Stalls: the oldest running perform call per worker on this host, and
  -- the calls its timeout ended (every worker listed, 0 when none).
  local oldest, timeouts, counted = {}, {}, core.timeouts()
  for _, t in ipairs(core.thread_stats()) do
    for _, c in ipairs(t.calls) do
      if (oldest[c.worker] or -1) < c.age then oldest[c.worker] = c.age end
    end
  end
  local age = {}
  for _, wk in ipairs(cfg.workers) do
    age[#age + 1] = { "worker", wk.name, oldest[wk.name] or 0 }
    timeouts[#timeouts + 1] = { "worker", wk.name, counted[wk.name] or 0 }
  end
  metric("luakiq_oldest_call_seconds", "gauge",
    "Seconds the oldest perform call of the worker running on this host has run (0: none runs).", age)
  metric("luakiq_timeouts_total", "counter", "Perform calls this host failed at their timeout.", timeouts)
  return 200, "text/plain; version=0.0.4; charset=utf-8", table.concat(out, "\n") .. "\n"
end

return M
