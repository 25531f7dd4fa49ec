-- luakiq.web.auth: who may ask luakiq.web what. Without web_token the
-- listener is on loopback (luakiq.web.check_listen) and answers loopback Host
-- names only; with it, every route that is not open needs the token, as
-- 'Authorization: Bearer TOKEN' or the dashboard's session cookie (signing in
-- and out are routes of this module). Cross-site writes are refused either way.
local core = require "luakiq.core"
local errors = require "luakiq.lib.errors"
local log = require "luakiq.lib.log"
local request = require "luakiq.web.request"

local M = {}

-- Is host (no port, no brackets) a loopback address or name?
function M.is_loopback(host)
  host = host:lower()
  return host == "localhost" or host == "::1" or host:match("^127%.%d+%.%d+%.%d+$") ~= nil
end

-- Compares a given secret with the expected one in time that tells neither
-- the expected one's length nor how much of it matched: the HMAC-SHA256 of
-- each under a random key of this VM's own (no digest can be precomputed),
-- of fixed size, compared whole.
local KEY = core.token()
function M.same(given, want)
  local x, y = core.hmac_sha256(KEY, given), core.hmac_sha256(KEY, want)
  local diff = 0
  for i = 1, #x do diff = bit.bor(diff, bit.bxor(x:byte(i), y:byte(i))) end
  return diff == 0
end
local same = M.same

-- The dashboard's session: the token itself, in an HttpOnly, SameSite=Strict
-- cookie (no script of the page can read it; no other site's request carries
-- it). Percent-encoded, so any token fits a cookie value.
local COOKIE = "luakiq_token"

local function cookie_encode(s)
  return (s:gsub("[^%w%-%._~]", function(c) return ("%%%02X"):format(c:byte()) end))
end

-- The value of the cookie named COOKIE in a Cookie header, decoded; "" if none.
local function cookie_token(header)
  for pair in (header or ""):gmatch("[^;]+") do
    local k, v = pair:match("^%s*([^=]-)%s*=%s*(.-)%s*$")
    if k == COOKIE then
      return (v:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
    end
  end
  return ""
end

-- The Set-Cookie value that signs in (value) or out (nil). Secure when a TLS
-- proxy in front says so (X-Forwarded-Proto: https).
local function session_cookie(value, req)
  local c = COOKIE .. "=" .. (value and cookie_encode(value) or "") .. "; Path=/; HttpOnly; SameSite=Strict"
  if not value then c = c .. "; Max-Age=0" end
  if (req.forwarded_proto or ""):lower() == "https" then c = c .. "; Secure" end
  return c
end

-- The host part of a Host header value ("127.0.0.1:8080", "[::1]:8080").
local function host_of(h)
  return h:match("^%[([^%]]+)%]") or h:match("^([^:]*)")
end

-- Why req is refused before any route sees it (a message for a 403), or nil.
-- Without a token, only loopback Host names: a web page on another site
-- cannot reach the listener by DNS rebinding (with a token, a rebound name
-- carries neither the header nor the cookie). A mutating request whose
-- Origin is another site is refused with or without a token: the cookie is
-- SameSite=Strict, this is the belt.
function M.refusal(req, token, mutating)
  if not token and (req.host == "" or not M.is_loopback(host_of(req.host))) then
    return "Host must be a loopback address (set web_token to serve other names)"
  end
  if mutating and req.origin ~= "" and req.origin:gsub("^https?://", "") ~= req.host then
    return "cross-site request refused"
  end
end

-- Does req carry the token (header or cookie)? Always true without one.
function M.authorized(req, token)
  if not token then return true end
  local given = req.auth:match("^[Bb]earer%s+(.-)%s*$")
  if given then return same(given, token) end
  return same(cookie_token(req.cookie), token)
end

-- POST /api/web/login: {"token": T} (JSON) or token=T (a form) -> the
-- session cookie. Without a token configured there is nothing to sign in to.
-- Wrong tokens are logged as a count, one line a minute however many.
function M.login(w, req)
  if not w.token then return request.fail(404, "no web_token is set: nothing to sign in to") end
  local given
  if req.body:match("^%s*{") then
    local v = request.body_json(req.body, '{"token": "..."}')
    given = type(v) == "table" and v.token
  else
    given = request.parse_query(req.body).token
  end
  if type(given) ~= "string" or given == "" then errors.input('give {"token": "..."}') end
  if not same(given, w.token) then
    w.failed_logins = w.failed_logins + 1
    local now = core.now()
    if now - w.failed_logged >= 60 then
      log.warn(("web: %d failed sign-in(s) with a wrong token"):format(w.failed_logins))
      w.failed_logged, w.failed_logins = now, 0
    end
    return request.fail(401, "wrong token")
  end
  local st, ct, body = request.reply(200, { signed_in = true })
  return st, ct, body, session_cookie(w.token, req)
end

-- POST /api/web/logout: clears the session cookie.
function M.logout(_, req)
  local st, ct, body = request.reply(200, { signed_in = false })
  return st, ct, body, session_cookie(nil, req)
end

return M
