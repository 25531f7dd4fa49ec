-- luakiq.web: the HTTP side of `luakiq run --web ADDR:PORT` (docs/operations.md).
--
-- Runs in the web thread's own VM (M.open, called by host/hostlua.c on that
-- thread). host/web.c accepts the connections on the web thread's event loop
-- and hands every request to the function made by M.handler, which
-- routes it, checks auth, calls the same luakiq.ops.admin / luakiq.client functions
-- as the CLI (so `luakiq stats`, `jobs`, `morgue`, `admin`, `enqueue` and the
-- endpoints give the same answers) over this VM's own Redis connection, and
-- returns status, content type, body. Errors never escape: luakiq.lib.errors kinds
-- map to statuses (input 400, notfound 404), anything else is a 500 with the
-- first line of the message (the traceback goes to the log).
local core = require "luakiq.core"
local errors = require "luakiq.lib.errors"
local json = require "luakiq.json"
local log = require "luakiq.lib.log"
local runtime = require "luakiq.lib.runtime"

local M = {}

M.MAX_BODY = 1048576 -- request bodies over this get 413 (web.c and evhttp)
local PAGE = 100       -- default listing page
local MAX_PAGE = 500   -- largest page one request may ask for

-- --- addresses and auth ------------------------------------------------------

-- "ADDR:PORT" or "[V6]:PORT" -> host, port; raises an input error otherwise.
function M.parse_addr(s)
  local host, port = tostring(s):match("^%[([^%]]+)%]:(%d+)$")
  if not host then host, port = tostring(s):match("^([^:]+):(%d+)$") end
  port = tonumber(port)
  if not host or not port or port > 65535 then
    errors.input("--web must be ADDR:PORT (e.g. 127.0.0.1:8080), got '" .. tostring(s) .. "'")
  end
  return host, port
end

-- Is host (no port, no brackets) a loopback address or name?
function M.is_loopback(host)
  host = host:lower()
  return host == "localhost" or host == "::1" or host:match("^127%.%d+%.%d+%.%d+$") ~= nil
end

-- The listener check done at start-up: a non-loopback address without a token
-- would let anyone who can reach it delete and requeue jobs.
function M.check_listen(addr, token)
  local host = M.parse_addr(addr)
  if not M.is_loopback(host) and not token then
    errors.input("--web " .. addr .. " is not a loopback address: set web_token in config.lua " ..
      "or LUAKIQ_WEB_TOKEN (every endpoint then needs 'Authorization: Bearer TOKEN' or the dashboard's sign-in)")
  end
  return true
end

-- Compares two strings in time that depends on their lengths only.
local function same(a, b)
  if #a ~= #b then return false end
  local diff = 0
  for i = 1, #a do diff = bit.bor(diff, bit.bxor(a:byte(i), b:byte(i))) end
  return diff == 0
end

-- The dashboard's session: the token itself, in an HttpOnly, SameSite=Strict
-- cookie (no script of the page can read it; no other site's request carries
-- it). Percent-encoded, so any token fits a cookie value.
local COOKIE = "luakiq_token"

local function cookie_encode(s)
  return (s:gsub("[^%w%-%._~]", function(c) return ("%%%02X"):format(c:byte()) end))
end

