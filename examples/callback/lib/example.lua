-- What the workers of examples/callback share: the provider's requests, and
-- what they did for report.py (one JSON line per event on a Redis list,
-- with the time it happened: {ev, w, id, t, ...}).
local luakiq = require "luakiq"

local M = {}

local PROVIDER = os.getenv("PROVIDER_URL") or "http://127.0.0.1:8098"

function M.record(ev)
  ev.t = luakiq.now()
  luakiq.redis.call("RPUSH", "example:callback:events", luakiq.json.encode(ev))
end

-- the steps of a job's payloads ({step =, plan =, at =} each), in order
function M.steps(payloads)
  local s = {}
  for i, p in ipairs(payloads) do s[i] = p.step end
  return s
end

-- POSTs fields as JSON to the provider's path: it takes the request (202)
-- and answers later, in another message. Any other status fails the call
-- (its waits are dropped with it).
function M.ask(path, fields)
  local res = luakiq.http.request { method = "POST", url = PROVIDER .. path, body = luakiq.json.encode(fields),
                                    headers = { ["Content-Type"] = "application/json" } }
  if res.status ~= 202 then error("provider: HTTP " .. res.status .. ": " .. res.body) end
end

-- a reply handed to on_reply (call.attempt: the attempt it answers)
function M.replied(id, payloads, call, fields)
  fields.ev, fields.w, fields.id, fields.attempt, fields.steps = "reply", call.worker, id, call.attempt, M.steps(payloads)
  M.record(fields)
end

return M
