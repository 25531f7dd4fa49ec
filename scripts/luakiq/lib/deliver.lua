-- luakiq.lib.deliver: what the ready-made workers (workers/*.lua) send: the
-- canonical JSON body of one call, {"jobs":[{"id":...,"payloads":[...]}],
-- "worker":NAME}, jobs in id order, each id's payloads in score order (as
-- perform gets them), so equal calls are equal bytes.
local json = require "luakiq.json"

local M = {}

-- The ids of batch in the body's order.
function M.ids(batch)
  local ids = {}
  for id in pairs(batch) do ids[#ids + 1] = id end
  table.sort(ids)
  return ids
end

-- extra (optional): id -> more fields of that job's object (the webhook's
-- callback mode: reply_url, attempt).
function M.body(worker, batch, extra)
  local jobs = {}
  for i, id in ipairs(M.ids(batch)) do
    local job = { id = id, payloads = json.array { unpack(batch[id]) } }
    for k, v in pairs(extra and extra[id] or {}) do job[k] = v end
    jobs[i] = job
  end
  return json.encode { worker = worker, jobs = json.array(jobs) }
end

-- The last non-empty line of s (a program's stderr), without its line break.
function M.last_line(s)
  local last
  for line in (s or ""):gmatch("[^\r\n]+") do
    if line:find("%S") then last = line end
  end
  return last
end

return M