-- The value of the cookie named COOKIE in a Cookie header, decoded; "" if none.
local function cookie_token(header)
  for pair in (header or ""):gmatch("[^;]+") do
    local k, v = pair:match("^%s*([^=]-)%s*=%s*(.-)%s*$")
    if k == COOKIE then
      return (v:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
    end
  end
  return ""
end

-- The Set-Cookie value that signs in (value) or out (nil). Secure when a TLS
-- proxy in front says so (X-Forwarded-Proto: https).
local function session_cookie(value, req)
  local c = COOKIE .. "=" .. (value and cookie_encode(value) or "") .. "; Path=/; HttpOnly; SameSite=Strict"
  if not value then c = c .. "; Max-Age=0" end
  if (req.forwarded_proto or ""):lower() == "https" then c = c .. "; Secure" end
  return c
end

-- The host part of a Host header value ("127.0.0.1:8080", "[::1]:8080").
local function host_of(h)
  return h:match("^%[([^%]]+)%]") or h:match("^([^:]*)")
end

-- --- small helpers -------------------------------------------------------------

local function unescape(s)
  return (s:gsub("%+", " "):gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

local function parse_query(q)
  local out = {}
  for pair in (q or ""):gmatch("[^&]+") do
    local k, v = pair:match("^([^=]*)=?(.*)$")
    out[unescape(k)] = unescape(v)
  end
  return out
end

-- (json.clean: bytes that are not UTF-8, left in Redis by another writer,
-- are shown escaped, so the answer is always JSON)
local function reply(status, value)
  return status, "application/json", json.clean(json.encode(value))
end

local function fail(status, msg) return reply(status, { error = msg }) end


-- Decodes a JSON request body (an object unless want_array); raises input errors.
local function body_json(body, what)
  if not body:match("%S") then errors.input("the request body must be " .. what) end
  local ok, v = pcall(json.decode, body)
  if not ok then errors.input("invalid JSON: " .. tostring(v):gsub("^json: ", "")) end
  return v
end

-- Jobs for enqueue: one JSON array, or JSON lines (like `luakiq enqueue`).
local function read_jobs(body)
  if body:match("^%s*%[") or not body:match("%S") then return body_json(body, "a JSON array of jobs") end
  local jobs, n = {}, 0
  for line in (body .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if line:match("%S") then
      local ok, v = pcall(json.decode, line)
      if not ok then errors.input("line " .. n .. ": invalid JSON: " .. tostring(v):gsub("^json: ", "")) end
      jobs[#jobs + 1] = v
    end
  end
  return jobs
end

-- ids from {"ids": [...]} (nil with {"all": true} when allow_all).
local function ids_of(body, allow_all)
  local v = body_json(body, allow_all and '{"ids":[...]} or {"all":true}' or '{"ids":[...]}')
  if type(v) ~= "table" then errors.input("the request body must be a JSON object") end
  if v.all == true and allow_all then
    if v.ids ~= nil then errors.input("give ids or all, not both") end
    return nil
  end
  local ids = v.ids
  if type(ids) ~= "table" or #ids == 0 then
    errors.input(allow_all and 'give {"ids":[...]} (non-empty) or {"all":true}' or 'give {"ids":[...]} (non-empty)')
  end
  for k in pairs(ids) do
    if type(k) ~= "number" then errors.input("ids must be an array") end
  end
  return ids
end

-- A Prometheus label value, escaped.
local function label_value(v)
  return (v:gsub('[\\"\n]', { ["\\"] = "\\\\", ['"'] = '\\"', ["\n"] = "\\n" }))
end

local function num(x)
  if x == math.floor(x) and math.abs(x) < 2 ^ 53 then return string.format("%.0f", x) end
  return string.format("%.6f", x)
end

-- --- range parameters --------------------------------------------------------------

local ORDERS = {
  queue = { id = true, perform_in = true, retry_count = true },
  morgue = { id = true, updated_at = true },
}

-- A bound in Redis range syntax; bare values are made inclusive.
local function bound(v, lex, default)
  if v == nil or v == "" then return default end
  if lex then
    if v == "-" or v == "+" or v:match("^[%[%(]") then return v end
    return "[" .. v
  end
  if v == "-inf" or v == "+inf" or v == "inf" then return v end
  local n = v:match("^%((.*)$") or v
  if not tonumber(n) then errors.input("'" .. v .. "' is not a number or a Redis score bound") end
  return v
end

local function int_param(q, name, default, lo, hi)
  local v = q[name]
  if v == nil or v == "" then return default end
  local n = tonumber(v)
  if not n or n ~= math.floor(n) or n < lo or n > hi then
    errors.input(name .. " must be an integer from " .. lo .. " to " .. hi)
  end
  return n
end

-- --- the API -------------------------------------------------------------------------

-- Every endpoint's function gets (ctx, req, query, worker) and returns status, type, body.
local function api(ctx)
  local admin = require "luakiq.ops.admin"
  local client = require "luakiq.client"
  local cfg = ctx.cfg
  local A = {}

  function A.stats(c) return reply(200, admin.stats(c.conn(), cfg)) end

  -- One server's INFO, or a Redis Cluster's: every master's (conn:each),
  -- memory and clients summed, the oldest uptime, the first eviction
  -- warning; nodes lists each master's own figures.
  local function human(bytes)
    local units, i = { "B", "K", "M", "G", "T" }, 1
    while bytes >= 1024 and i < #units do bytes, i = bytes / 1024, i + 1 end
    return i == 1 and string.format("%dB", bytes) or string.format("%.2f%s", bytes, units[i])
  end
  local function redis_info(conn)
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

  function A.dashboard(c)
    local conn = c.conn()
    local by = admin.worker_stats(conn, cfg)
    local queues = json.array()
    local total = { lag = 0, processed = 0, failed = 0, busy = 0, enqueued = 0, fresh = 0, retries = 0, dead = 0 }
    for _, w in ipairs(cfg.workers) do
      local s = by[w.name]
      local q = { name = w.name, lag = s.lag, processed = s.processed, failed = s.failed, busy = s.busy,
                  enqueued = s.length, fresh = s.fresh, retries = s.retries, dead = s.morgue_length,
                  shards_count = w.shards_count, paused = s.paused }
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
      queues = queues, total = total, redis_info = redis_info(conn), calls = calls,
      schedules = json.array(admin.schedules(conn, cfg, core.now())),
      hosts = require("luakiq.ops.hosts").list(conn, cfg.namespace),
      host = { version = require("luakiq").version, pid = core.getpid(), threads = ctx.threads,
               rss = core.rss(), now = core.now(), auth = ctx.token ~= nil },
    })
  end

  function A.jobs(c, _, q, worker)
    admin.worker_of(cfg, worker)
    local what = q.what or "queue"
    local list, offset, limit, more, nxt
    if what == "busy" then
      list = admin.busy(c.conn(), cfg, worker, core.now())
      table.sort(list, function(a, b) return a.id < b.id end)
      offset, limit, more = 0, #list, false
    elseif ORDERS[what] then
      local order = q.order or (what == "queue" and "perform_in" or "updated_at")
      if order == "" then order = what == "queue" and "perform_in" or "updated_at" end
      if not ORDERS[what][order] then errors.input("order must be one of the " .. what .. " fields, not '" .. order .. "'") end
      local dir = q.dir or "asc"
      if dir == "" then dir = "asc" end
      if dir ~= "asc" and dir ~= "desc" then errors.input("dir must be asc or desc") end
      local lex = order == "id"
      local min = bound(q.min, lex, lex and "-" or "-inf")
      local max = bound(q.max, lex, lex and "+" or "+inf")
      offset = int_param(q, "offset", 0, 0, 1e9)
      limit = int_param(q, "limit", PAGE, 1, MAX_PAGE)
      local cursor = q.cursor ~= "" and q.cursor or nil
      local after
      list, after, offset = admin.list(c.conn(), cfg, worker, what, order, dir, min, max, limit + 1, offset, cursor)
      more = #list > limit
      if more then list[#list] = nil end
      if more then nxt = after(limit) end
    else
      errors.input("what must be queue, morgue or busy")
    end
    return reply(200, { jobs = json.array(list), offset = offset, limit = limit, more = more, next = nxt })
  end

  function A.job(c, _, _, worker, id)
    return reply(200, admin.job(c.conn(), cfg, worker, id, core.now()))
  end

  -- GET /api/v1/tags/T/jobs[?limit=N]: every worker's jobs tagged T
  -- (luakiq jobs DIR --tag T): {"jobs":[{worker, id, state, tags, ...}],
  -- "more": whether there were more than limit (default and most 1000)}.
  function A.tagged(c, _, q, tag)
    local list, more = admin.tagged(c.conn(), cfg, tag, int_param(q, "limit", 1000, 1, 1000), core.now())
    return reply(200, { jobs = json.array(list), more = more })
  end

  -- GET /api/v1/search?id=ID: where ID is in every worker (the dashboard's
  -- search box): {"jobs":[{worker, id, state, ...}]}, empty when nowhere.
  function A.search(c, _, q)
    if q.id == nil or q.id == "" then errors.input("say id=ID") end
    return reply(200, { jobs = json.array(admin.find(c.conn(), cfg, q.id, core.now())) })
  end

  function A.enqueue(c, req, _, worker)
    admin.worker_of(cfg, worker)
    local jobs = read_jobs(req.body)
    return reply(200, { enqueued = client.push(c.conn(), cfg, worker, jobs) })
  end

  A.actions = {
    ["morgue/requeue"] = function(conn, req, w) return admin.morgue_requeue(conn, cfg, w, ids_of(req.body, true)) end,
    ["morgue/delete"] = function(conn, req, w) return admin.morgue_delete(conn, cfg, w, ids_of(req.body, true)) end,
    ["queue/delete"] = function(conn, req, w) return admin.delete_queued(conn, cfg, w, ids_of(req.body, false)) end,
    ["queue/perform_now"] = function(conn, _, w) return admin.perform_all_now(conn, cfg, w) end,
    ["queue/kill_failed"] = function(conn, _, w) return admin.kill_failed(conn, cfg, w) end,
    ["queue/delete_failed"] = function(conn, _, w) return admin.delete_failed(conn, cfg, w) end,
    ["queue/pause"] = function(conn, _, w) return admin.pause(conn, cfg, w, true) end,
    ["queue/resume"] = function(conn, _, w) return admin.pause(conn, cfg, w, false) end,
  }

  -- Failure groups (luakiq.ops.failures; docs/operations.md, "Failures").
  -- ?worker=W narrows every one of them to W (unknown: 404).
  function A.failures(c, _, q)
    return reply(200, { failures = json.array(require("luakiq.ops.failures").list(c.conn(), cfg, q.worker)) })
  end

  function A.failure_jobs(c, _, q)
    local page = require("luakiq.ops.failures").jobs(c.conn(), cfg, q.worker, q.error, q.cursor,
      int_param(q, "limit", PAGE, 1, MAX_PAGE))
    page.jobs = json.array(page.jobs)
    return reply(200, page)
  end

  -- POST {"error": GROUP, "worker"?: W}: requeue or delete the whole group.
  function A.failure_action(c, req, _, action)
    local v = body_json(req.body, '{"error": GROUP}')
    if type(v) ~= "table" then errors.input('the request body must be {"error": GROUP}') end
    if v.worker ~= nil and type(v.worker) ~= "string" then errors.input("worker must be a string") end
    return reply(200, require("luakiq.ops.failures").act(c.conn(), cfg, v.worker, v.error, action))
  end

  -- Signing in: {"token": T} (JSON) or token=T (a form) -> the session cookie.
  -- Without a token configured there is nothing to sign in to.
  function A.login(_, req)
    if not ctx.token then return fail(404, "no web_token is set: nothing to sign in to") end
    local given
    if req.body:match("^%s*{") then
      local v = body_json(req.body, '{"token": "..."}')
      given = type(v) == "table" and v.token
    else
      given = parse_query(req.body).token
    end
    if type(given) ~= "string" or given == "" then errors.input('give {"token": "..."}') end
    if not same(given, ctx.token) then
      ctx.failed_logins = (ctx.failed_logins or 0) + 1
      local now = core.now()
      if now - (ctx.failed_logged or 0) >= 60 then -- one line a minute, however many
        log.warn(("web: %d failed sign-in(s) with a wrong token"):format(ctx.failed_logins))
        ctx.failed_logged, ctx.failed_logins = now, 0
      end
      return fail(401, "wrong token")
    end
    local st, ct, body = reply(200, { signed_in = true })
    return st, ct, body, session_cookie(ctx.token, req)
  end

  function A.logout(_, req)
    local st, ct, body = reply(200, { signed_in = false })
    return st, ct, body, session_cookie(nil, req)
  end

  -- Prometheus text format 0.0.4.
  function A.metrics(c)
    local out = {}
    local function metric(name, typ, help, samples)
      out[#out + 1] = "# HELP " .. name .. " " .. help
      out[#out + 1] = "# TYPE " .. name .. " " .. typ
      for _, s in ipairs(samples) do
        local labels = ""
        if s[1] then
          labels = "{" .. s[1] .. '="' .. label_value(s[2]) .. '"}'
        end
        out[#out + 1] = name .. labels .. " " .. num(s[3])
      end
    end
    local ok, by = pcall(function() return admin.worker_stats(c.conn(), cfg) end)
    metric("luakiq_redis_up", "gauge", "1 when Redis answered this scrape.", { { nil, nil, ok and 1 or 0 } })
    if ok then
      local function per(field)
        local s = {}
        for _, w in ipairs(cfg.workers) do s[#s + 1] = { "worker", w.name, by[w.name][field] } end
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
      metric("luakiq_expired_total", "counter", "Payloads that expired before they ran (moved to the morgue).",
        per("expired"))
      -- today's wait and run times (UTC day: the counters start again at 00:00)
      local timing = require "luakiq.ops.timing"
      local okt, err = pcall(function()
        local lines, names = { wait = {}, run = {} }, {}
        for i, w in ipairs(cfg.workers) do names[i] = w.name end
        for i, rep in ipairs(timing.read_all(c.conn(), cfg, names)) do
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
      end)
      if okt then
        for _, kind in ipairs { "wait", "run" } do
          local name = "luakiq_job_" .. kind .. "_seconds"
          out[#out + 1] = "# HELP " .. name .. " " .. (kind == "wait" and
            "Seconds from when a job was due to the start of its call, today (UTC; all hosts)." or
            "Seconds one perform call ran, today (UTC; all hosts).")
          out[#out + 1] = "# TYPE " .. name .. " histogram"
          for _, l in ipairs(err[kind]) do out[#out + 1] = l end
        end
      else log.warn("metrics: timing: " .. tostring(err):match("^[^\n]*")) end
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
    for _, w in ipairs(cfg.workers) do
      age[#age + 1] = { "worker", w.name, oldest[w.name] or 0 }
      timeouts[#timeouts + 1] = { "worker", w.name, counted[w.name] or 0 }
    end
    metric("luakiq_oldest_call_seconds", "gauge",
      "Seconds the oldest perform call of the worker running on this host has run (0: none runs).", age)
    metric("luakiq_timeouts_total", "counter", "Perform calls this host failed at their timeout.", timeouts)
    return 200, "text/plain; version=0.0.4; charset=utf-8", table.concat(out, "\n") .. "\n"
  end

  return A
end

-- --- the handler -----------------------------------------------------------------------

-- The web thread's start (host/hostlua.c, in that thread's own VM): boot is
-- JSON {dir, overrides, token, threads} from `luakiq run`; loads the script
-- directory as every worker thread does and returns the request handler.
function M.open(boot)
  -- enqueues from the API follow a reshard made while the host runs
  require("luakiq.client").follow = true
  local b = json.decode(boot)
  local cfg = runtime.load(b.dir, b.overrides)
  return M.handler(cfg, { token = b.token, threads = b.threads })
end

local MUTATING = { POST = true, PUT = true, DELETE = true, PATCH = true }

-- Returns function(req) -> status, content_type, body for web.c (via vm.c).
-- opts: token (nil: none), threads (count, for the dashboard).
function M.handler(cfg, opts)
  opts = opts or {}
  local ctx = { cfg = cfg, token = opts.token, threads = opts.threads }
  local A = api(ctx)
  local c = {}
  -- This VM's own connection for the web (runtime.lazy_conn); a request
  -- waiting on it delays only other requests, never the main loop.
  local conn_broken
  c.conn, conn_broken = runtime.lazy_conn(cfg.redis, math.min(cfg.redis_timeout or 10, 5))
  -- the shards_count of each queue as the registry has it, read again at
  -- most once a second (a reshard changes it while the host runs)
  local get, registry_at = c.conn, -math.huge
  c.conn = function()
    local conn = get()
    if core.mono() - registry_at >= 1 then
      registry_at = core.mono()
      pcall(runtime.follow_registry, conn, cfg)
    end
    return conn
  end

  local function route(req)
    local method = req.method == "HEAD" and "GET" or req.method
    local path, query = req.uri:match("^([^?#]*)%??([^#]*)")
    path = path or "/"
    local q = parse_query(query)
    local parts = {}
    for seg in path:gmatch("[^/]+") do parts[#parts + 1] = unescape(seg) end

    -- Without a token the listener is on loopback (check_listen): only accept
    -- loopback Host names, so a web page on another site cannot reach it by
    -- DNS rebinding. With a token, every request but the login page's needs
    -- it (a rebound name carries neither the header nor the cookie).
    if not ctx.token then
      local h = host_of(req.host)
      if req.host == "" or not M.is_loopback(h) then
        return fail(403, "Host must be a loopback address (set web_token to serve other names)")
      end
    end
    -- Cross-site mutating requests (Origin differs) are refused with or
    -- without a token: the cookie is SameSite=Strict, this is the belt.
    if MUTATING[method] and req.origin ~= "" and req.origin:gsub("^https?://", "") ~= req.host then
      return fail(403, "cross-site request refused")
    end
    local function authorized()
      if not ctx.token then return true end
      local given = req.auth:match("^[Bb]earer%s+(.-)%s*$")
      if given then return same(given, ctx.token) end
      return same(cookie_token(req.cookie), ctx.token)
    end
    -- open: served without the token (the dashboard's page, which holds no
    -- data, and signing in and out).
    local function only(m, fn, open, ...)
      if method ~= m then return fail(405, "use " .. m .. " for " .. path) end
      if not open and not authorized() then return fail(401, "missing or wrong token") end
      return fn(c, req, q, ...)
    end

    local n = #parts
    if n == 0 or (n == 1 and parts[1] == "index.html") then
      return only("GET", function() return 200, "text/html; charset=utf-8", require("luakiq.web.dashboard") end, true)
    elseif n == 1 and parts[1] == "metrics" then
      return only("GET", A.metrics, cfg.metrics_public)
    elseif n == 3 and parts[1] == "api" and parts[2] == "web" and parts[3] == "login" then
      return only("POST", A.login, true)
    elseif n == 3 and parts[1] == "api" and parts[2] == "web" and parts[3] == "logout" then
      return only("POST", A.logout, true)
    elseif parts[1] == "api" then
      if n == 3 and parts[2] == "v1" and parts[3] == "stats" then return only("GET", A.stats) end
      if n == 3 and parts[2] == "v1" and parts[3] == "hosts" then
        return only("GET", function()
          return reply(200, { hosts = require("luakiq.ops.hosts").list(c.conn(), cfg.namespace) })
        end)
      end
      if n == 3 and parts[2] == "v1" and parts[3] == "history" then
        return only("GET", function()
          return reply(200, require("luakiq.ops.timing").history(c.conn(), cfg, q.minutes or 60, q.step or 1))
        end)
      end
      if n == 3 and parts[2] == "web" and parts[3] == "dashboard" then return only("GET", A.dashboard) end
      if n == 3 and parts[2] == "v1" and parts[3] == "failures" then return only("GET", A.failures) end
      if n == 4 and parts[2] == "v1" and parts[3] == "failures" then
        if parts[4] == "jobs" then return only("GET", A.failure_jobs) end
        if parts[4] == "requeue" or parts[4] == "delete" then return only("POST", A.failure_action, false, parts[4]) end
      end
      if n == 3 and parts[2] == "v1" and parts[3] == "search" then return only("GET", A.search) end
      if n == 5 and parts[2] == "v1" and parts[3] == "tags" and parts[5] == "jobs" then
        return only("GET", A.tagged, false, parts[4])
      end
      if n == 5 and parts[2] == "v1" and parts[3] == "workers" and parts[5] == "jobs" then
        return only("POST", A.enqueue, false, parts[4])
      end
      if n == 6 and parts[2] == "v1" and parts[3] == "workers" and parts[5] == "jobs" then
        return only("GET", A.job, false, parts[4], parts[6])
      end
      if n == 5 and parts[2] == "v1" and parts[3] == "workers" and (parts[5] == "pause" or parts[5] == "resume") then
        return only("POST", function()
          return reply(200, require("luakiq.ops.admin").pause(c.conn(), cfg, parts[4], parts[5] == "pause"))
        end)
      end
      if n == 5 and parts[2] == "v1" and parts[3] == "workers" and parts[5] == "timing" then
        return only("GET", function()
          local day = q.day ~= "" and q.day or nil
          return reply(200, require("luakiq.ops.timing").read(c.conn(), cfg, parts[4], day))
        end)
      end
      if n == 5 and parts[2] == "web" and parts[3] == "workers" and parts[5] == "jobs" then
        return only("GET", A.jobs, false, parts[4])
      end
      if n == 6 and parts[2] == "web" and parts[3] == "workers" then
        local act = A.actions[parts[5] .. "/" .. parts[6]]
        if act then
          return only("POST", function()
            require("luakiq.ops.admin").worker_of(cfg, parts[4])
            return reply(200, act(c.conn(), req, parts[4]))
          end)
        end
      end
    end
    return fail(404, "not found: " .. path)
  end

  return function(req)
    local tb
    local function trace(e)
      if errors.describe(e) == "runtime" then tb = debug.traceback(tostring(e), 2) end
      return e
    end
    local ok, status, ctype, body, cookie = xpcall(route, trace, req)
    -- A read that met a dead connection (Redis restarted, a Sentinel
    -- failover) is tried once more on a new one; a write is not (it may
    -- have run).
    if not ok and not MUTATING[req.method] and conn_broken() then
      tb = nil
      ok, status, ctype, body, cookie = xpcall(route, trace, req)
    end
    if ok then return status, ctype, body, cookie end
    local kind, msg = errors.describe(status)
    if kind == "input" then return fail(400, msg) end
    if kind == "notfound" or kind == "missing" then return fail(404, msg) end
    log.error("web: " .. req.method .. " " .. req.uri .. ": " .. (tb or msg))
    return fail(500, msg:match("^[^\n]*"))
  end
end

return M
