-- luakiq.runner.unacked: acks a stop could not send, settled by the next start.
--
-- A thread that stops while Redis refuses its acks (full, or away) keeps
-- the shard's lease and writes what the ack would have said (shard prefix,
-- lease token, batch id) as a JSON line to a file of this machine. The next
-- `luakiq run` of the namespace on this machine sends those acks under the
-- old token before its threads start (fetch.lua with limit 0 acks by batch
-- id, then release.lua gives the lease back): the performed jobs do not run
-- again, as long as the lease had not ended meanwhile. The file is
-- $TMPDIR/luakiq-UID/unacked_NAMESPACE_CRC.jsonl (/tmp without TMPDIR; CRC:
-- of the Redis URL, so deployments on one machine keep apart; the directory
-- this user's own, mode 0700, core.private_dir: no other user can plant a
-- symlink or a file of acks there); worker threads append to it (one short
-- write per line), the main thread renames it before reading, so entries
-- appended meanwhile land in a new file.
local core = require "luakiq.core"
local json = require "luakiq.json"
local log = require "luakiq.lib.log"
local queue = require "luakiq.runner.queue"
local runtime = require "luakiq.lib.runtime"

local M = {}

-- The file's path, or nil and why there is none.
function M.path(cfg)
  local dir, err = runtime.private_dir()
  if not dir then return nil, err end
  return ("%s/unacked_%s_%08x.jsonl"):format(dir, (tostring(cfg.namespace):gsub("[^%w_.-]", "_")),
    core.crc32(tostring(cfg.redis)))
end

-- Appends one unsent ack (worker thread, at its stop). Returns the file's
-- path, or nil and why it could not be written.
function M.save(cfg, entry)
  local path, perr = M.path(cfg)
  if not path then return nil, perr end
  local f, err = io.open(path, "a")
  if not f then return nil, err end
  f:write(json.encode(entry), "\n")
  f:close()
  return path
end

-- Sends the ack e ({prefix, token, batch, lease_ms, fin}: fetch.lua, limit
-- 0, under e's token; fin: the worker's keep_done / monotonic options and
-- the batch's results, queue.finishing) and gives the shard's lease back. Returns fetch.lua's
-- parsed reply (leased: another holder has the shard, nothing was acked);
-- raises when Redis fails.
local function send(conn, e)
  local cmd = queue.fetch_cmd(e.prefix, e.token, e.lease_ms or 30000, 0, e.batch, nil, nil,
                              type(e.fin) == "table" and e.fin or nil)
  local r = queue.parse_fetch(conn:pipeline({ cmd })[1], e)
  if not r.leased then pcall(conn.script, conn, "release", e.prefix, e.token) end
  return r
end

-- Sends the saved acks (main thread, at start, before any thread fetches).
-- An ack that fails for want of Redis is kept for the next start; one whose
-- lease ended (the batch went back to the queue) is dropped with a line.
function M.settle(conn, cfg)
  local path, perr = M.path(cfg)
  if not path then
    log.warn("acks a stop could not send are not looked for: " .. perr)
    return 0
  end
  local work = path .. ".settling." .. core.getpid()
  if not os.rename(path, work) then return 0 end
  local keep, n = {}, 0
  for line in io.lines(work) do
    local ok, e = pcall(json.decode, line)
    if ok and type(e) == "table" and e.prefix and e.token and e.batch then
      local okf, r = pcall(send, conn, e)
      local fields = { worker = e.worker, shard = e.shard }
      if not okf then
        keep[#keep + 1] = line
        log.warn("cannot settle the ack left by a stop: " .. tostring(r):match("^[^\n]*") .. "; kept for the next start",
          fields)
      elseif r.leased then
        log.warn("the ack of batch " .. e.batch .. " left by a stop comes too late: another host holds the shard " ..
                 "(its lease ended, the batch went back to the queue)", fields)
      else
        n = n + 1
        log.info("settled the ack of batch " .. e.batch .. " left by a stop (" .. tostring(r.acked) ..
                 " jobs acked)", fields)
      end
    end
  end
  os.remove(work)
  for _, line in ipairs(keep) do
    local f = io.open(path, "a")
    if f then f:write(line, "\n") f:close() end
  end
  return n
end

-- The main VM, past threads stuck in calls, before it replaces the process
-- or exits (luakiq.ops.cli): the acks those threads deferred and never sent
-- (core.host_run's records with ack = true: key, batch, token) are sent and
-- their shards given back; an ack Redis refuses is saved for the next start
-- (M.save) and its shard keeps its lease. Then every shard of `prefixes`
-- (the host's) is given back under each of `tokens` (the stuck threads'),
-- release.lua freeing only a lease the token holds: the next process serves
-- those shards at once instead of after lease_ttl.
function M.hand_over(conn, cfg, acks, tokens, prefixes)
  local lease_ms, kept = math.floor(cfg.lease_ttl * 1000), {}
  for _, a in ipairs(acks) do
    local e = { prefix = a.key, token = a.token, batch = a.batch, lease_ms = lease_ms }
    local ok, r = pcall(send, conn, e)
    if not ok then
      kept[e.prefix] = true
      local path, why = M.save(cfg, e)
      log.error("cannot send the ack of batch " .. e.batch .. " of " .. e.prefix .. " (" ..
                tostring(r):match("^[^\n]*") .. "); the lease is kept, and a start within lease_ttl sends it (" ..
                (path or "cannot write: " .. tostring(why)) .. ")")
    end
  end
  local cmds = {}
  for tok in pairs(tokens) do
    for _, p in ipairs(prefixes) do
      if not kept[p] then cmds[#cmds + 1] = { script = "release", p, tok } end
    end
  end
  if #cmds > 0 then conn:pipeline(cmds) end
end

return M
