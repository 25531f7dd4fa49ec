-- luakiq.ops.timing: wait and run times per worker per day (qless's job stats;
-- docs/operations.md, "Timing").
--
-- wait: from when a job was due (its perform_in) to when a fetch took it.
-- run:  one perform call, start to end (time parked in luakiq's I/O included).
-- Each worker thread adds its observations up in memory (M.new, M.observe)
-- and writes them with timing.lua, at most once a second, in the pipeline of
-- a Redis call it makes anyway (M.cmds): no round trip of its own, a few
-- HINCRBYs per worker and second whatever the job rate.
--
-- In Redis, per queue and UTC day (tag {QUEUE}):
--   NS:{QUEUE}:timing:DAY    HASH w:n w:sum w:sq r:n r:sum r:sq   (30 days)
--   NS:{QUEUE}:timing:DAY:h  HASH w:UB r:UB -> count             (7 days)
-- UB is a bucket's upper bound in seconds: qless's buckets (a second each
-- for the first minute, a minute each for the first hour, an hour each for
-- the first day, then days), with the first second split in ten (1 ms ..
-- 1 s), because most calls take less than a second.
local core = require "luakiq.core"
local json = require "luakiq.json"
local keys = require "luakiq.lib.keys"

local M = {}

M.STATS_DAYS, M.HIST_DAYS, M.HISTORY_DAYS = 30, 7, 7
M.FLUSH = 1 -- seconds between a thread's writes
M.KINDS = { w = "wait", r = "run" }

local SUB = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1 }

-- The upper bound of the bucket of x seconds (x >= 0).
function M.bucket(x)
  if x < 1 then
    for i = 1, #SUB do if x < SUB[i] then return SUB[i] end end
  end
  if x < 60 then return math.floor(x) + 1 end
  if x < 3600 then return (math.floor(x / 60) + 1) * 60 end
  if x < 86400 then return (math.floor(x / 3600) + 1) * 3600 end
  return (math.floor(x / 86400) + 1) * 86400
end

-- The lower bound of the bucket whose upper bound is ub.
function M.lower(ub)
  if ub <= 1 then
    for i, b in ipairs(SUB) do if b == ub then return SUB[i - 1] or 0 end end
  end
  if ub <= 60 then return ub - 1 end
  if ub <= 3600 then return ub - 60 end
  if ub <= 86400 then return ub - 3600 end
  return ub - 86400
end

-- The Prometheus histogram's bounds: a subset of the bucket bounds, so each
-- is an exact sum of stored buckets.
M.PROM = { 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600, 21600, 86400 }

function M.day(now) return os.date("!%Y-%m-%d", math.floor(now)) end

