-- luakiq.web.api: the JSON endpoints of luakiq.web (its route table says
-- which path calls which; docs/operations.md, "HTTP API", says what they
-- answer). Every handler is handler(w, req) -> status, content type, body:
-- w is the web VM's context (cfg; conn(), its Redis connection; token;
-- threads), req the request with query (decoded) and params (the path's
-- :names). They call the same luakiq.ops.* and luakiq.client functions as the
-- CLI, so `luakiq stats`, `jobs`, `morgue`, `admin` and `enqueue` give the
-- same answers.
local admin = require "luakiq.ops.admin"
local client = require "luakiq.client"
local core = require "luakiq.core"
local errors = require "luakiq.lib.errors"
local failures = require "luakiq.ops.failures"
local hosts = require "luakiq.ops.hosts"
local json = require "luakiq.json"
local request = require "luakiq.web.request"
local runtime = require "luakiq.lib.runtime"
local timing = require "luakiq.ops.timing"

local reply, int_param = request.reply, request.int_param
local PAGE, MAX_PAGE = request.PAGE, request.MAX_PAGE

local M = {}

-- GET /api/v1/stats: `luakiq stats`.
function M.stats(w) return reply(200, admin.stats(w.conn(), w.cfg)) end

-- GET /api/v1/hosts: the live hosts (`luakiq hosts`).
function M.hosts(w) return reply(200, { hosts = hosts.list(w.conn(), w.cfg.namespace) }) end

-- GET /api/v1/history?minutes=M&step=S: per-minute counts (`luakiq timing --history`).
function M.history(w, req)
  return reply(200, timing.history(w.conn(), w.cfg, req.query.minutes or 60, req.query.step or 1))
end

-- GET /api/v1/workers/W/timing[?day=YYYY-MM-DD]: wait and run times (`luakiq timing`).
function M.timing(w, req)
  local day = req.query.day ~= "" and req.query.day or nil
  return reply(200, timing.read(w.conn(), w.cfg, req.params.worker, day))
end

-- 1536 -> "1.50K", as INFO's *_human fields.
local function human(bytes)
  local units, i = { "B", "K", "M", "G", "T" }, 1
  while bytes >= 1024 and i < #units do bytes, i = bytes / 1024, i + 1 end
  return i == 1 and string.format("%dB", bytes) or string.format("%.2f%s", bytes, units[i])
end

-- One server's INFO, or a Redis Cluster's: every master's (conn:each),
-- memory and clients summed, the oldest uptime, the first eviction
-- warning; nodes lists each master's own figures.
local function redis_info(conn, cfg)
  local all = conn:each("INFO")
  local sum = { clients = 0, mem = 0, peak = 0 }
  local first, nodes, warning = nil, json.array(), nil
  for _, e in ipairs(all) do
    if type(e.reply) == "table" then error("redis: INFO at " .. e.node .. ": " .. tostring(e.reply.err), 0) end
    local info = {}
    for k, v in e.reply:gmatch("([%w_]+):([^\r\n]*)") do info[k] = v end
    first = first or info
    sum.clients = sum.clients + (tonumber(info.connected_clients) or 0)
    sum.mem = sum.mem + (tonumber(info.used_memory) or 0)
    sum.peak = sum.peak + (tonumber(info.used_memory_peak) or 0)
    warning = warning or runtime.eviction_warning(info.maxmemory_policy)
    nodes[#nodes + 1] = { node = e.node, used_memory_human = info.used_memory_human,
                          connected_clients = tonumber(info.connected_clients),
                          maxmemory_policy = info.maxmemory_policy }
  end
  first = first or {}
  local out = {
    url = runtime.redact(cfg.redis),
    version = first.redis_version,
    uptime_in_seconds = tonumber(first.uptime_in_seconds),
    uptime_in_days = tonumber(first.uptime_in_days),
    connected_clients = tonumber(first.connected_clients),
    used_memory_human = first.used_memory_human,
    used_memory_peak_human = first.used_memory_peak_human,
    maxmemory_policy = first.maxmemory_policy,
    eviction_warning = warning,
  }
  if conn:cluster() then
    out.cluster, out.nodes = true, nodes
    out.connected_clients, out.used_memory_human, out.used_memory_peak_human =
      sum.clients, human(sum.mem), human(sum.peak)
  end
  return out
end

