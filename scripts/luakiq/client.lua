-- luakiq.client: enqueue (perform_async). Runs in any VM: a worker thread, the
-- CLI, the HTTP handlers. The whole array is validated and dumped before any
-- byte is sent, so bad input enqueues nothing; then jobs are grouped by shard
-- and sent as one push.lua call per shard (in chunks), all in one pipeline.
local core = require "luakiq.core"
local keys = require "luakiq.keys"
local errors = require "luakiq.errors"
local middleware = require "luakiq.middleware"

local M = {}

local CHUNK = 1000 -- jobs per push.lua call: keeps each script run short
local allowed = { id = true, payload = true, score = true, perform_in = true, retry_count = true, expires_at = true }

local function finite(x) return type(x) == "number" and x == x and x ~= math.huge and x ~= -math.huge end

-- A user-given string (id, field, worker name) inside an error message: one
-- line (control characters as \xNN) and at most 100 bytes.
local function esc(s)
  s = tostring(s)
  if #s > 100 then s = s:sub(1, 100) .. "..." end
  return (s:gsub("%c", function(c) return string.format("\\x%02x", c:byte()) end))
end

-- Returns the id as a string, or raises an input error.
function M.id_string(id, where)
  if type(id) == "string" then
    if id == "" then errors.input(where .. ": id must not be empty") end
    return id
  elseif type(id) == "number" and finite(id) and id == math.floor(id) then
    return string.format("%.0f", id)
  end
  errors.input(where .. ": id must be a non-empty string or an integer, got " ..
    (id == nil and "none" or type(id) .. " " .. tostring(id)))
end

-- A job's optional number field (no closure per job: this runs per job).
local function num(job, name, default, where, id)
  local v = job[name]
  if v == nil then return default end
  if not finite(v) then errors.input(where .. " (id " .. esc(id) .. "): " .. name .. " must be a finite number") end
  return v
end

-- Checks one job and returns {id, perform_in, retry_count, score, payload_bytes, expires_at or false}.
local function prepare(cfg, worker, job, i, now, due)
  local where = "job " .. i
  if type(job) ~= "table" then errors.input(where .. ": must be an object") end
  for k in pairs(job) do
    if not allowed[k] then
      errors.input(where .. ": unknown field '" .. esc(k) .. "' (allowed: id, payload, score, perform_in, retry_count, expires_at)")
    end
  end
  local id = M.id_string(job.id, where)
  local perform_in, score = num(job, "perform_in", due, where, id), num(job, "score", now, where, id)
  local retry_count = num(job, "retry_count", -1, where, id)
  if retry_count ~= math.floor(retry_count) or retry_count < -1 then
    errors.input(where .. " (id " .. esc(id) .. "): retry_count must be an integer >= -1")
  end
  local payload = job.payload
  if payload == nil then payload = "" end
  local ok, bytes = pcall(cfg.dump_payload, payload)
  if not ok then errors.input(where .. " (id " .. esc(id) .. "): cannot dump payload: " .. esc(tostring(bytes):match("^[^\n]*"))) end
  if type(bytes) ~= "string" then errors.input(where .. " (id " .. esc(id) .. "): dump_payload must return a string") end
  if #bytes > cfg.max_payload_bytes then
    errors.input(string.format("%s (id %s): payload is %d bytes, over max_payload_bytes (%d)",
      where, esc(id), #bytes, cfg.max_payload_bytes))
  end
  local expires_at = num(job, "expires_at", false, where, id)
  return { id, perform_in, retry_count, score, bytes, expires_at }
end

-- Queues whose shards_count this VM has checked against the registry. An
-- enqueue with another count would put ids in shards nobody serves.
local registered = {}

local function check_registry(conn, cfg, worker)
  local key = cfg.namespace .. "\0" .. worker.queue_name
  if registered[key] == worker.shards_count then return end
  local stored = conn:call("HGET", keys.registry(cfg.namespace), worker.queue_name)
  if stored and tonumber(stored) ~= worker.shards_count then
    errors.input(string.format("%s: shards_count is %d but queue '%s' has %s shards in Redis; " ..
      "nothing enqueued (see docs/configuration.md, 'Changing shards_count')",
      worker.file or worker.name, worker.shards_count, worker.queue_name, stored))
  end
  registered[key] = worker.shards_count
end

-- Validates and sends jobs of one worker; returns how many were enqueued.
local function push_now(conn, cfg, worker, jobs)
  if type(jobs) ~= "table" then errors.input("jobs must be an array") end
  local n = #jobs
  for k in pairs(jobs) do
    if type(k) ~= "number" or k < 1 or k > n or k ~= math.floor(k) then errors.input("jobs must be an array") end
  end
  local now = core.now()
  -- without perform_in a job is due now, or at the next opening of its
  -- worker's windows
  local due = worker.windows_spec and worker.windows_spec:next_open(now) or now
  local by_shard, order = {}, {}
  for i = 1, n do
    local p = prepare(cfg, worker, jobs[i], i, now, due)
    local s = keys.shard(p[1], worker.shards_count)
    local list = by_shard[s]
    if not list then list = {} by_shard[s] = list order[#order + 1] = s end
    list[#list + 1] = p
  end
  if n == 0 then return 0 end
  check_registry(conn, cfg, worker)
  local channel = keys.wake_channel(cfg.namespace)
  -- The defaults as strings, formatted once here rather than per job in C
  -- (the same %.17g digits; push.lua normalizes every number anyway).
  local now_s = string.format("%.17g", now)
  local cmds = {}
  for _, s in ipairs(order) do
    local list, prefix = by_shard[s], keys.prefix(cfg.namespace, worker.queue_name, s)
    for from = 1, #list, CHUNK do
      local cmd = { script = "push", prefix, channel, now_s }
      local k = 4
      for j = from, math.min(from + CHUNK - 1, #list) do
        local p = list[j]
        cmd[k] = p[1]
        cmd[k + 1] = p[2] == now and now_s or p[2]
        cmd[k + 2] = p[3] == -1 and "-1" or p[3]
        cmd[k + 3] = p[4] == now and now_s or p[4]
        cmd[k + 4] = p[5]
        k = k + 5
      end
      -- the expiry trailer (push.lua): "", "expires_at", then job number, time
      local trailer
      for j = from, math.min(from + CHUNK - 1, #list) do
        local at = list[j][6]
        if at then
          if not trailer then trailer = true cmd[k], cmd[k + 1] = "", "expires_at" k = k + 2 end
          cmd[k], cmd[k + 1] = tostring(j - from + 1), string.format("%.17g", at)
          k = k + 2
        end
      end
      cmds[#cmds + 1] = cmd
    end
  end
  local replies = conn:pipeline(cmds)
  for _, r in ipairs(replies) do
    if type(r) == "table" and r.err then error("redis: push failed: " .. r.err, 0) end
  end
  return n
end

-- perform_async: runs the client middlewares (outermost first) around the push.
-- A middleware gets (worker, jobs, next) and may change jobs before next().
function M.push(conn, cfg, worker_name, jobs)
  local worker = cfg.by_name[worker_name]
  if not worker then errors.notfound("unknown worker '" .. esc(worker_name) .. "'") end
  local result
  local run = middleware.chain(cfg.client_middlewares, function(w, js)
    result = push_now(conn, cfg, w, js)
    return result
  end)
  run(worker, jobs)
  return result or 0
end

return M
