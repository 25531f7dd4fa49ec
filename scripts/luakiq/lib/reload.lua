-- luakiq.lib.reload: what SIGHUP does to `luakiq run` (the policy; host/host.c,
-- host/entry.c and host/runner.c are the mechanism; docs/operations.md,
-- "Deploying new worker code").
--
-- The main thread loads DIR again in a VM of its own (M.check, through
-- core.load_check), exactly as a worker thread will: config, every worker,
-- the splitter. Then it compares what a running host cannot change in place
-- (M.summary: the worker set, each worker's queue and shards_count, the
-- threads' shards, the settings only the main thread reads) with what it
-- runs. A reload that does not load, or changes one of those, is refused
-- with one line and the old code runs on; otherwise every worker thread
-- switches to the new code between two calls.
local core = require "luakiq.core"
local errors = require "luakiq.lib.errors"
local json = require "luakiq.json"
local log = require "luakiq.lib.log"
local runtime = require "luakiq.lib.runtime"

local M = {}

-- config.lua settings read once, by the main thread or at start: a change
-- needs a restart.
local FIXED = { "namespace", "redis", "threads_per_node", "lease_ttl", "lease_renew",
                "web", "web_token", "metrics_public", "dump_path" }

-- What of a loaded DIR (cfg, the splitter's groups) must stay the same for
-- its threads to switch to it. JSON-friendly.
function M.summary(cfg, groups)
  local s = { workers = {}, groups = {}, settings = {} }
  for i, w in ipairs(cfg.workers) do
    s.workers[i] = { name = w.name, queue_name = w.queue_name, shards_count = w.shards_count, file = w.file }
  end
  for i, g in ipairs(groups) do
    local names = {}
    for j, h in ipairs(g) do names[j] = h.worker .. h.shard end
    s.groups[i] = table.concat(names, ", ")
  end
  for _, k in ipairs(FIXED) do s.settings[k] = cfg[k] end
  -- elastic hosts: the groups are only the count of threads (each thread
  -- takes its share as the hosts come and go), but switching to or from
  -- elastic changes what every thread serves: a restart
  s.elastic = cfg.elastic or false
  return s
end

-- Runs in the fresh VM of core.load_check (main thread): loads DIR with the
-- CLI's overrides as `luakiq run` did at start. Returns JSON {summary =} or
-- {error = one line}.
function M.check(arg)
  local a = json.decode(arg)
  local ok, res = pcall(function()
    local cfg = runtime.load(a.dir, a.overrides)
    return M.summary(cfg, runtime.plan(cfg))
  end)
  if ok then return json.encode { summary = res } end
  local _, msg = errors.describe(res)
  return json.encode { error = tostring(msg):match("^[^\n]*") }
end

-- Why new cannot replace old (summaries), in one line, and what applies the
-- change when a restart alone may not (nil: a restart does); nil when it can.
function M.compare(old, new)
  local by_name = {}
  for _, w in ipairs(new.workers) do by_name[w.name] = w end
  for _, w in ipairs(old.workers) do
    local n = by_name[w.name]
    if not n then return "worker " .. w.name .. " was removed" end
    if n.queue_name ~= w.queue_name then
      return string.format("%s: queue_name changed from %s to %s", n.file or n.name, w.queue_name, n.queue_name)
    end
    if n.shards_count ~= w.shards_count then
      return string.format("%s: shards_count changed from %d to %d", n.file or n.name, w.shards_count,
        n.shards_count), string.format("a restart applies it only after luakiq reshard DIR %s %d, see " ..
        "docs/configuration.md, 'Changing shards_count'", n.name, n.shards_count)
    end
    by_name[w.name] = nil
  end
  for _, w in ipairs(new.workers) do
    if by_name[w.name] then return "worker " .. w.name .. " was added" end
  end
  for _, k in ipairs(FIXED) do
    if old.settings[k] ~= new.settings[k] then return "config.lua: " .. k .. " changed" end
  end
  if (old.elastic or false) ~= (new.elastic or false) then
    return new.elastic and "the splitter is now elastic" or "the splitter is no longer elastic"
  end
  if #old.groups ~= #new.groups then
    return string.format("the splitter now gives %s instead of %d", log.count(#new.groups, "thread"), #old.groups)
  end
  for i, g in ipairs(old.groups) do
    if new.groups[i] ~= g and not new.elastic then return "the splitter gives thread t" .. (i - 1) .. " other shards" end
  end
end

-- SIGHUP in the main VM (core.host_run's reload): checks DIR and says
-- whether the threads may switch to it. arg: M.check's argument; running:
-- M.summary of what runs. Logs one line either way.
function M.run(arg, running)
  local reply, err = core.load_check(arg)
  local res = reply and json.decode(reply) or { error = err }
  if res.error then
    log.error("HUP: reload failed: " .. res.error .. "; the old code keeps running")
    return false
  end
  local why, remedy = M.compare(running, res.summary)
  if why then
    log.error("HUP: reload refused: " .. why .. "; the old code keeps running (" .. (remedy or "a restart applies it") .. ")")
    return false
  end
  log.info("HUP: the script directory loaded; each worker thread switches to it between two calls")
  return true
end

return M
