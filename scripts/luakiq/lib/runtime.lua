-- luakiq.lib.runtime: what every VM does first. Loads the script directory
-- (config + workers, validated), applies CLI overrides, connects to Redis,
-- and binds the public `luakiq` module to this VM's connection and config.
-- Each VM (main thread, every worker thread) runs this for itself.
local core = require "luakiq.core"
local config = require "luakiq.lib.config"
local keys = require "luakiq.lib.keys"
local log = require "luakiq.lib.log"
local errors = require "luakiq.lib.errors"
local hooks = require "luakiq.lib.hooks"

local M = {}

-- The context of this VM: { cfg, conn }. Set once by M.setup.
M.ctx = {}

-- Loads DIR with overrides ({redis=, threads=, ...}); raises a one-line
-- error naming the file and key on bad config (callers map it to exit 2).
-- settings_only: worker files whose code raises stand in (luakiq.lib.config).
function M.load(dir, overrides, settings_only)
  local ok, cfg = pcall(config.load, dir, core.list_dir, settings_only)
  if not ok then errors.config(tostring(cfg)) end
  if overrides then
    local ok2, err = pcall(config.apply_overrides, cfg, overrides)
    if not ok2 then errors.config(tostring(err)) end
  end
  cfg.by_name = cfg.by_name or {}
  for _, w in ipairs(cfg.workers) do cfg.by_name[w.name] = w end
  hooks.setup(cfg.hook_timeout)
  M.ctx.cfg = cfg
  return cfg
end

-- This user's private directory in TMPDIR (/tmp without it), for files of
-- predictable names (core.private_dir): its path, or nil and why not.
function M.private_dir()
  local tmp = os.getenv("TMPDIR")
  if not tmp or tmp == "" then tmp = "/tmp" end
  return core.private_dir(tmp)
end

-- A URL (Redis or HTTP) fit for logs, errors and pages: its userinfo and
-- any password= parameter become "***" (core.redact_url: the one redactor,
-- host/store.c, which C's own messages use too).
function M.redact(url)
  return core.redact_url(tostring(url))
end

-- What a Redis answers while it cannot serve yet, and will: loading its
-- data (a restart: a large AOF loads for minutes, accepting connections),
-- a script past its time, a replica without its master, a cluster that has
-- not settled; and, before it closes the connection, that it has all the
-- clients it takes (maxclients).
local NOT_READY = { LOADING = true, BUSY = true, MASTERDOWN = true, CLUSTERDOWN = true, TRYAGAIN = true }

-- A new connection's first command: nil when Redis serves, else why not
-- (one of NOT_READY, or the I/O error of a connection it reset). Any other
-- answer (a PING renamed away) is left to the commands that follow.
local function not_ready(conn, url)
  local r, err = conn:pcall("PING")
  if r ~= nil or not (conn:broken() or NOT_READY[errors.redis_code(err)]
                      or tostring(err):find("max number of clients reached", 1, true)) then
    return nil
  end
  return "Redis at " .. M.redact(url) .. " does not serve yet: " .. tostring(err):gsub("^redis: ", "")
end

-- Connects to cfg.redis. With retry_for > 0, keeps trying (backoff up to 2 s)
-- for that many seconds before giving up, also while a Redis that accepts
-- the connection does not serve yet (not_ready); never for a bad URL.
-- Returns conn or nil, err.
function M.connect(cfg, retry_for)
  local deadline = core.now() + (retry_for or 0)
  local delay, warned = 0.05, false
  while true do
    local conn, err = core.connect(cfg.redis, cfg.redis_timeout or 10)
    local why = conn and not_ready(conn, cfg.redis)
    if why then
      conn:close()
      conn, err = nil, why
    end
    if conn then
      if warned then log.info("connected to Redis at " .. M.redact(cfg.redis)) end
      M.ctx.conn = conn
      return conn
    end
    -- (a bad URL stays bad: a cluster URL with a db other than 0, say)
    if core.stopping() or tostring(err):match("^bad Redis URL") then return nil, err end
    if core.now() >= deadline then
      if (retry_for or 0) > 0 then
        err = string.format("%s (gave up after %g s of retrying, redis_retry)", err, retry_for)
      end
      return nil, err
    end
    if not warned then log.warn(err .. "; retrying") warned = true end
    core.sleep(delay)
    delay = math.min(delay * 2, 2)
  end
end

-- A connection made on first use and re-made after an I/O error, for the
-- main thread's own work (the hosts heartbeat: while it waits, the main loop
-- waits too, hence a short timeout) and the web thread's (the web API). Returns get() (the connection,
-- or raises why there is none) and broken() (the last one met an I/O error).
function M.lazy_conn(url, timeout)
  local conn
  local function get()
    if conn and conn:broken() and not conn:reconnect() then conn:close() conn = nil end
    if not conn then
      local err
      conn, err = core.connect(url, timeout)
      if not conn then error(err, 0) end
    end
    return conn
  end
  return get, function() return conn ~= nil and conn:broken() end