-- GET /api/web/dashboard: everything the dashboard's main view shows, in
-- one answer (it asks every second).
function M.dashboard(w)
  local conn, cfg = w.conn(), w.cfg
  local by = admin.worker_stats(conn, cfg)
  local queues = json.array()
  local total = { lag = 0, processed = 0, failed = 0, busy = 0, enqueued = 0, fresh = 0, retries = 0, dead = 0,
                  waiting = 0, snoozed = 0, stale = 0 }
  for _, wk in ipairs(cfg.workers) do
    local s = by[wk.name]
    local q = { name = wk.name, lag = s.lag, processed = s.processed, failed = s.failed, busy = s.busy,
                enqueued = s.length, fresh = s.fresh, retries = s.retries, dead = s.morgue_length,
                waiting = s.waiting, stale = s.stale, shards_count = wk.shards_count, paused = s.paused,
                snoozed = s.snoozed }
    queues[#queues + 1] = q
    for k in pairs(total) do
      if k == "lag" then total.lag = math.max(total.lag, q.lag) else total[k] = total[k] + q[k] end
    end
  end
  -- This host's perform calls in flight (on a thread's CPU, or parked in
  -- luakiq's I/O: waiting = true), oldest first.
  local calls = json.array()
  for i, t in ipairs(core.thread_stats()) do
    for _, c in ipairs(t.calls) do
      calls[#calls + 1] = { thread = "t" .. (i - 1), worker = c.worker, shard = c.shard, running = c.age,
                            timeout = c.timeout, waiting = c.parked }
    end
  end
  table.sort(calls, function(a, b) return a.running > b.running end)
  return reply(200, {
    queues = queues, total = total, redis_info = redis_info(conn, cfg), calls = calls,
    schedules = json.array(admin.schedules(conn, cfg, core.now())),
    hosts = hosts.list(conn, cfg.namespace),
    host = { version = require("luakiq").version, pid = core.getpid(), threads = w.threads,
             rss = core.rss(), now = core.now(), auth = w.token ~= nil },
  })
end

-- The orders each listing may be sorted by.
local ORDERS = {
  queue = { id = true, perform_in = true, retry_count = true },
  morgue = { id = true, updated_at = true },
}

-- GET /api/web/workers/W/jobs?what=queue|morgue|busy&order=&dir=&min=&max=
-- &offset=&limit=&cursor=: one page of a worker's jobs (the dashboard's
-- tables; `luakiq jobs` and `morgue`); next is the cursor of the next page.
function M.jobs(w, req)
  local cfg, q, worker = w.cfg, req.query, req.params.worker
  admin.worker_of(cfg, worker)
  local what = q.what or "queue"
  local list, offset, limit, more, nxt
  if what == "busy" then
    list = admin.busy(w.conn(), cfg, worker, core.now())
    table.sort(list, function(a, b) return a.id < b.id end)
    offset, limit, more = 0, #list, false
  elseif ORDERS[what] then
    -- a cursor names its listing: what the query does not say comes from there
    local cursor = q.cursor ~= "" and q.cursor or nil
    local c = cursor and admin.cursor_listing(cursor) or {}
    local order = q.order ~= "" and q.order or c.order or (what == "queue" and "perform_in" or "updated_at")
    if not ORDERS[what][order] then errors.input("order must be one of the " .. what .. " fields, not '" .. order .. "'") end
    local dir = q.dir ~= "" and q.dir or c.dir or "asc"
    if dir ~= "asc" and dir ~= "desc" then errors.input("dir must be asc or desc") end
    local lex = order == "id"
    local min = request.bound(q.min, lex, c.min or (lex and "-" or "-inf"))
    local max = request.bound(q.max, lex, c.max or (lex and "+" or "+inf"))
    offset = int_param(q, "offset", 0, 0, 1e9)
    limit = int_param(q, "limit", PAGE, 1, MAX_PAGE)
    local after
    list, after, offset = admin.list(w.conn(), cfg, worker, what, order, dir, min, max, limit + 1, offset, cursor)
    more = #list > limit
    if more then list[#list] = nil end
    if more then nxt = after(limit) end
  else
    errors.input("what must be queue, morgue or busy")
  end
  return reply(200, { jobs = json.array(list), offset = offset, limit = limit, more = more, next = nxt })
end

-- GET /api/v1/workers/W/jobs/ID: one job, wherever it is (`luakiq job`).
function M.job(w, req)
  return reply(200, admin.job(w.conn(), w.cfg, req.params.worker, req.params.id, core.now()))
end

-- GET /api/v1/tags/T/jobs[?limit=N]: every worker's jobs tagged T
-- (luakiq jobs DIR --tag T): {"jobs":[{worker, id, state, tags, ...}],
-- "more": whether there were more than limit (default and most 1000)}.
function M.tagged(w, req)
  local list, more = admin.tagged(w.conn(), w.cfg, req.params.tag, int_param(req.query, "limit", 1000, 1, 1000),
    core.now())
  return reply(200, { jobs = json.array(list), more = more })
end

-- GET /api/v1/search?id=ID: where ID is in every worker (the dashboard's
-- search box): {"jobs":[{worker, id, state, ...}]}, empty when nowhere.
function M.search(w, req)
  local id = req.query.id
  if id == nil or id == "" then errors.input("say id=ID") end
  return reply(200, { jobs = json.array(admin.find(w.conn(), w.cfg, id, core.now())) })
end

-- POST /api/v1/workers/W/jobs: a JSON array of jobs or JSON lines, through
-- the client middleware chain (`luakiq enqueue`).
function M.enqueue(w, req)
  local worker = req.params.worker
  admin.worker_of(w.cfg, worker)
  local jobs = request.read_jobs(req.body)
  return reply(200, { enqueued = client.push(w.conn(), w.cfg, worker, jobs) })
end

-- The dashboard's buttons, POST /api/web/workers/W/...: act(conn, cfg,
-- worker, req) -> the answer, once W is known to exist (an unknown worker is
-- a 404 before the body is read).
local function on_worker(act)
  return function(w, req)
    admin.worker_of(w.cfg, req.params.worker)
    return reply(200, act(w.conn(), w.cfg, req.params.worker, req))
  end
