-- Shared pieces of the fault specs (spec/faults/*_spec.lua): a recording
-- worker, hosts as real processes, enqueue through the real client, and the
-- checks (no overlap, every payload seen, order).
local core = require "luakiq.core"
local host = require "helpers.host"
local runtime = require "luakiq.lib.runtime"
local client = require "luakiq.client"
local assert = require "luassert"

local S = {}

-- The recording worker. Per batch it marks its shard and each id busy with
-- SET NX (value: the host's pid); a marker already held is an overlap and is
-- recorded in t:overlaps as "what|holder|pid". It appends every payload to
-- t:seen:<id>, counts batches per pid (t:pids) and records which pids served
-- which shard (t:shard:<n>). `extra` is Lua code run in the middle of perform
-- (locals: r = luakiq.redis, batch, pid, core), `after` at its very end.
-- opts: shards, batch, sleep (seconds per batch), extra, after, max_retry,
-- retry_in (Lua expression of `count`).
function S.worker(opts)
  return ([[
local luakiq = require "luakiq"
local core = require "luakiq.core"
local pid = tostring(core.getpid())
local SHARDS = %d
local function shard_of(id) return core.crc32(id) %% SHARDS end
local function mark(r, key, what)
  if r.call("SETNX", key, pid) == 0 then
    r.call("RPUSH", "t:overlaps", what .. "|" .. tostring(r.call("GET", key)) .. "|" .. pid)
    return false
  end
  return true
end
return {
  shards_count = SHARDS, batch_size = %d, max_retry_count = %d,
  retry_in = function(count) return %s end,
  perform = function(batch)
    local r = luakiq.redis
    local marks, shard = {}, nil
    for id in pairs(batch) do
      shard = shard_of(id)
      if mark(r, "t:busy:" .. id, "id " .. id) then marks[#marks + 1] = "t:busy:" .. id end
    end
    if mark(r, "t:sbusy:" .. shard, "shard " .. shard) then marks[#marks + 1] = "t:sbusy:" .. shard end
    r.call("HINCRBY", "t:pids", pid, 1)
    r.call("SADD", "t:shard:" .. shard, pid)
    for id, payloads in pairs(batch) do
      for _, p in ipairs(payloads) do r.call("RPUSH", "t:seen:" .. id, tostring(p)) end
    end
    %s
    if %s > 0 then core.sleep(%s) end
    for _, k in ipairs(marks) do
      if r.call("GET", k) == pid then r.call("DEL", k) end
    end
    %s
  end,
}
]]):format(opts.shards or 4, opts.batch or 3, opts.max_retry or 25, opts.retry_in or "0.2",
    opts.extra or "", opts.sleep or 0, opts.sleep or 0, opts.after or "")
end

-- A script directory with config (a Lua table body) and the Rec worker.
function S.dir(config, worker_opts)
  return host.scriptdir {
    ["config.lua"] = "local luakiq = require 'luakiq'\nreturn { " .. (config or "") .. " }",
    ["workers/Rec.lua"] = S.worker(worker_opts or {}),
  }
end

-- Enqueues jobs ({id=, payload=, score=}...) through the real client.
function S.push(srv, dir, jobs)
  local cfg = runtime.load(dir)
  return client.push(srv.conn, cfg, "Rec", jobs)
end

-- ids 1..ids, payloads from..to (payload v has score v).
function S.push_range(srv, dir, ids, from, to, prefix)
  local jobs = {}
  for v = from, to do
    for id = 1, ids do jobs[#jobs + 1] = { id = (prefix or "") .. id, payload = v, score = v } end
  end
  return S.push(srv, dir, jobs)
end

-- Starts `luakiq run DIR` with extra environment.
function S.spawn(srv, dir, env)
  local p = host.spawn("run " .. host.quote(dir), "REDIS_URL=" .. srv.url .. " " .. (env or ""))
  host.eventually(function() return p:log():match("thread started") end, 10, "host start")
  p.pidstr = tostring(p.pid)
  return p
end

function S.stop(p)
  if p:alive() then
    p:signal("TERM")
    return p:wait(15)
  end
  return p:wait(1)
end

-- Overlap records whose holder is not in `dead` (pids killed with -9 while
-- holding a marker: their marker stays forever, which is no overlap).
function S.overlaps(conn, dead)
  local out = {}
  for _, o in ipairs(conn:call("LRANGE", "t:overlaps", 0, -1)) do
    local holder = o:match("^[^|]*|([^|]*)|")
    if not (dead and dead[holder]) then out[#out + 1] = o end
  end
  return out
end

function S.seen(conn, id) return conn:call("LRANGE", "t:seen:" .. id, 0, -1) end

-- True when every id 1..ids has at least n payloads recorded.
function S.all_seen(conn, ids, n, prefix)
  local cmds = {}
  for id = 1, ids do cmds[id] = { "LLEN", "t:seen:" .. (prefix or "") .. id } end
  for _, len in ipairs(conn:pipeline(cmds)) do
    if len < n then return false end
  end
  return true
end

-- Asserts that id's recorded payloads are exactly from..to in order.
function S.assert_exact(conn, id, from, to)
  local seen = S.seen(conn, id)
  local want = {}
  for v = from, to do want[#want + 1] = tostring(v) end
  assert.are.same(want, seen, "payloads of id " .. id)
end

S.now = core.now
S.sleep = core.sleep
S.eventually = host.eventually

return S