end

-- One line when Redis may evict keys (maxmemory-policy other than
-- noeviction): full, it would delete keys, jobs among them, without an error.
-- nil when it will not (or INFO does not say).
function M.eviction_warning(policy)
  if policy and policy ~= "" and policy ~= "noeviction" then
    return "Redis maxmemory-policy is " .. policy .. ": once Redis is full it deletes keys, jobs among them, " ..
      "without an error; set maxmemory-policy noeviction (docs/operations.md, 'Redis memory')"
  end
end

-- Redis's maxmemory-policy from INFO memory, or nil; on a Redis Cluster
-- the first master's that may evict, else the first master's.
function M.maxmemory_policy(conn)
  local ok, all = pcall(conn.each, conn, "INFO", "memory")
  if not ok then return nil end
  local first
  for _, e in ipairs(all) do
    local p = type(e.reply) == "string" and e.reply:match("maxmemory_policy:([%w%-]+)")
    if p and p ~= "noeviction" then return p end
    first = first or p
  end
  return first or nil
end

-- Whether conn's wake-ups go by sharded Pub/Sub: a Redis Cluster of Redis
-- >= 7 (SPUBLISH/SSUBSCRIBE keep a message in its shard's slot; a PUBLISH
-- on a cluster goes to every node). Asked once per connection.
local sharded = setmetatable({}, { __mode = "k" })
function M.sharded(conn)
  local v = sharded[conn]
  if v == nil then
    v = false
    if conn.cluster and conn:cluster() then
      local ok, info = pcall(conn.call, conn, "INFO", "server")
      local major = ok and tonumber(tostring(info):match("redis_version:(%d+)"))
      v = major ~= nil and major >= 7
    end
    sharded[conn] = v
  end
  return v
end

-- The channel argument of the queue scripts that wake hosts (push,
-- schedule, perform_now, morgue_requeue) on conn.
function M.wake_arg(conn, cfg)
  return M.sharded(conn) and keys.SHARDED or keys.wake_channel(cfg.namespace)
end

-- The one-line refusal of a namespace in layout v (as layout.lua or
-- register.lua found it), nil for "2".
local function layout_refusal(cfg, v)
  if v == "2" then return nil end
  if v == "1" then
    return string.format("namespace '%s' in Redis has queues registered but no layout version, and this luakiq " ..
      "reads layout 2 only", cfg.namespace)
  end
  return string.format("namespace '%s' in Redis has layout '%s', written by a newer luakiq; this one reads layout 2",
    cfg.namespace, tostring(v))
end
M.layout_text = layout_refusal

-- Whether this luakiq may use cfg's namespace: the layout version
-- (layout.lua "check", once per entry point: `luakiq run` before any
-- thread starts, every CLI command that reads or writes queues). A new
-- namespace is marked layout 2 by the check. Returns nil (go), or the
-- one-line reason to refuse (docs/redis.md, "Layout version").
-- A Redis whose strings compare by a language (its LC_COLLATE) is refused
-- by every queue script (scripts/redis/lib/keys.lua): said here in one line
-- with the server's address instead of as a script's error.
function M.layout_refusal(conn, cfg)
  local ok, v = pcall(conn.script, conn, "layout", keys.registry(cfg.namespace), "check")
  if not ok then
    if errors.redis_code(v) == "BYTEORDER" then
      return string.format("Redis at %s orders strings by a language (its LC_COLLATE), and luakiq's scripts need " ..
        "byte order: start redis-server with LC_ALL=C (docs/redis.md, 'Byte order')", tostring(cfg.redis))
    end
    error(v, 0)
  end
  return layout_refusal(cfg, v)
