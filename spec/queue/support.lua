-- Shared setup of the spec/queue specs (Lowkiq's spec_helper, for luakiq):
-- a private redis-server, a script directory whose config sets dump_error and
-- load_error to string reversal (nil-safe, so the hooks must be applied
-- symmetrically), a frozen clock, and short-hands over the real modules
-- (luakiq.client, luakiq.ops.admin, luakiq.runner.queue, luakiq.runner) and the real
-- Redis scripts (conn:script).
local core = require "luakiq.core"
local redis = require "helpers.redis"
local host = require "helpers.host"
local runtime = require "luakiq.lib.runtime"
local client = require "luakiq.client"
local admin = require "luakiq.ops.admin"
local queue = require "luakiq.runner.queue"
local keys = require "luakiq.lib.keys"
local runner = require "luakiq.runner"

local S = { TOKEN = "spec-token" }
-- Failures and restores are expected here: keep their warnings out of the output.
core.log_setup { level = "error" }
local real_now = core.now
S.real_now = real_now

-- Freezes luakiq's clock (core.now, read at call time by client, admin,
-- queue and runner) at t, default: the real time, rounded to a binary fraction.
function S.freeze(t)
  t = t or (math.floor(real_now()) + 0.25)
  core.now = function() return t end
  return t
end
function S.unfreeze() core.now = real_now end

local REVERSE = "function(s) if s == nil then return nil end return s:reverse() end"
local NOOP = "perform = function(batch) end"
local RETRY = "retry_in = function(count) return 10 * (count + 1) end"
local WORKERS = {
  Test = "shards_count = 1, batch_size = 1, max_retry_count = 5",  -- Lowkiq's "Test" queue
  Batch = "shards_count = 1, batch_size = 3, fetch_size = 3, max_retry_count = 3",
  Ahead = "shards_count = 1, batch_size = 2, fetch_size = 5, max_retry_count = 5",
  Multi = "shards_count = 5, batch_size = 2, max_retry_count = 5",
  Other = "shards_count = 2, queue_name = 'OtherQueue'",
}

local E = {}
E.__index = E

-- Starts redis and loads the script directory. extra: more files.
function S.start(extra)
  local srv = redis.start()
  local files = {
    ["config.lua"] = ("return { redis = %q, poll_interval = 0.1, dump_error = %s, load_error = %s }")
      :format(srv.url, REVERSE, REVERSE),
  }
  for name, body in pairs(WORKERS) do
    files["workers/" .. name .. ".lua"] = ("return { %s, %s, %s }"):format(body, RETRY, NOOP)
  end
  for k, v in pairs(extra or {}) do files[k] = v end
  local env = setmetatable({ srv = srv, conn = srv.conn, threads = {} }, E)
  env.dir = host.scriptdir(files)
  env.cfg = runtime.load(env.dir)
  return env
end

-- The usual lifecycle for one spec file; returns a table filled at setup.
function S.lifecycle()
  local box = {}
  -- busted's hooks live in the calling spec file's environment
  local g = getfenv(2)
  local setup, teardown, before_each, after_each = g.setup, g.teardown, g.before_each, g.after_each
  setup(function()
    local env = S.start()
    for k, v in pairs(env) do box[k] = v end
    setmetatable(box, E)
  end)
  teardown(function()
    S.unfreeze()
    if box.srv then box.srv:stop() end
    if box.dir then host.sh("rm -rf " .. host.quote(box.dir)) end
  end)
  before_each(function()
    box.srv:flush()
    box.now = S.freeze()
  end)
  after_each(function() box:cleanup() S.unfreeze() end)
  return box
end

function E:cleanup()
  for _, t in ipairs(self.threads) do t.conn:close() end
  self.threads = {}
end

function E:prefix(worker, shard)
  return keys.prefix(self.cfg.namespace, self.cfg.by_name[worker].queue_name, shard or 0)
end

-- perform_async through luakiq.client.
function E:push(worker, jobs) return client.push(self.conn, self.cfg, worker, jobs) end

local function load_job(cfg, job)
  for i, p in ipairs(job.payloads) do job.payloads[i] = { cfg.load_payload(p[1]), p[2] } end
  if job.error then job.error = cfg.load_error(job.error) end
  return job
end

