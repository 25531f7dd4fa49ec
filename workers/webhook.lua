-- luakiq.workers.webhook: a ready-made worker that delivers each perform
-- call's jobs to an HTTP endpoint as one POST (rickover's downstream
-- delivery; docs/workers.md).
--
--   -- DIR/workers/Orders.lua
--   return require("luakiq.workers.webhook") {
--     url = "https://hooks.example.com/orders",
--     secret = os.getenv("ORDERS_HOOK_SECRET"), -- optional: sign the body
--     batch_size = 10, timeout = 30,            -- and any other worker key
--   }
--
-- Request: POST url, Content-Type: application/json, the body
-- {"jobs":[{"id":"1","payloads":[...]}],"worker":"Orders"} (canonical JSON),
-- X-Luakiq-Delivery: call.delivery, the same for every attempt to deliver
-- the same jobs with the same payloads (a retry after a failure or a
-- timeout, a delivery again after a kill -9 before the ack): receivers
-- de-duplicate on it; X-Luakiq-Attempt: 1 on the first attempt, + 1 per
-- failure before (call.retries + 1); with secret, X-Luakiq-Signature:
-- t=UNIX,v1=HEX, HEX the HMAC-SHA256 of "UNIX.BODY" with secret (Stripe's
-- scheme: the receiver refuses an old t, so a captured request cannot be
-- replayed later).
-- Callback mode (callback = true, rickover's): each job of the body also has
-- "reply_url" and "attempt" (luakiq.await's, called for every job before the
-- request goes out; reply_url needs public_url), a 2xx answer means
-- "accepted, the result comes later": every job then waits, without holding
-- its shard, until the receiver POSTs {"status": "succeeded"} (or "failed",
-- with "error" and "retryable") to its reply_url, or reply_timeout passes
-- (docs/workers.md, "Callbacks").
-- Response: 2xx: done (callback mode: the jobs wait for their replies). 408,
-- 425, 429, 5xx and transport errors: a failure that is retried (a
-- Retry-After header, seconds or an HTTP date, sets when, at most
-- retry_after_max seconds from now; else retry_in). Any other status (a 3xx,
-- 400, 404, ...): a permanent failure (the morgue at once), the error
-- naming the status and the first 200 bytes of the body. The request never
-- outlives the call's timeout.
-- While it is in flight the call is parked: the thread runs other shards'
-- calls meanwhile.
local luakiq = require "luakiq"
local core = require "luakiq.core"
local config = require "luakiq.lib.config"
local deliver = require "luakiq.lib.deliver"
local failure = require "luakiq.lib.failure"
local http = require "luakiq.http"

local WHAT = "luakiq.workers.webhook"
local RETRY = { [408] = true, [425] = true, [429] = true }
local RETRY_AFTER_MAX = 3600 -- s: retry_after_max's default
local MONTHS = { Jan = 1, Feb = 2, Mar = 3, Apr = 4, May = 5, Jun = 6, Jul = 7, Aug = 8, Sep = 9, Oct = 10,
                 Nov = 11, Dec = 12 }

-- Days from 1970-01-01 to y-m-d (proleptic Gregorian), for HTTP dates in UTC
-- without the local time zone mktime would apply.
local function days(y, m, d)
  if m <= 2 then y, m = y - 1, m + 12 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local doy = math.floor((153 * (m - 3) + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

-- Seconds from now given by a Retry-After value (delay-seconds or an
-- IMF-fixdate like "Wed, 21 Oct 2015 07:28:00 GMT"), at most max (the
-- receiver's word is not trusted without bound: "10 years", 1e23 s, a date
-- in year 9999 would leave the job due "never"; default retry_after_max's),
-- or nil.
local function retry_after(v, now, max)
  if not v then return nil end
  local after
  local s = v:match("^%s*(%d+)%s*$")
  if s then
    after = tonumber(s)
  else
    local d, mon, y, hh, mm, ss = v:match("^%s*%a+, (%d%d) (%a%a%a) (%d%d%d%d) (%d%d):(%d%d):(%d%d) GMT%s*$")
    if not d or not MONTHS[mon] then return nil end
    local at = days(tonumber(y), MONTHS[mon], tonumber(d)) * 86400 + tonumber(hh) * 3600 + tonumber(mm) * 60 + tonumber(ss)
    after = math.max(at - now, 0)
  end
  return math.min(after, max or RETRY_AFTER_MAX)
end

-- The X-Luakiq-Signature of body sent at Unix time t (whole seconds).
local function signature(secret, t, body)
  return ("t=%d,v1=%s"):format(t, core.hmac_sha256(secret, t .. "." .. body))
end

local function excerpt(body)
  body = (body or ""):sub(1, 200):gsub("[%c]", " ")
  return body
end

local function new(opts)
  local own, w = config.ready_made_options(WHAT, opts,
    { url = "str", secret = "str", headers = "str_map", insecure = "bool", callback = "bool",
      retry_after_max = "pos_num" })
  if not own.url then error(WHAT .. ": url is required (http:// or https://)", 0) end
  if not own.url:lower():find("^https?://[^/?#]") then
    error(WHAT .. ": url must be http:// or https://", 0)
  end
  -- one perform call per fetch (a fetch's jobs are one POST)
  w.fetch_size = w.fetch_size or w.batch_size
  local url, secret, insecure, callback = own.url, own.secret, own.insecure, own.callback
  local after_max = own.retry_after_max
  local extra = own.headers or {}
  -- Callback mode: every job of the call waits for a reply (its wait is in
  -- Redis before the request goes out, so a receiver that answers at once
  -- is not lost; a failed call drops the waits): id -> {reply_url, attempt}.
  local function await_all(batch)
    local fields = {}
    for _, id in ipairs(deliver.ids(batch)) do
      local a = luakiq.await(id)
      if not a.url then
        error("webhook: callback = true needs public_url (config.lua, or LUAKIQ_PUBLIC_URL) for the jobs' reply_url", 0)
      end
      fields[id] = { reply_url = a.url, attempt = a.attempt }
    end
    return fields
  end
  function w.perform(batch, call)
    local body = deliver.body(call.worker, batch, callback and await_all(batch) or nil)
    local headers = { ["Content-Type"] = "application/json", ["X-Luakiq-Delivery"] = call.delivery,
                      ["X-Luakiq-Attempt"] = tostring((call.retries or 0) + 1) }
    for k, v in pairs(extra) do headers[k] = v end
    if secret then headers["X-Luakiq-Signature"] = signature(secret, math.floor(core.now()), body) end
    -- a transport error raises "http: ..." (retried); the call's deadline
    -- bounds the request (timeout here is only an upper bound)
    local res = http.request { method = "POST", url = url, headers = headers, body = body,
                               insecure = insecure, timeout = 3600 }
    local st = res.status
    if st >= 200 and st < 300 then return end
    local msg = ("webhook: HTTP %d: %s"):format(st, excerpt(res.body))
    if RETRY[st] or st >= 500 then
      local after = retry_after(res.headers["retry-after"], core.now(), after_max)
      if after then error(failure.retry_after(after, msg), 0) end
      error(msg, 0)
    end
    error(failure.permanent(msg), 0)
  end
  return w
end

return setmetatable({ retry_after = retry_after }, { __call = function(_, opts) return new(opts) end })