-- Unix time of the start of a "YYYY-MM-DD" UTC day, or nil if it is not one.
function M.day_start(day)
  local y, m, d = tostring(day):match("^(%d%d%d%d)%-(%d%d)%-(%d%d)$")
  if not y then return nil end
  y, m, d = tonumber(y), tonumber(m), tonumber(d)
  if m < 1 or m > 12 or d < 1 or d > 31 then return nil end
  -- days since 1970-01-01 (civil calendar, proleptic Gregorian)
  local yy = m <= 2 and y - 1 or y
  local era = math.floor(yy / 400)
  local yoe = yy - era * 400
  local doy = math.floor((153 * (m + (m > 2 and -3 or 9)) + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  local t = (era * 146097 + doe - 719468) * 86400
  if M.day(t) ~= day then return nil end -- 2026-02-30
  return t
end

-- --- a worker thread's side ---------------------------------------------------

-- A thread's accumulator: per queue, per day, the sums and bucket counts not
-- written yet.
function M.new()
  return { pending = {}, history = {}, flushed = core.mono(), day = nil, day_end = -math.huge, any = false }
end

local FIELDS = { w = {}, r = {} } -- kind -> upper bound -> its field name
local STATS = { w = { "w:n", "w:sum", "w:sq" }, r = { "r:n", "r:sum", "r:sq" } }

-- One observation: kind "w" or "r", x seconds (clamped to >= 0), of the
-- worker whose queue is queue, at wall time now.
function M.observe(acc, queue, kind, x, now)
  if not (x == x) or x < 0 then x = 0 end
  if x == math.huge then return end
  if now >= acc.day_end then
    acc.day = M.day(now)
    acc.day_end = M.day_start(acc.day) + 86400
  end
  local per = acc.pending[queue]
  if not per then per = {} acc.pending[queue] = per end
  local d = per[acc.day]
  if not d then d = { stats = {}, hist = {} } per[acc.day] = d end
  local s, h, sn = d.stats, d.hist, STATS[kind]
  s[sn[1]] = (s[sn[1]] or 0) + 1
  s[sn[2]] = (s[sn[2]] or 0) + x
  s[sn[3]] = (s[sn[3]] or 0) + x * x
  local ub = M.bucket(x)
  local names = FIELDS[kind]
  local f = names[ub]
  if not f then f = kind .. ":" .. string.format("%.10g", ub) names[ub] = f end
  h[f] = (h[f] or 0) + 1
  acc.any = true
end

-- History: n jobs of the worker whose queue is queue processed (kind "p"),
-- failed ("f") or snoozed ("s") by one call that ended at wall time now, counted in its
-- UTC minute.
function M.count(acc, queue, kind, n, now)
  if n <= 0 then return end
  local minute = math.floor(now / 60)
  local per = acc.history[queue]
  if not per then per = {} acc.history[queue] = per end
  -- (the field names of the current minute, made once a minute)
  local names = acc.minute_names
  if not names or names.minute ~= minute then
    names = { minute = minute, p = "p:" .. minute, f = "f:" .. minute, s = "s:" .. minute }
    acc.minute_names = names
  end
  local f = names[kind] or kind .. ":" .. minute
  per[f] = (per[f] or 0) + n
  acc.any = true
end

-- The history.lua calls for acc's counts, one per queue and UTC day.
local function history_cmds(acc, ns, cmds)
  for queue, per in pairs(acc.history) do
    local by_day = {}
    for f, n in pairs(per) do
      local kind, minute = f:match("^(%a):(%d+)$")
      local day = M.day(tonumber(minute) * 60)
      local c = by_day[day]
      if not c then
        local start = M.day_start(day)
        c = { script = "history", numkeys = 1, keys.history(ns, queue, day), start + (M.HISTORY_DAYS + 1) * 86400 }
        by_day[day] = c
        cmds[#cmds + 1] = c
      end
      c[#c + 1] = kind .. ":" .. (tonumber(minute) % 1440)
      c[#c + 1] = n
    end
  end
  acc.history = {}
end

-- The timing.lua and history.lua calls for what acc holds (and empties it):
-- when force, or at least M.FLUSH seconds after the last ones. ns: the
-- namespace.
function M.cmds(acc, ns, force)
  if not acc.any or (not force and core.mono() - acc.flushed < M.FLUSH) then return nil end
  local cmds = {}
  history_cmds(acc, ns, cmds)
  for queue, per in pairs(acc.pending) do
    for day, d in pairs(per) do
      local start = M.day_start(day)
      local ks, kh = keys.timing(ns, queue, day)
      local cmd = { script = "timing", numkeys = 2, ks, kh, start + (M.STATS_DAYS + 1) * 86400,
                    start + (M.HIST_DAYS + 1) * 86400, 0 }
      local n = 0
      for f, v in pairs(d.stats) do
        cmd[#cmd + 1] = f
        cmd[#cmd + 1] = string.format("%.17g", v)
        n = n + 1
      end
      cmd[5] = n
      for f, v in pairs(d.hist) do
        cmd[#cmd + 1] = f
        cmd[#cmd + 1] = v
      end
      cmds[#cmds + 1] = cmd
    end
  end
  acc.pending, acc.any, acc.flushed = {}, false, core.mono()
  return cmds
end

-- Logs (at most once a minute) a timing.lua call of cmds that failed in
-- replies (the pipeline's answers to cmds): timing never stops a job, but a
-- failure must not go unseen.
-- from: the index of the first of them in cmds (nil: none was sent).
local warned = -math.huge
function M.check(cmds, replies, from)
  if not from then return end
  for i = from, #cmds do
    local c, r = cmds[i], replies[i]
    if (c.script == "timing" or c.script == "history") and type(r) == "table" and r.err and core.mono() - warned >= 60 then
      warned = core.mono()
      require("luakiq.lib.log").warn("timing not recorded: " .. tostring(r.err):match("^[^\n]*"))
    end
  end
end

-- --- reading -----------------------------------------------------------------

-- One kind's report from the two hashes' field maps.
local function report(kind, s, h)
  local n = tonumber(s[kind .. ":n"]) or 0
  local sum, sq = tonumber(s[kind .. ":sum"]) or 0, tonumber(s[kind .. ":sq"]) or 0
  local mean = n > 0 and sum / n or 0
  local var = n > 0 and math.max(0, sq / n - mean * mean) or 0
  local hist = json.array()
  for f, c in pairs(h) do
    local k, ub = f:match("^(%a):(.+)$")
    if k == kind and tonumber(ub) then
      hist[#hist + 1] = { from = M.lower(tonumber(ub)), to = tonumber(ub), count = tonumber(c) }
    end
  end
  table.sort(hist, function(a, b) return a.to < b.to end)
  return { count = n, mean = mean, std = math.sqrt(var), sum = sum, histogram = hist }
end

local function map(flat)
  local m = {}
  for i = 1, #flat, 2 do m[flat[i]] = flat[i + 1] end
  return m
end

-- The report of one worker for one UTC day ("YYYY-MM-DD"; default today):
-- {worker, day, wait = {count, mean, std, sum, histogram = {{from, to,
-- count}...}}, run = {...}}. Raises an input error for a bad day.
function M.read(conn, cfg, worker, day)
  return M.read_all(conn, cfg, { worker }, day)[1]
end

-- The reports of several workers (names) for one day, in one round trip.
function M.read_all(conn, cfg, names, day)
  local errors = require "luakiq.lib.errors"
  day = day or M.day(core.now())
  if not M.day_start(day) then errors.input("day must be YYYY-MM-DD, got '" .. tostring(day) .. "'") end
  local ws, cmds = {}, {}
  for i, name in ipairs(names) do
    ws[i] = require("luakiq.ops.admin").worker_of(cfg, name)
    local ks, kh = keys.timing(cfg.namespace, ws[i].queue_name, day)
    cmds[2 * i - 1], cmds[2 * i] = { "HGETALL", ks }, { "HGETALL", kh }
  end
  local r = #cmds > 0 and conn:pipeline(cmds) or {}
  for _, x in ipairs(r) do
    if type(x) == "table" and x.err then error("timing: " .. x.err, 0) end
  end
  local out = {}
  for i, w in ipairs(ws) do
    local s, h = map(r[2 * i - 1]), map(r[2 * i])
    out[i] = { worker = w.name, day = day, wait = report("w", s, h), run = report("r", s, h) }
  end
  return out
end

local HISTORY_FIELDS = { p = "processed", f = "failed", s = "snoozed" }

-- Jobs processed, failed and snoozed per minute, per worker and in total, over the
-- last `minutes` minutes (the current one, partial, last), summed `step`
-- minutes per point: {from = unix time of the first minute, step = seconds
-- per point, by_worker = {NAME = {processed = {...}, failed = {...}, snoozed = {...}}},
-- total = {...}}. minutes and step may be strings (a query's); raises an
-- input error for minutes outside 1..7 days or a step outside 1..1440.
function M.history(conn, cfg, minutes, step, now)
  local errors = require "luakiq.lib.errors"
  local max = M.HISTORY_DAYS * 1440
  local function int(v, what, hi)
    local x = tonumber(v)
    if not x or x ~= math.floor(x) or x < 1 or x > hi then
      errors.input(what .. " must be an integer from 1 to " .. hi .. ", got '" .. tostring(v) .. "'")
    end
    return x
  end
  minutes, step = int(minutes, "minutes", max), int(step, "step", 1440)
  local last = math.floor((now or core.now()) / 60)
  local first = last - minutes + 1
  local npoints = math.ceil(minutes / step)
  -- the days the range touches, oldest first
  local days, cmds, index = {}, {}, {}
  for d = math.floor(first / 1440), math.floor(last / 1440) do days[#days + 1] = d end
  for _, w in ipairs(cfg.workers) do
    for _, d in ipairs(days) do
      cmds[#cmds + 1] = { "HGETALL", keys.history(cfg.namespace, w.queue_name, M.day(d * 86400)) }
      index[#cmds] = { w.name, d }
    end
  end
  local replies = #cmds > 0 and conn:pipeline(cmds) or {}
  local function zeros() local z = json.array() for i = 1, npoints do z[i] = 0 end return z end
  local by, total = {}, { processed = zeros(), failed = zeros(), snoozed = zeros() }
  for _, w in ipairs(cfg.workers) do by[w.name] = { processed = zeros(), failed = zeros(), snoozed = zeros() } end
  for i, r in ipairs(replies) do
    if type(r) == "table" and r.err then error("history: " .. r.err, 0) end
    local name, d = index[i][1], index[i][2]
    for j = 1, #r, 2 do
      local kind, m = r[j]:match("^([pfs]):(%d+)$")
      local minute = m and d * 1440 + tonumber(m)
      if minute and minute >= first and minute <= last then
        local point = math.floor((minute - first) / step) + 1
        local field = HISTORY_FIELDS[kind]
        local n = tonumber(r[j + 1]) or 0
        by[name][field][point] = by[name][field][point] + n
        total[field][point] = total[field][point] + n
      end
    end
  end
  return { from = first * 60, step = step * 60, by_worker = by, total = total }
end

-- Cumulative counts at the Prometheus bounds, from a report's histogram.
function M.prom_buckets(rep)
  local out, i, acc = {}, 1, 0
  for _, le in ipairs(M.PROM) do
    while rep.histogram[i] and rep.histogram[i].to <= le + 1e-12 do
      acc = acc + rep.histogram[i].count
      i = i + 1
    end
    out[#out + 1] = { le, acc }
  end
  return out
end

return M
