-- luakiq.web: the HTTP side of `luakiq run --web ADDR:PORT` (docs/operations.md).
--
-- Runs in the web thread's own VM (M.open, called by host/hostlua.c on that
-- thread). host/web.c accepts the connections on the web thread's event loop
-- and hands every request to the function made by M.handler, which checks
-- who asks (luakiq.web.auth), finds the request's route in ROUTES below and
-- calls its handler: luakiq.web.api (the JSON endpoints), luakiq.web.replies
-- (replies to jobs that wait for one), luakiq.web.metrics (Prometheus),
-- luakiq.web.auth (signing in and out) or the dashboard's page
-- (luakiq.web.dashboard, built from dashboard.html). Each answers status,
-- content type, body over this VM's own Redis connection. Errors never
-- escape: luakiq.lib.errors kinds map to statuses (input 400, notfound 404),
-- anything else is a 500 with the first line of the message (the traceback
-- goes to the log).
--
-- The modules depend one way: this one on api, replies, metrics and auth;
-- those on request (parsing and answering).
--
-- `luakiq run --replies ADDR:PORT` runs a second listener (a web thread and
-- VM of its own) whose handler (opts.only = "replies") serves the reply
-- routes only. web.c hands it the requests that arrived together as one
-- batch (M.BATCH at most): each is routed in a coroutine of its own, and
-- their Redis calls go out together, one pipeline a round (see batcher).
local core = require "luakiq.core"
local errors = require "luakiq.lib.errors"
local log = require "luakiq.lib.log"
local runtime = require "luakiq.lib.runtime"
local api = require "luakiq.web.api"
local auth = require "luakiq.web.auth"
local metrics = require "luakiq.web.metrics"
local replies = require "luakiq.web.replies"
local request = require "luakiq.web.request"

local M = {}

M.MAX_BODY = 1048576 -- request bodies over this get 413 (web.c and evhttp)
M.BATCH = 64         -- the --replies listener's requests handled at once, at most

-- GET /: the dashboard, dashboard.html (luakiq.web.dashboard: cmake/embed.lua
-- makes the file a module returning its bytes). One self-contained page
-- (inline CSS and JS, no build step, no external requests): it polls
-- /api/web/dashboard every second and shows the enqueued, busy and dead jobs
-- of a worker from /api/web/workers/NAME/jobs; every action sits behind a
-- confirm() dialog. With web_token set, a 401 shows a sign-in form (POST
-- /api/web/login sets an HttpOnly cookie; the page never holds the token) and
-- a Sign out button. Job data is user data: it only ever reaches the page
-- through textContent, never as HTML.
local function page()
  return 200, "text/html; charset=utf-8", require("luakiq.web.dashboard")
end

-- Every route: method, path, handler, and who may call it. A ":name" segment
-- matches any one segment, handed to the handler as req.params.name; the
-- others must be equal (segments are compared percent-decoded; empty ones are
-- ignored, so "/api/v1/stats/" is "/api/v1/stats"). handler(w, req) returns
-- status, content type, body[, Set-Cookie value]; w is the context made by
-- M.handler, req the request from web.c plus query and params.
-- Access: only with the token when web_token is set (the default); open =
-- true: to anyone (the page, which holds no data, and signing in and out);
-- open = "metrics_public": to anyone when config.lua's metrics_public says so;
-- open = "token": to anyone, from any Host or Origin: the reply routes, whose
-- path holds the capability (a reply token, HMAC-signed in Redis), the only
-- routes the --replies listener serves.
-- A path that matches with another method answers 405; no match, 404.
local ROUTES = {
  { "GET",  "/",                                          page,               open = true },
  { "GET",  "/index.html",                                page,               open = true },
  { "GET",  "/metrics",                                   metrics.scrape,     open = "metrics_public" },
  { "POST", "/api/web/login",                             auth.login,         open = true },
  { "POST", "/api/web/logout",                            auth.logout,        open = true },
  -- replies to jobs that wait for one (luakiq.web.replies)
  { "POST", "/api/v1/replies/:token",                     replies.by_token,   open = "token" },
  { "POST", "/api/v1/replies/:token/heartbeat",           replies.heartbeat,  open = "token" },
  { "POST", "/api/v1/workers/:worker/replies",            replies.by_key },
  { "POST", "/api/v1/workers/:worker/jobs/:id",           replies.by_id },
  { "GET",  "/api/v1/workers/:worker/waiting",            replies.waiting },
  { "GET",  "/api/v1/workers/:worker/late_replies",       replies.late },
  -- the API (docs/operations.md, "HTTP API")
  { "GET",  "/api/v1/stats",                              api.stats },
  { "GET",  "/api/v1/hosts",                              api.hosts },
  { "GET",  "/api/v1/history",                            api.history },
  { "GET",  "/api/v1/search",                             api.search },
  { "GET",  "/api/v1/tags/:tag/jobs",                     api.tagged },
  { "POST", "/api/v1/workers/:worker/jobs",               api.enqueue },
  { "GET",  "/api/v1/workers/:worker/jobs/:id",           api.job },
  { "POST", "/api/v1/workers/:worker/jobs/:id/cancel",    api.cancel },
  { "GET",  "/api/v1/workers/:worker/timing",             api.timing },
  { "POST", "/api/v1/workers/:worker/pause",              api.pause },
  { "POST", "/api/v1/workers/:worker/resume",             api.resume },
  { "GET",  "/api/v1/failures",                           api.failures },
  { "GET",  "/api/v1/failures/jobs",                      api.failure_jobs },
  { "POST", "/api/v1/failures/requeue",                   api.failures_requeue },
  { "POST", "/api/v1/failures/delete",                    api.failures_delete },
  -- what the dashboard asks and its buttons
  { "GET",  "/api/web/dashboard",                         api.dashboard },
  { "GET",  "/api/web/workers/:worker/jobs",              api.jobs },
  { "POST", "/api/web/workers/:worker/morgue/requeue",    api.morgue_requeue },
  { "POST", "/api/web/workers/:worker/morgue/delete",     api.morgue_delete },
  { "POST", "/api/web/workers/:worker/queue/delete",      api.queue_delete },
  { "POST", "/api/web/workers/:worker/queue/kill",        api.queue_kill },
  { "POST", "/api/web/workers/:worker/queue/perform_now", api.perform_now },
  { "POST", "/api/web/workers/:worker/queue/kill_failed", api.kill_failed },
  { "POST", "/api/web/workers/:worker/queue/delete_failed", api.delete_failed },
  { "POST", "/api/web/workers/:worker/jobs/:id/cancel",   api.cancel },
  { "POST", "/api/web/workers/:worker/queue/pause",       api.pause },
  { "POST", "/api/web/workers/:worker/queue/resume",      api.resume },
}

