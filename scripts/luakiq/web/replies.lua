-- luakiq.web.replies: the HTTP routes of jobs that wait for a reply
-- (DESIGN section 9; docs/operations.md, "Replies"): the reply routes
-- (by token and its heartbeat, open to anyone who holds a token, also on
-- the --replies listener; by correlation key and rickover's form, behind
-- the web token) and what operators read (a worker's waiting jobs, its
-- late replies). Every reply goes through luakiq.lib.replies, as `luakiq
-- reply` does, and is answered by its outcome (replies.answer). Handlers
-- are handler(w, req) of luakiq.web's route table.
local json = require "luakiq.json"
local replies = require "luakiq.lib.replies"
local request = require "luakiq.web.request"
local waits = require "luakiq.ops.waits"

local M = {}

local function answer(outcome, msg) return request.reply(replies.answer(outcome, msg)) end

-- A reply route: the body limit is checked before anything else (the web
-- listener takes bodies of up to 1 MiB; the --replies listener's is this).
local function route(handle)
  return function(w, req)
    if #req.body > replies.MAX_BODY then
      return answer("TOOBIG", "the body is " .. #req.body .. " bytes, at most " .. replies.MAX_BODY)
    end
    return handle(w, req)
  end
end

-- POST /api/v1/replies/TOKEN: the body (any JSON) is the reply.
M.by_token = route(function(w, req)
  return answer(replies.by_token(w.conn(), w.cfg, req.params.token, req.body))
end)

-- POST /api/v1/replies/TOKEN/heartbeat: the wait's heartbeat deadline moves on.
M.heartbeat = route(function(w, req)
  return answer(replies.heartbeat(w.conn(), w.cfg, req.params.token))
end)

-- POST /api/v1/workers/W/replies {"key": K, "reply": ...}: by correlation
-- key. The reply is stored as its canonical JSON (luakiq.json: keys sorted),
-- so a repeat with its keys in another order is the same reply.
M.by_key = route(function(w, req)
  local ok, v = pcall(json.decode, req.body)
  if not ok then return answer("BADJSON", "the body is not JSON") end
  if type(v) ~= "table" or v.reply == nil then return answer("BADREPLY", 'the body must be {"key": K, "reply": ...}') end
  return answer(replies.by_key(w.conn(), w.cfg, req.params.worker, v.key, json.encode(v.reply)))
end)

-- POST /api/v1/workers/W/jobs/ID {"status", "attempt", "retryable", "error"}:
-- rickover's form.
M.by_id = route(function(w, req)
  return answer(replies.by_id(w.conn(), w.cfg, req.params.worker, req.params.id, req.body))
end)

-- GET /api/v1/workers/W/waiting?cursor=&limit=: one page of W's waiting
-- jobs (`luakiq waiting`): {"jobs": [...], "next": cursor of the next page
-- (absent at the end)}.
function M.waiting(w, req)
  local q = req.query
  local cursor = q.cursor ~= "" and q.cursor or nil
  local list, nxt = waits.list(w.conn(), w.cfg, req.params.worker, cursor,
    request.int_param(q, "limit", request.PAGE, 1, request.MAX_PAGE))
  return request.reply(200, { jobs = json.array(list), next = nxt })
end

-- GET /api/v1/workers/W/late_replies?limit=: W's latest late replies
-- (at most 100), newest first: {"replies": [...]}.
function M.late(w, req)
  local limit = request.int_param(req.query, "limit", 100, 1, 100)
  return request.reply(200, { replies = json.array(waits.late(w.conn(), w.cfg, req.params.worker, limit)) })
end

return M