end

-- Records each worker's shards_count in the queue registry; refuses a worker
-- whose count differs from the stored one (its ids would land in other shards).
-- A namespace of another layout than 2 registers nothing: raises the one
-- line of M.layout_refusal (register.lua checks it in the same call).
function M.register(conn, cfg)
  for _, w in ipairs(cfg.workers) do
    local stored = conn:script("register", keys.registry(cfg.namespace), w.queue_name, w.shards_count)
    if type(stored) == "table" and stored[1] == "LAYOUT" then error(layout_refusal(cfg, stored[2]), 0) end
    if tonumber(stored) ~= w.shards_count then
      return nil, string.format(
        "%s: shards_count is %d but queue '%s' already has %s shards in Redis; " ..
        "changing it would strand jobs (see docs/configuration.md, 'Changing shards_count')",
        w.file or w.name, w.shards_count, w.queue_name, tostring(stored))
    end
  end
  return true
end

-- Makes each worker's shards_count the registry's where a reshard changed
-- it (luakiq reshard) since the worker files were written: for the readers
-- and admin actions of the CLI and the web thread, which find every job in
-- its shard so. (`luakiq run` and `luakiq enqueue` refuse a stale file.)
function M.follow_registry(conn, cfg)
  local flat = conn:call("HGETALL", keys.registry(cfg.namespace))
  local counts = {}
  for i = 1, #flat, 2 do counts[flat[i]] = tonumber(flat[i + 1]) end
  for _, w in ipairs(cfg.workers) do
    local n = counts[w.queue_name]
    if n and n >= 1 and n ~= w.shards_count then w.shards_count = n end
  end
end

-- Checks a splitter's result: an array of non-empty arrays of {worker =
-- a worker of cfg, shard = 0..shards_count-1}, no shard twice. Threads of one
-- host share its lease token, so a shard given to two threads would not be
-- fenced between them (both could run one batch at once). Raises a usage error.
function M.check_groups(cfg, groups)
  local function bad(msg) errors.input("splitter: " .. msg) end
  if type(groups) ~= "table" then bad("must return an array of groups") end
  local seen = {}
  for i, g in ipairs(groups) do
    if type(g) ~= "table" or #g == 0 then bad("group " .. i .. " must be a non-empty array of {worker=, shard=}") end
    for _, h in ipairs(g) do
      local w = type(h) == "table" and cfg.by_name[h.worker]
      if not w then bad("group " .. i .. ": unknown worker " .. tostring(type(h) == "table" and h.worker or h)) end
      if type(h.shard) ~= "number" or h.shard % 1 ~= 0 or h.shard < 0 or h.shard >= w.shards_count then
        bad("group " .. i .. ": " .. w.name .. " has no shard " .. tostring(h.shard))
      end
      local key = w.name .. "\0" .. h.shard
      if seen[key] then
        bad(string.format("%s%d is in group %d and group %d; a shard belongs to one thread", w.name, h.shard, seen[key], i))
      end
      seen[key] = i
    end
  end
  return groups
end

-- The splitter's groups for cfg (arrays of {worker=, shard=}), checked:
-- a usage error on a malformed or duplicated shard, and on a splitter that
-- ran past hook_timeout (luakiq.lib.hooks: the host does not start; the
-- default plan could take shards meant for other hosts). `luakiq run` and
-- plan, and a reload's check (luakiq.lib.reload).
function M.plan(cfg)
  local ok, groups, timed_out = hooks.call("splitter", nil, cfg.splitter, M.handlers(cfg), cfg.threads_per_node)
  if timed_out and not core.stopping() then errors.input(groups .. ": the host does not start (a loop in the splitter?)") end
  if not ok or timed_out then error(groups, 0) end
  return M.check_groups(cfg, groups)
end

-- The flat handler list, Lowkiq's order: workers in config order, shards 0..n-1.
function M.handlers(cfg)
  local list = {}
  for _, w in ipairs(cfg.workers) do
    for s = 0, w.shards_count - 1 do
      list[#list + 1] = { worker = w.name, shard = s }
    end
  end
  return list
end

return M