-- Each route's path as segments: a string to equal, or {name} to capture.
-- REPLY_ROUTES: the open = "token" ones, all the --replies listener serves.
local REPLY_ROUTES = {}
for _, r in ipairs(ROUTES) do
  r.segments = {}
  for seg in r[2]:gmatch("[^/]+") do
    r.segments[#r.segments + 1] = seg:match("^:(.+)$") and { seg:sub(2) } or seg
  end
  if r.open == "token" then REPLY_ROUTES[#REPLY_ROUTES + 1] = r end
end

-- The route of routes whose path matches parts (decoded segments) and its
-- params, the one with method first; nil when no path matches.
local function find_route(routes, method, parts)
  local found, found_params
  for _, r in ipairs(routes) do
    local segs = r.segments
    if #segs == #parts then
      local params = {}
      for i, s in ipairs(segs) do
        if type(s) == "table" then params[s[1]] = parts[i]
        elseif s ~= parts[i] then params = nil break end
      end
      if params then
        if r[1] == method then return r, params end
        found, found_params = found or r, found_params or params
      end
    end
  end
  return found, found_params
end

-- --- the listener --------------------------------------------------------------

-- "ADDR:PORT" or "[V6]:PORT" -> host, port; raises an input error otherwise
-- (naming flag: "--web" unless given).
function M.parse_addr(s, flag)
  local host, port = tostring(s):match("^%[([^%]]+)%]:(%d+)$")
  if not host then host, port = tostring(s):match("^([^:]+):(%d+)$") end
  port = tonumber(port)
  if not host or not port or port > 65535 then
    errors.input((flag or "--web") .. " must be ADDR:PORT (e.g. 127.0.0.1:8080), got '" .. tostring(s) .. "'")
  end
  return host, port
end

-- The listener check done at start-up: a non-loopback address without a token
-- would let anyone who can reach it delete and requeue jobs.
function M.check_listen(addr, token)
  local host = M.parse_addr(addr)
  if not auth.is_loopback(host) and not token then
    errors.input("--web " .. addr .. " is not a loopback address: set web_token in config.lua " ..
      "or LUAKIQ_WEB_TOKEN (every endpoint then needs 'Authorization: Bearer TOKEN' or the dashboard's sign-in)")
  end
  return true
end

-- --- the handler -----------------------------------------------------------------------

-- The web thread's start (host/hostlua.c, in that thread's own VM): boot is
-- JSON {dir, overrides, token, threads, only} from `luakiq run`; loads the
-- script directory as every worker thread does and returns the request
-- handler and the batch handler (M.handler's). The --replies listener's
-- thread has only = "replies".
function M.open(boot)
  -- enqueues from the API follow a reshard made while the host runs
  require("luakiq.client").follow = true
  local b = require("luakiq.json").decode(boot)
  local cfg = runtime.load(b.dir, b.overrides)
  return M.handler(cfg, { token = b.token, threads = b.threads, only = b.only })
end

local MUTATING = { POST = true, PUT = true, DELETE = true, PATCH = true }

-- Handles a batch of requests together over get()'s connection: run(handle,
-- reqs) calls handle(req) for each in a coroutine of its own; while they
-- run, the context's conn() is .conn, a stand-in whose call and script
-- yield the command instead of sending it. When every coroutine has ended
-- or yielded, the yielded commands go to Redis as one pipeline (Redis's
-- time for a request is mostly the round trip's: 117 us a reply alone, 37
-- pipelined), each coroutine is resumed with its reply (an error reply, or
-- the pipeline's I/O error, raised in it as conn:call would), and so on
-- until all have answered. Any other method of the stand-in is the real
-- connection's, sent at once. Returns run's {{status, content_type, body,
-- set_cookie}...} in the order of reqs.
local function batcher(get)
  local b = {}
  local function send(cmd)
    local ok, r = coroutine.yield(cmd)
    if not ok then error(r, 0) end
    if type(r) == "table" and r.err then error("redis: " .. r.err, 0) end
    return r
  end
  -- (checked here, as conn:call does: a bad argument in the pipeline
  -- would fail every request of the round)
  local function command(...)
    local cmd = { ... }
    for i = 1, select("#", ...) do
      local v, t = cmd[i], type(cmd[i])
      if not (t == "string" or t == "number" and v == v and v > -math.huge and v < math.huge) then
        error("redis: argument " .. i .. " must be a string or a finite number", 3)
      end
    end
    return cmd
  end
  local stand_in = {
    call = function(_, ...) return send(command(...)) end,
    script = function(_, name, ...) local cmd = command(...) cmd.script = name return send(cmd) end,
  }
  setmetatable(stand_in, { __index = function(_, k)
    return function(_, ...) local conn = get() return conn[k](conn, ...) end
  end })

  function b.run(handle, reqs)
    local out, cos, wants = {}, {}, {}
    local function step(i, ...)
      local ok, a, c, d, e = coroutine.resume(cos[i], ...)
      if not ok then
        log.error("web: " .. reqs[i].method .. " " .. reqs[i].uri .. ": " .. tostring(a))
        out[i] = { request.fail(500, "internal error (see the host's log)") }
      elseif coroutine.status(cos[i]) == "dead" then
        out[i] = { a, c, d, e }
      else
        wants[#wants + 1] = { i, a }
      end
    end
    b.conn = stand_in
    local ok, err = pcall(function()
      for i, req in ipairs(reqs) do
        cos[i] = coroutine.create(handle)
        step(i, req)
      end
      while #wants > 0 do
        local round, cmds = wants, {}
        wants = {}
        for k, w in ipairs(round) do cmds[k] = w[2] end
        local conn_ok, replies = pcall(function() local conn = get() return conn:pipeline(cmds) end)
        for k, w in ipairs(round) do
          if conn_ok then step(w[1], true, replies[k]) else step(w[1], false, replies) end
        end
      end
    end)
    b.conn = nil
    if not ok then error(err, 0) end
    return out
  end
  return b
end

-- Returns function(req) -> status, content_type, body, set_cookie for web.c
-- (via hostlua.c), and function(reqs) -> {{status, content_type, body,
-- set_cookie}...} for a batch of them (batcher). opts: token (nil: none),
-- threads (count, for the dashboard), only ("replies": the reply routes and
-- nothing else, for the --replies listener).
function M.handler(cfg, opts)
  opts = opts or {}
  local routes = opts.only == "replies" and REPLY_ROUTES or ROUTES
  -- The context every route handler gets (as w).
  local w = {
    cfg = cfg,
    token = opts.token,          -- web_token; nil: none (loopback only)
    threads = opts.threads,      -- this host's worker threads
    conn = nil,                  -- function() -> this VM's Redis connection
    failed_logins = 0,           -- wrong tokens since the last log line (auth.login)
    failed_logged = 0,           -- core.now() of that line
  }
  -- This VM's own connection for the web (runtime.lazy_conn); a request
  -- waiting on it delays only other requests, never the main loop.
  local get, conn_broken = runtime.lazy_conn(cfg.redis, math.min(cfg.redis_timeout or 10, 5))
  local batch = batcher(get)
  -- the shards_count of each queue as the registry has it, read again at
  -- most once a second (a reshard changes it while the host runs)
  local registry_at = -math.huge
  w.conn = function()
    local conn = batch.conn or get()
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
    local parts = {}
    for seg in path:gmatch("[^/]+") do parts[#parts + 1] = request.unescape(seg) end
    local r, params = find_route(routes, method, parts)
    -- (a reply route is asked from anywhere: a token is its capability)
    if opts.only ~= "replies" and not (r and r.open == "token" and r[1] == method) then
      local refused = auth.refusal(req, w.token, MUTATING[method])
      if refused then return request.fail(403, refused) end
    end
    if not r then return request.fail(404, "not found: " .. path) end
    if r[1] ~= method then return request.fail(405, "use " .. r[1] .. " for " .. path) end
    local open = r.open
    if open == "metrics_public" then open = cfg.metrics_public end
    if not open and not auth.authorized(req, w.token) then return request.fail(401, "missing or wrong token") end
    req.query, req.params = request.parse_query(query), params
    return r[3](w, req)
  end

  local function handle(req)
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
    if kind == "input" then return request.fail(400, msg) end
    if kind == "notfound" or kind == "missing" then return request.fail(404, msg) end
    log.error("web: " .. req.method .. " " .. req.uri .. ": " .. (tb or msg))
    return request.fail(500, msg:match("^[^\n]*"))
  end
  return handle, function(reqs) return batch.run(handle, reqs) end
end

return M