end

M.morgue_requeue = on_worker(function(conn, cfg, wk, req)
  return admin.morgue_requeue(conn, cfg, wk, request.ids_of(req.body, true))
end)
M.morgue_delete = on_worker(function(conn, cfg, wk, req)
  return admin.morgue_delete(conn, cfg, wk, request.ids_of(req.body, true))
end)
M.queue_delete = on_worker(function(conn, cfg, wk, req)
  return admin.delete_queued(conn, cfg, wk, request.ids_of(req.body, false))
end)
M.queue_kill = on_worker(function(conn, cfg, wk, req)
  return admin.kill(conn, cfg, wk, request.ids_of(req.body, false))
end)
M.perform_now = on_worker(function(conn, cfg, wk) return admin.perform_all_now(conn, cfg, wk) end)
M.kill_failed = on_worker(function(conn, cfg, wk) return admin.kill_failed(conn, cfg, wk) end)
M.delete_failed = on_worker(function(conn, cfg, wk) return admin.delete_failed(conn, cfg, wk) end)
-- (also POST /api/v1/workers/W/pause and /resume). A pause answers once
-- every live host acknowledged it; one that some did not within 2 s
-- answers 504 with the same body, their tokens in "missing" and an "error".
function M.pause(w, req)
  local r = admin.pause(w.conn(), w.cfg, req.params.worker, true)
  if not r.missing then return reply(200, r) end
  r.missing = json.array(r.missing)
  r.error = string.format("paused, but not acknowledged within %g s by: %s", admin.PAUSE_WAIT,
    table.concat(r.missing, ", "))
  return reply(504, r)
end
M.resume = on_worker(function(conn, cfg, wk) return admin.pause(conn, cfg, wk, false) end)

-- POST /api/v1/workers/W/jobs/ID/cancel (`luakiq cancel`, the dashboard's
-- Cancel): {"id", "was": "queued"|"waiting"|"running"|"not_found",
-- "outcome": "cancelled" (removed now) | "requested" (running: its host
-- stops it at its next wait) | "not_found"}.
M.cancel = on_worker(function(conn, cfg, wk, req)
  local id = req.params.id
  local was = admin.cancel(conn, cfg, wk, { id })[id]
  local outcome = ({ queued = "cancelled", waiting = "cancelled", running = "requested" })[was] or "not_found"
  return { id = id, was = was, outcome = outcome }
end)

-- Failure groups (luakiq.ops.failures; docs/operations.md, "Failures").
-- ?worker=W narrows every one of them to W (unknown: 404).

-- GET /api/v1/failures: the groups (`luakiq failures`).
function M.failures(w, req)
  return reply(200, { failures = json.array(failures.list(w.conn(), w.cfg, req.query.worker)) })
end

-- GET /api/v1/failures/jobs?error=GROUP&cursor=&limit=: one page of a group's jobs.
function M.failure_jobs(w, req)
  local q = req.query
  local page = failures.jobs(w.conn(), w.cfg, q.worker, q.error, q.cursor, int_param(q, "limit", PAGE, 1, MAX_PAGE))
  page.jobs = json.array(page.jobs)
  return reply(200, page)
end

-- POST /api/v1/failures/requeue and /delete, {"error": GROUP, "worker"?: W}:
-- requeue or delete the whole group.
local function failure_action(action)
  return function(w, req)
    local v = request.body_json(req.body, '{"error": GROUP}')
    if type(v) ~= "table" then errors.input('the request body must be {"error": GROUP}') end
    if v.worker ~= nil and type(v.worker) ~= "string" then errors.input("worker must be a string") end
    return reply(200, failures.act(w.conn(), w.cfg, v.worker, v.error, action))
  end
end
M.failures_requeue = failure_action("requeue")
M.failures_delete = failure_action("delete")

return M
