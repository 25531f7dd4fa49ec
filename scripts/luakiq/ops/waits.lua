-- luakiq.ops.waits: what operators see of the jobs that wait for a reply
-- (docs/operations.md, "Replies"): a worker's waiting jobs (waiting.lua
-- list, every shard) and its late replies (waiting.lua late); the waiting
-- count and the replies by outcome are in luakiq.ops.admin.worker_stats.
-- Used by `luakiq waiting`, the HTTP API, /metrics and the dashboard, in
-- whatever VM they run in.
local admin = require "luakiq.ops.admin"
local keys = require "luakiq.lib.keys"

local M = {}

local function prefix(cfg, w, shard) return keys.prefix(cfg.namespace, w.queue_name, shard) end

-- One waiting.lua list entry (7 strings from i) as a table.
local function entry(r, i, shard)
  return {
    id = r[i], shard = shard, attempt = tonumber(r[i + 1]), state = r[i + 2], since = tonumber(r[i + 3]),
    deadline = tonumber(r[i + 4]), heartbeat_deadline = tonumber(r[i + 5]), -- (nil: no heartbeat)
    key = r[i + 6] ~= "" and r[i + 6] or nil,
  }
end

-- One page of worker's waiting jobs: at least count of them (more when a
-- shard's HSCAN step gives more) unless the walk ends. cursor: nil or
-- "0:0" to start, else the previous page's next ("SHARD:HSCAN_CURSOR").
-- Returns the jobs ({id, shard, attempt, state, since, deadline,
-- heartbeat_deadline, key}, by shard, then in HSCAN's order: a job that
-- waits for the whole walk is listed, maybe twice) and the next cursor (nil
-- at the end).
function M.list(conn, cfg, worker, cursor, count)
  local w = admin.worker_of(cfg, worker)
  local shard, c = (cursor or "0:0"):match("^(%d+):(%d+)$")
  shard = tonumber(shard)
  if not shard then require("luakiq.lib.errors").input("cursor must be SHARD:CURSOR, as a page's next said") end
  local out = {}
  while shard < w.shards_count and #out < count do
    local r = admin.check(conn:pipeline({ { script = "waiting", prefix(cfg, w, shard), "list", c,
                                            tostring(math.min(count, 1000)) } })[1], "waiting")
    for i = 2, #r, 7 do out[#out + 1] = entry(r, i, shard) end
    c = r[1]
    if c == "0" then shard = shard + 1 end
  end
  return out, shard < w.shards_count and (shard .. ":" .. c) or nil
end

-- Every waiting job of worker, one page at a time: fn(job) for each.
function M.each(conn, cfg, worker, fn)
  local cursor
  repeat
    local page
    page, cursor = M.list(conn, cfg, worker, cursor, 1000)
    for _, j in ipairs(page) do fn(j) end
  until not cursor
end

-- worker's late replies (replies that came for a wait that was over: an
-- older attempt, handled, failed or timed out), newest first, at most
-- limit (1..100; each shard keeps its last 100): {at, id, shard, attempt,
-- op ("reply" or "heartbeat"), body (cut at 1 KiB)}.
function M.late(conn, cfg, worker, limit)
  local w = admin.worker_of(cfg, worker)
  local cmds = {}
  for s = 0, w.shards_count - 1 do cmds[s + 1] = { script = "waiting", prefix(cfg, w, s), "late", tostring(limit) } end
  local out = {}
  for s, r in ipairs(conn:pipeline(cmds)) do
    admin.check(r, "waiting late")
    for i = 2, #r, 5 do
      out[#out + 1] = { at = tonumber(r[i]), id = r[i + 1], shard = s - 1, attempt = tonumber(r[i + 2]), op = r[i + 3],
                        body = r[i + 4] }
    end
  end
  table.sort(out, function(a, b) return a.at > b.at end)
  for i = limit + 1, #out do out[i] = nil end
  return out
end

return M