-- fetch.lua called directly (queue.fetch_cmd, queue.parse_fetch). o: token,
-- lease_ms, now, limit, ack, fetch (false = only ack), fin (queue.fetch_cmd's:
-- keep_done / monotonic).
-- Returns {batch ("" when none), head, restored, acked, jobs} or {lease = true, pttl}.
function E:fetch(worker, shard, o)
  o = o or {}
  local p = self:prefix(worker, shard)
  local cmd = queue.fetch_cmd(p, o.token or S.TOKEN, o.lease_ms or 30000, o.fetch == false and 0 or o.limit or 10,
    o.ack, false, o.now, o.fin)
  local res = queue.parse_fetch(self.conn:pipeline({ cmd })[1], { prefix = p, worker = worker, shard = shard or 0 })
  if res.leased then return { lease = true, pttl = res.pttl } end
  for _, job in ipairs(res.jobs) do load_job(self.cfg, job) end
  res.batch = res.batch or ""
  return res
end

-- fail.lua called directly; pairs = {id, perform_in, id, perform_in, ...}.
-- o: token, batch, now, max, error (dumped here with cfg.dump_error).
function E:fail(worker, shard, o, pairs_)
  local p = self:prefix(worker, shard)
  local err = o.error and self.cfg.dump_error(o.error) or ""
  local r = self.conn:script("fail", p, o.token or S.TOKEN, 30000, o.now or core.now(), o.batch or "",
    o.max or self.cfg.by_name[worker].max_retry_count, err, unpack(pairs_ or {}))
  return r
end

-- Queued jobs (luakiq.ops.admin.list), by id ascending unless told.
function E:list(worker, order, dir, min, max, limit, offset)
  return admin.list(self.conn, self.cfg, worker, "queue", order or "id", dir or "asc",
    min or (order and order ~= "id" and "-inf" or "-"), max or (order and order ~= "id" and "+inf" or "+"),
    limit or 1000, offset)
end
function E:morgue(worker, order, dir, min, max, limit, offset)
  return admin.list(self.conn, self.cfg, worker, "morgue", order or "id", dir or "asc",
    min or (order and order ~= "id" and "-inf" or "-"), max or (order and order ~= "id" and "+inf" or "+"),
    limit or 1000, offset)
end
-- One queued / dead job by id, or nil.
function E:queued(worker, id) return self:list(worker, "id", "asc", "[" .. id, "[" .. id)[1] end
function E:dead(worker, id) return self:morgue(worker, "id", "asc", "[" .. id, "[" .. id)[1] end
function E:busy(worker) return admin.busy(self.conn, self.cfg, worker) end
function E:stats(worker) return admin.worker_stats(self.conn, self.cfg)[worker] end
function E:ids(list)
  local out = {}
  for i, r in ipairs(list) do out[i] = r.id end
  return out
end

-- Pushes jobs, fetches every shard and fails what it got through fail.lua
-- (perform_in pin, default now + 10), with error err. Jobs whose retry_count
-- reaches max_retry_count go to the morgue (see E:kill).
function E:fail_all(worker, jobs, err, pin)
  self:push(worker, jobs)
  for shard = 0, self.cfg.by_name[worker].shards_count - 1 do
    local res = self:fetch(worker, shard)
    if #res.jobs > 0 then
      local pairs_ = {}
      for _, j in ipairs(res.jobs) do pairs_[#pairs_ + 1] = j.id pairs_[#pairs_ + 1] = pin or core.now() + 10 end
      assert(self:fail(worker, shard, { batch = res.batch, error = err }, pairs_)[1] == "OK")
    end
  end
end

-- Puts jobs in the morgue through the failure path at max_retry_count.
function E:kill(worker, jobs, err)
  local max = self.cfg.by_name[worker].max_retry_count
  for _, j in ipairs(jobs) do j.retry_count = max - 1 end
  self:fail_all(worker, jobs, err)
end

-- A worker thread's state (luakiq.runner.setup) owning the given shards;
-- handlers = {{worker=, shard=}, ...} or a worker name (its shard 0).
function E:thread(handlers, token)
  if type(handlers) == "string" then handlers = { { worker = handlers, shard = 0 } } end
  local t = runner.setup { dir = self.dir, token = token or S.TOKEN, handlers = handlers }
  self.threads[#self.threads + 1] = t
  return t
end

S.E = E
return S
