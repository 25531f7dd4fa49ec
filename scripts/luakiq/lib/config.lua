-- luakiq.lib.config: loads and validates a script directory.
--
--   DIR/config.lua      optional; returns a table of settings (SETTINGS below)
--   DIR/workers/*.lua   one worker per file, each returning a table (WORKER)
--
-- DIR is put first on package.path, so `require "lib.thing"` loads
-- DIR/lib/thing.lua. Files run with loadfile (chunkname = their real path),
-- unsandboxed. Validation is strict: every problem is raised as
-- error(msg, 0) with one line starting with the file's path and naming the
-- key, e.g. "app/workers/Mail.lua: unknown key 'shard_count' (did you mean
-- 'shards_count'?)".
--
-- Settings only (load's third argument; the CLI's commands that read or
-- change queues, which never perform): a worker file whose code raises while
-- it runs (a secret read from the environment at load, a library missing on
-- the operator's machine) does not stop the load; the worker stands in with
-- its file's name and the default settings, marked `unloaded` (the error),
-- and the caller takes its shards_count from Redis's queue registry. A file
-- that does not compile, or returns a table that fails validation, is still
-- refused: that is a broken file, not a missing secret.
local splitters = require "luakiq.splitters"
local schedulers = require "luakiq.schedulers"
local hooks = require "luakiq.lib.hooks"
local json = require "luakiq.json"
local retry = require "luakiq.lib.retry"

local M = {}

-- Bounds of threads_per_node (--threads) and shards_count: a thread is a VM
-- and a Redis connection, and every listing walks every shard, so values
-- past these take gigabytes (a table per thread or shard) or hang; 16384 is
-- a Redis Cluster's count of hash slots, past which shards spread no further.
M.MAX_THREADS, M.MAX_SHARDS = 1024, 16384

local function fail(msg) error(msg, 0) end

local function q(v)
  if type(v) == "string" then return "'" .. v .. "'" end
  return tostring(v)
end

-- Value checks: each returns nil when v is fine, else what it must be.
local function finite(v) return type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge end
local function int(v) return finite(v) and v % 1 == 0 end
-- An array (keys 1..n, nothing else) of values of Lua type ty.
local function array_of(v, ty)
  if type(v) ~= "table" then return false end
  local n = #v
  for k, x in pairs(v) do
    if type(k) ~= "number" or k < 1 or k > n or k % 1 ~= 0 or type(x) ~= ty then return false end
  end
  return true
end
-- An integer check from 1 to max.
local function upto(max)
  return function(v) if not (int(v) and v >= 1 and v <= max) then return "an integer from 1 to " .. max end end
end
M.threads_check = upto(M.MAX_THREADS)
local checks = {
  pos_int = function(v) if not (int(v) and v >= 1) then return "a positive integer" end end,
  threads = M.threads_check,
  shards = upto(M.MAX_SHARDS),
  nonneg_int = function(v) if not (int(v) and v >= 0) then return "a non-negative integer" end end,
  pos_num = function(v) if not (finite(v) and v > 0) then return "a number > 0" end end,
  nonneg_num = function(v) if not (finite(v) and v >= 0) then return "a number >= 0" end end,
  str = function(v) if type(v) ~= "string" or v == "" then return "a non-empty string" end end,
  func = function(v) if type(v) ~= "function" then return "a function" end end,
  -- used in Redis key names ("ns:{queue:shard}:..."): no braces, no spaces
  name = function(v)
    if type(v) ~= "string" or v == "" or v:find("[%c%s{}]") then
      return "a non-empty string without spaces, control characters, '{' or '}'"
    end
  end,
  -- a queue's name, also without ':': queue q:1's keys ("ns:{q:1}:...")
  -- would be those of shard 1 of queue q ("ns:{q:1}:lease", ...)
  queue = function(v)
    if type(v) ~= "string" or v == "" or v:find("[%c%s{}:]") then
      return "a non-empty string without spaces, control characters, '{', '}' or ':' " ..
        "(a queue's Redis keys would collide with another queue's shards)"
    end
  end,
  funcs = function(v) if not array_of(v, "function") then return "an array of functions" end end,
  names = function(v) if not array_of(v, "string") then return "an array of worker names" end end,
  strs = function(v) if not array_of(v, "string") or #v == 0 then return "a non-empty array of strings" end end,
  bool = function(v) if type(v) ~= "boolean" then return "true or false" end end,
  str_map = function(v)
    if type(v) ~= "table" then return "a table of strings {name = value}" end
    for k, s in pairs(v) do
      if type(k) ~= "string" or type(s) ~= "string" then return "a table of strings {name = value}" end
    end
  end,
  cost = function(v)
    if type(v) ~= "function" and not (finite(v) and v >= 0) then return "a number >= 0 or a function(id, payloads)" end
  end,
  schedules = function(v)
    if not array_of(v, "table") then return "an array of tables {name =, worker =, id =, cron = | every =, ...}" end
  end,
  delivery = function(v)
    if v ~= "at_least_once" and v ~= "at_most_once" then return '"at_least_once" or "at_most_once"' end
  end,
  splitter = function(v)
    if v ~= "elastic" and type(v) ~= "function" then
      return '"elastic" or a function(handlers, threads_per_node), e.g. luakiq.splitters.default'
    end
  end,
  scheduler = function(v)
    if v ~= "lag" and v ~= "seq" and type(v) ~= "function" then return '"lag", "seq" or a function(ctx)' end
  end,
  -- the base of the reply URLs luakiq.await returns (its path is added)
  base_url = function(v)
    if type(v) ~= "string" or not v:match("^https?://[^%s/]+") or v:find("[%s%c?#]") then
      return "an http:// or https:// URL without spaces, query or fragment (e.g. \"https://jobs.example.com\")"
    end
  end,
}

-- Settings of config.lua: key -> check. Defaults are in M.defaults().
local SETTINGS = {
  threads_per_node = "threads", poll_interval = "pos_num", redis = "str", namespace = "name",
  workers = "names", splitter = "splitter", scheduler = "scheduler",
  middlewares = "funcs", client_middlewares = "funcs",
  on_server_init = "func", last_words = "func",
  dump_payload = "func", load_payload = "func",
  format_error = "func", dump_error = "func", load_error = "func",
  web = "str", web_token = "str", metrics_public = "bool", schedules = "schedules",
  web_max_connections = "pos_int", web_header_timeout = "pos_num", web_idle_timeout = "pos_num",
  lease_ttl = "pos_num", lease_renew = "pos_num", max_payload_bytes = "pos_int",
  redis_timeout = "pos_num", redis_retry = "nonneg_num", dump_path = "str", timeout = "pos_num",
  hook_timeout = "pos_num", public_url = "base_url", fast_recovery = "bool",
}

-- Keys of a worker file: key -> check.
local WORKER = {
  name = "name", queue_name = "queue", shards_count = "shards", batch_size = "pos_int",
  fetch_size = "pos_int", max_retry_count = "nonneg_int", retry_in = "func", perform = "func", retries_exhausted = "func",
  timeout = "pos_num", concurrent_shards = "pos_int", delivery = "delivery",
  concurrency = "pos_int", cost = "cost", windows = "strs", timezone = "str",
  throttle = "func", label = "func",
  on_reply = "func", reply_timeout = "pos_num", await_releases_units = "bool",
  keep_done = "nonneg_num", keep_done_max = "pos_int", monotonic = "bool", monotonic_ttl = "pos_num",
}

local function identity(x) return x end
local function format_error(err) return tostring(err) end
-- (luakiq's own defaults need no hook_timeout: luakiq.lib.hooks calls them plainly)
hooks.trust(identity)
hooks.trust(format_error)
hooks.trust(splitters.default)
hooks.trust(splitters.elastic)

-- LUAKIQ_PUBLIC_URL, public_url's default; nil when unset or empty (a bad
-- value is refused by M.load as config.lua's would be).
local function public_url()
  local v = os.getenv("LUAKIQ_PUBLIC_URL")
  if v and v ~= "" then return v end
end

-- A fresh table of every setting's default (docs/configuration.md, Lowkiq's defaults).
function M.defaults()
  local url = os.getenv("REDIS_URL")
  return {
    threads_per_node = 5,
    poll_interval = 1,
    redis = (url and url ~= "") and url or "redis://127.0.0.1:6379/0",
    namespace = "luakiq",
    workers = nil,               -- replaced by the array of worker defs
    splitter = splitters.default,
    scheduler = "lag",           -- resolved to a function(ctx) -> step
    middlewares = {},
    client_middlewares = {},
    on_server_init = nil,
    last_words = nil,
    dump_payload = json.encode,
    load_payload = json.decode,
    format_error = format_error,
    dump_error = identity,
    load_error = identity,
    web = nil,
    web_token = nil,
    metrics_public = false,      -- with a token: /metrics is served without it
    web_max_connections = 256,   -- open HTTP connections at most (kept below the fd limit too)
    web_header_timeout = 10,     -- seconds for a request to arrive whole
    web_idle_timeout = 60,       -- seconds a kept-alive connection may wait between requests
    lease_ttl = 30,              -- seconds a shard lease lives without renewal
    lease_renew = nil,           -- renew a busy thread's lease this often (default lease_ttl / 3)
    fast_recovery = true,        -- take at once the lease of a dead process of this hostname
    max_payload_bytes = 1048576,
    redis_timeout = 10,          -- seconds for connect and for each reply
    redis_retry = 30,            -- seconds `run` keeps trying to connect at start
    dump_path = nil,             -- TTIN dump file (default: $TMPDIR/luakiq-UID/ttin_PID.txt)
    timeout = 600,               -- seconds one perform call may run (a worker's own `timeout` wins)
    hook_timeout = 5,            -- seconds each hook outside perform may run (luakiq.lib.hooks)
    public_url = public_url(),   -- base of the reply URLs luakiq.await returns (nil: no url)
  }
end

local WORKER_DEFAULTS = { shards_count = 5, batch_size = 1, max_retry_count = 25, reply_timeout = 86400,
                          keep_done_max = 10000, monotonic_ttl = 604800 }
-- fetch_size: see docs/configuration.md. Given, it is fixed. Else, for most
-- workers, each shard's fetch adapts (fetch_auto): it starts at
-- max(batch_size, FETCH_AHEAD) and then takes what the shard's jobs have
-- been performing in about FETCH_TIME seconds, and whose records come to
-- about FETCH_BYTES, between batch_size and max(batch_size, FETCH_MAX)
-- (luakiq.runner.fetch). So a fetch of fast jobs is one Redis call per FETCH_MAX
-- jobs, what a fetch holds back from merging (a push for an id fetched but
-- not performed yet waits apart) is about FETCH_TIME of work whatever the
-- jobs cost, and what it holds in memory about FETCH_BYTES whatever their
-- payloads weigh. (FETCH_MAX: fetch.lua's fixed part, ~340k Redis
-- instructions a call, is 3.4k a job at 100, 1.1k at 300; docs/benchmarks.md)
local FETCH_AHEAD = 10
local FETCH_MAX = 300
local FETCH_TIME = 0.01
local FETCH_BYTES = 1048576

-- Edit distance, for "did you mean" hints on unknown keys.
local function distance(a, b)
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end

local function unknown_key(file, k, known, what)
  local best, best_d
  if type(k) == "string" then
    for name in pairs(known) do
      local d = distance(k:lower(), name)
      if d <= 2 and (not best_d or d < best_d or (d == best_d and name < best)) then best, best_d = name, d end
    end
  end
  local shown = type(k) == "string" and ("'" .. k .. "'") or ("[" .. tostring(k) .. "]")
  fail(string.format("%s: unknown key %s%s (%s)", file, shown,
    best and (" (did you mean '" .. best .. "'?)") or "", what))
end

-- Checks every key of t against spec (key -> check name).
local function validate(file, t, spec, what)
  for k, v in pairs(t) do
    local check = type(k) == "string" and spec[k]
    if not check then unknown_key(file, k, spec, what) end
    local want = checks[check](v)
    if want then
      fail(string.format("%s: %s must be %s, got %s", file, k, want,
        type(v) == "string" and string.format("%q", v) or (type(v) == "number" and tostring(v) or type(v))))
    end
  end
end

-- First line of an error, with a Lua position "<chunk>:N:" for this file
-- rewritten as "<file>:N:" (Lua shortens long chunk names with "...").
local function where(file, err)
  local msg = tostring(err):match("^[^\n]*")
  local chunk, line, rest = msg:match("^(.-):(%d+): (.*)$")
  if chunk and (chunk == file or (chunk:sub(1, 3) == "..." and file:sub(-(#chunk - 3)) == chunk:sub(4))) then
    return file .. ":" .. line .. ": " .. rest
  end
  if msg:sub(1, #file) == file then return msg end
  return file .. ": " .. msg
end

-- Runs a Lua file that must return a table. A file that does not compile,
-- or returns something else, raises; when its code raises, the one-line error
-- is raised too, or, with `ran` given, returned (nil, msg) for it to handle.
local function run_file(file, ran)
  local chunk, err = loadfile(file)
  if not chunk then fail(where(file, err)) end
  local ok, t = pcall(chunk)
  if not ok then
    if ran then return nil, where(file, t) end
    fail(where(file, t))
  end
  if type(t) ~= "table" then fail(file .. ": must return a table, got " .. type(t)) end
  return t
end

-- What a worker file that raised while loading should do instead; the CLI
-- repeats it when it stands such a worker in.
M.SECRETS_HINT = "if it reads the environment (os.getenv), set the variable, or read it inside perform " ..
  "rather than when the file loads (docs/workers.md, \"Secrets in worker files\")"

local function exists(path)
  local f = io.open(path, "r")
  if f then f:close() return true end
  return false
end

local function shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- list_dir fallback without C modules: names (unsorted) | nil, err.
local function popen_list_dir(path)
  local p = io.popen("if [ -d " .. shell_quote(path) .. " ]; then ls -1A -- " .. shell_quote(path) ..
    "; else echo //missing; fi 2>/dev/null")
  if not p then return nil, path .. ": cannot list the directory" end
  local names = {}
  for line in p:lines() do names[#names + 1] = line end
  p:close()
  if names[1] == "//missing" then return nil, path .. ": No such file or directory" end
  return names
end

local function add_to_path(dir)
  if dir:find("[;?]") then fail(dir .. ": the directory name must not contain ';' or '?'") end
  local prefix = dir .. "/?.lua;" .. dir .. "/?/init.lua;"
  if package.path:sub(1, #prefix) ~= prefix then package.path = prefix .. package.path end
end

-- A worker's time windows (windows, timezone), parsed; nil without.
local function windows_of(file, name, t)
  if t.windows == nil then
    if t.timezone ~= nil then fail(file .. ": worker " .. name .. ": timezone goes with windows") end
    return nil
  end
  local zone, why = require("luakiq.lib.tz").zone(t.timezone or "UTC")
  if not zone then fail(("%s: worker %s: timezone %s: %s"):format(file, name, q(t.timezone), why)) end
  local w, bad, reason = require("luakiq.lib.windows").parse(t.windows, zone)
  if not w then fail(("%s: worker %s: windows: %s %s"):format(file, name, q(tostring(bad)), reason)) end
  return w
end

-- Builds one worker def from its file. settings_only: a file whose code
-- raises gives a stand-in (the module's head comment) instead of an error.
local function load_worker(file, stem, settings_only)
  local t, ran_err = run_file(file, true)
  if not t then
    if not settings_only then
      fail(ran_err .. "; worker " .. stem .. " did not load: " .. M.SECRETS_HINT)
    end
    t = { perform = function() error(ran_err, 0) end }
  end
  validate(file, t, WORKER, "a worker file may set: name, queue_name, shards_count, batch_size, fetch_size, " ..
    "max_retry_count, retry_in, perform, retries_exhausted, timeout, concurrent_shards, delivery, concurrency, cost, " ..
    "throttle, label, windows, timezone, on_reply, reply_timeout, await_releases_units, keep_done, keep_done_max, " ..
    "monotonic, monotonic_ttl")
  if t.perform == nil then fail(file .. ": perform is required (a function(payloads_by_id))") end
  if t.label ~= nil and t.throttle == nil then fail(file .. ": label goes with throttle (it names jobs for it)") end
  local name = t.name or stem
  if checks.name(name) then
    fail(file .. ": name " .. string.format("%q", name) .. " (from the file name) must be " .. checks.name(name) ..
      "; rename the file or set `name`")
  end
  local batch_size = t.batch_size or WORKER_DEFAULTS.batch_size
  if t.fetch_size and t.fetch_size < batch_size then
    fail(file .. ": fetch_size (" .. t.fetch_size .. ") must be >= batch_size (" .. batch_size .. ")")
  end
  -- at most once: a fetch is one call (a kill -9 morgues the whole fetch);
  -- concurrency: one call per fetch, so a call refused its units puts back
  -- only its own jobs; a throttle fetches a fixed max(batch_size, 10) ahead,
  -- so that a job it holds does not keep the shard's next jobs from it
  local fixed_fetch
  if t.delivery == "at_most_once" or (t.concurrency and not t.throttle) then
    fixed_fetch = batch_size
  elseif t.throttle then
    fixed_fetch = math.max(batch_size, FETCH_AHEAD)
  end
  if not t.queue_name and checks.queue(name) then
    fail(file .. ": name '" .. name .. "' is the worker's queue_name too, which must be " .. checks.queue(name) ..
      "; rename it or set `queue_name`")
  end
  local w = {
    name = name,
    queue_name = t.queue_name or name,
    shards_count = t.shards_count or WORKER_DEFAULTS.shards_count,
    batch_size = batch_size,
    fetch_size = t.fetch_size or fixed_fetch or math.max(batch_size, FETCH_MAX),
    fetch_auto = not (t.fetch_size or fixed_fetch) or nil,
    fetch_start = math.max(batch_size, FETCH_AHEAD),
    fetch_time = FETCH_TIME,
    fetch_bytes = FETCH_BYTES,
    concurrency = t.concurrency,
    cost = t.cost,
    throttle = t.throttle,
    label = t.label,
    windows = t.windows,
    timezone = t.timezone,
    windows_spec = windows_of(file, name, t),
    delivery = t.delivery or "at_least_once",
    max_retry_count = t.max_retry_count or WORKER_DEFAULTS.max_retry_count,
    retry_in = t.retry_in or retry.default,
    perform = t.perform,
    retries_exhausted = t.retries_exhausted,
    timeout = t.timeout,         -- nil: config.lua's timeout (set by M.load)
    concurrent_shards = t.concurrent_shards, -- nil: every shard of a thread may be in a call
    -- jobs that wait for a reply (luakiq.await; docs/lua-api.md)
    on_reply = t.on_reply,       -- nil: rickover's rule ({"status": "succeeded" | "failed"})
    reply_timeout = t.reply_timeout or WORKER_DEFAULTS.reply_timeout, -- await's default timeout, seconds
    await_releases_units = t.await_releases_units or false, -- true: a waiting job holds no concurrency units
    -- finished jobs and stale payloads (docs/redis.md, "Finished jobs" and "Stale payloads")
    keep_done = t.keep_done or 0, -- seconds a done or cancelled job's record is kept (0: none)
    keep_done_max = t.keep_done_max or WORKER_DEFAULTS.keep_done_max, -- records kept per shard at most
    monotonic = t.monotonic or false, -- true: a payload not above its id's highest score performed is dropped
    monotonic_ttl = t.monotonic_ttl or WORKER_DEFAULTS.monotonic_ttl, -- seconds that score is remembered
    file = file,
    unloaded = ran_err,          -- settings_only: the error its file raised (a stand-in)
  }
  return w
end

-- For the ready-made workers (workers/*.lua, luakiq.workers.NAME): splits
-- opts into the worker's own options (own: key -> check name) and worker
-- keys (the keys of a worker file), checking both; an unknown key raises one
-- line naming it, e.g. "luakiq.workers.webhook: unknown key 'urll' (did you
-- mean 'url'?) (...)". Raised in the worker file, the loader puts the file
-- in front. Returns mine, worker_table.
function M.ready_made_options(what, opts, own)
  if type(opts) ~= "table" then fail(what .. ": expects a table of options") end
  local mine, w, known = {}, {}, {}
  for k, check in pairs(WORKER) do known[k] = check end
  known.perform = nil -- the ready-made worker's own
  for k, check in pairs(own) do known[k] = check end
  local names = {}
  for k in pairs(own) do names[#names + 1] = k end
  table.sort(names)
  validate(what, opts, known, "options: " .. table.concat(names, ", ") .. ", and every worker key")
  for k, v in pairs(opts) do
    if own[k] then mine[k] = v else w[k] = v end
  end
  return mine, w
end

-- load(dir [, list_dir [, settings_only]]) -> cfg. list_dir(path) -> names |
-- nil, err (the host passes a C one; without it, `ls` through io.popen is
-- used). Raises error(msg, 0) with a one-line msg starting with the offending
-- file's path. settings_only: see the head of this module.
function M.load(dir, list_dir, settings_only)
  if type(dir) ~= "string" or dir == "" then fail("config: the script directory must be a non-empty path") end
  dir = dir:gsub("(.)/+$", "%1")
  list_dir = list_dir or popen_list_dir
  add_to_path(dir)

  local cfg = M.defaults()
  local cfg_file = dir .. "/config.lua"
  cfg.dir, cfg.file = dir, cfg_file
  if exists(cfg_file) then
    local t = run_file(cfg_file)
    validate(cfg_file, t, SETTINGS, "see docs/configuration.md for the settings")
    for k, v in pairs(t) do cfg[k] = v end
    if cfg.lease_renew and cfg.lease_renew >= cfg.lease_ttl then
      fail(string.format("%s: lease_renew (%s) must be less than lease_ttl (%s)", cfg_file,
        tostring(cfg.lease_renew), tostring(cfg.lease_ttl)))
    end
  end
  cfg.lease_renew = cfg.lease_renew or cfg.lease_ttl / 3
  if cfg.public_url then
    -- (config.lua's was checked above; LUAKIQ_PUBLIC_URL's here)
    local want = checks.base_url(cfg.public_url)
    if want then fail("LUAKIQ_PUBLIC_URL must be " .. want .. ", got " .. string.format("%q", cfg.public_url)) end
    cfg.public_url = cfg.public_url:gsub("/+$", "")
  end
  -- elastic hosts (luakiq.runner.elastic): the string or the splitter itself
  if cfg.splitter == "elastic" then cfg.splitter = splitters.elastic end
  cfg.elastic = cfg.splitter == splitters.elastic
  if cfg.scheduler == "lag" then cfg.scheduler = schedulers.lag
  elseif cfg.scheduler == "seq" then cfg.scheduler = schedulers.seq end

  -- Workers: every *.lua in DIR/workers, by file name.
  local wdir = dir .. "/workers"
  local names, err = list_dir(wdir)
  if not names then fail(wdir .. ": missing directory (" .. tostring(err) .. "); put one worker per file in it") end
  local files = {}
  for _, n in ipairs(names) do
    if n:sub(1, 1) ~= "." and n:match("%.lua$") then files[#files + 1] = n end
  end
  table.sort(files)
  if #files == 0 then fail(wdir .. ": no worker files (*.lua) in the directory") end

  local defs, by_name, by_queue = {}, {}, {}
  for _, n in ipairs(files) do
    local file = wdir .. "/" .. n
    local w = load_worker(file, n:sub(1, -5), settings_only)
    local other = by_name[w.name]
    if other then fail(string.format("%s: name '%s' is already used by %s", file, w.name, other.file)) end
    other = by_queue[w.queue_name]
    if other then
      fail(string.format("%s: queue_name '%s' is already used by %s", file, w.queue_name, other.file))
    end
    w.timeout = w.timeout or cfg.timeout
    by_name[w.name], by_queue[w.queue_name] = w, w
    defs[#defs + 1] = w
  end

  -- Order: config's `workers` (which must name every worker once), else by name.
  local order = cfg.workers
  if order then
    local seen = {}
    for _, n in ipairs(order) do
      if not by_name[n] then
        fail(string.format("%s: workers: unknown worker '%s' (no %s/%s.lua and no worker with that name)",
          cfg_file, n, wdir, n))
      end
      if seen[n] then fail(string.format("%s: workers: '%s' is listed twice", cfg_file, n)) end
      seen[n] = true
    end
    for _, w in ipairs(defs) do
      if not seen[w.name] then
        fail(string.format("%s: workers: worker '%s' (%s) is not listed; list every worker, or remove the key",
          cfg_file, w.name, w.file))
      end
    end
    defs = {}
    for i, n in ipairs(order) do defs[i] = by_name[n] end
  else
    table.sort(defs, function(a, b) return a.name < b.name end)
  end
  cfg.workers, cfg.by_name = defs, by_name
  cfg.schedules = M.check_schedules(cfg_file, cfg.schedules or {}, by_name, cfg.dump_payload)
  return cfg
end

-- Recurring jobs (config.lua `schedules`): each {name =, worker =, id =,
-- payload = (optional), cron = "m h dom mon dow" (or 6 fields, seconds
-- first) or every = seconds, timezone = IANA name (cron only; default
-- UTC)}. Raises one line naming the schedule and what is wrong: also a
-- payload that dump (config.lua's dump_payload) cannot turn into a string,
-- which would enqueue a job no call can load at every tick. Returns the
-- list with spec (parsed cron) and zone filled in.
local SCHEDULE_KEYS = { name = true, worker = true, id = true, payload = true, cron = true, every = true, timezone = true }
function M.check_schedules(file, list, by_name, dump)
  dump = dump or json.encode
  local cron, tz = require "luakiq.lib.cron", require "luakiq.lib.tz"
  local seen = {}
  for i, s in ipairs(list) do
    local where = ("%s: schedules[%d]%s"):format(file, i, type(s.name) == "string" and (" ('" .. s.name .. "')") or "")
    for k in pairs(s) do
      if not SCHEDULE_KEYS[k] then fail(where .. ": unknown key " .. q(k) .. " (name, worker, id, payload, cron, every, timezone)") end
    end
    if checks.name(s.name) then fail(where .. ": name must be " .. checks.name(s.name)) end
    if seen[s.name] then fail(where .. ": the name is used twice") end
    seen[s.name] = true
    if not by_name[s.worker] then fail(where .. ": unknown worker " .. q(s.worker)) end
    if type(s.id) == "number" and int(s.id) then s.id = string.format("%.0f", s.id) end
    if type(s.id) ~= "string" or s.id == "" then fail(where .. ": id must be a non-empty string or an integer") end
    if (s.cron == nil) == (s.every == nil) then fail(where .. ": give either cron or every") end
    if s.every ~= nil and not (finite(s.every) and s.every >= 1) then fail(where .. ": every must be a number >= 1 (seconds)") end
    if s.cron ~= nil then
      local spec, why = cron.parse(s.cron)
      if not spec then fail(where .. ": bad cron " .. q(tostring(s.cron)) .. ": " .. why) end
      s.spec = spec
    elseif s.timezone ~= nil then
      fail(where .. ": timezone goes with cron, not every")
    end
    local zone, why = tz.zone(s.timezone or "UTC")
    if not zone then fail(where .. ": timezone " .. q(tostring(s.timezone)) .. ": " .. why) end
    s.zone = zone
    local ok, dumped = pcall(dump, s.payload == nil and "" or s.payload)
    if not ok or type(dumped) ~= "string" then
      fail(where .. ": payload cannot be dumped (dump_payload): " ..
        (ok and "it gave a " .. type(dumped) .. ", not a string" or tostring(dumped):match("^[^\n]*")))
    end
  end
  return list
end

-- Command-line overrides: {redis=URL, threads=N (or threads_per_node=N),
-- web=ADDR:PORT}. Raises error(msg, 0) naming the flag. Returns cfg.
function M.apply_overrides(cfg, o)
  for k, v in pairs(o or {}) do
    if k == "threads" or k == "threads_per_node" then
      if type(v) == "string" then v = tonumber(v) end
      local want = M.threads_check(v)
      if want then fail("--threads must be " .. want .. ", got " .. q(v)) end
      cfg.threads_per_node = v
    elseif k == "redis" or k == "web" then
      if type(v) ~= "string" or v == "" then fail("--" .. k .. " must be a non-empty string") end
      cfg[k] = v
    else
      fail("config.apply_overrides: unknown override '" .. tostring(k) .. "'")
    end
  end
  return cfg
end

return M
