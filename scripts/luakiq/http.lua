-- luakiq.http: HTTP(S) requests for workers, on libcurl (host/http.c).
--
-- request(opts) -> {status =, headers = {lower-case name = value}, body =}
-- for any HTTP status; raises "http: <reason> (<METHOD> <url without
-- credentials>)" on a transport failure (connect, TLS, timeout, a body over
-- max_body). Options (docs/lua-api.md):
--   url (required, http:// or https://), method ("GET"), headers ({name =
--   value}), body (string), timeout (seconds, default 30, never past the
--   running call's deadline), insecure (false: TLS verified against the
--   system's CA store), redirects (0: not followed; n: at most n), max_body
--   (bytes, default 16 MiB).
--
-- Inside a perform call the request parks the call (luakiq.lib.wait): the thread
-- runs other shards' calls until the response is in. Elsewhere it waits in
-- place. Keep-alive connections are per thread (one libcurl engine each).
local core = require "luakiq.core"
local runtime = require "luakiq.lib.runtime"
local wait = require "luakiq.lib.wait"

local M = {}

local VERSION = "0.1.0"
local DEFAULT_TIMEOUT = 30
local MAX_BODY = 16 * 1024 * 1024
local OPTIONS = {
  url = true, method = true, headers = true, body = true, timeout = true,
  insecure = true, redirects = true, max_body = true,
}

local function bad(msg) error("luakiq.http.request: " .. msg, 4) end -- level 4: the caller of request()

-- Checks opts; returns the table host/http.c takes (timeout not yet capped).
local function prepare(opts)
  if type(opts) ~= "table" then bad("expects a table of options") end
  for k in pairs(opts) do
    if not OPTIONS[k] then
      local names = {}
      for n in pairs(OPTIONS) do names[#names + 1] = n end
      table.sort(names)
      bad(("unknown option '%s' (options: %s)"):format(tostring(k), table.concat(names, ", ")))
    end
  end
  local url = opts.url
  if type(url) ~= "string" then bad("url must be a string") end
  if not (url:lower():find("^https?://[^/?#]")) then
    bad(("url must be http:// or https://, got '%s'"):format(runtime.redact(url)))
  end
  if url:find("[%s%c]") then bad("url must not contain spaces or control characters") end
  local method = opts.method or "GET"
  if type(method) ~= "string" or not method:find("^[A-Z]+$") then
    bad("method must be an upper-case HTTP method, got " .. tostring(method))
  end
  local body = opts.body
  if body ~= nil and type(body) ~= "string" then bad("body must be a string") end
  local timeout = opts.timeout or DEFAULT_TIMEOUT
  if type(timeout) ~= "number" or not (timeout > 0) or timeout == math.huge then
    bad("timeout must be a number > 0 (seconds)")
  end
  local redirects = opts.redirects or 0
  if type(redirects) ~= "number" or redirects < 0 or redirects % 1 ~= 0 then
    bad("redirects must be an integer >= 0")
  end
  local max_body = opts.max_body or MAX_BODY
  if type(max_body) ~= "number" or max_body < 0 or max_body % 1 ~= 0 or max_body > 2 ^ 31 - 1 then
    bad("max_body must be an integer >= 0 (bytes, < 2 GiB)")
  end
  if opts.insecure ~= nil and type(opts.insecure) ~= "boolean" then bad("insecure must be a boolean") end
  local list, has = {}, {}
  if opts.headers ~= nil then
    if type(opts.headers) ~= "table" then bad("headers must be a table {name = value}") end
    for name, value in pairs(opts.headers) do
      if type(name) ~= "string" or not name:find("^[!#$%%&'*+.^_`|~%w-]+$") then
        bad("header names must be tokens, got " .. tostring(name))
      end
      if type(value) == "number" then value = tostring(value) end
      if type(value) ~= "string" or value:find("[\r\n%z]") then
        bad(("header '%s' must be a string without line breaks"):format(name))
      end
      list[#list + 1] = name .. ": " .. value
      has[name:lower()] = true
    end
  end
  if not has["user-agent"] then list[#list + 1] = "User-Agent: luakiq/" .. VERSION end
  -- no "Expect: 100-continue" round trip before large bodies (one more wait)
  if not has["expect"] then list[#list + 1] = "Expect:" end
  if body and not has["content-type"] then list[#list + 1] = "Content-Type: application/octet-stream" end
  if body == nil and (method == "POST" or method == "PUT" or method == "PATCH") then body = "" end
  table.sort(list)
  return {
    method = method, url = url, headers = list, body = body, timeout = timeout,
    insecure = opts.insecure == true, redirects = redirects, max_body = max_body,
  }
end

local function parse_headers(block)
  local h = {}
  for line in block:gmatch("[^\r\n]+") do
    local name, value = line:match("^([^:%s]+):%s*(.-)%s*$")
    if name then
      name = name:lower()
      h[name] = h[name] and (h[name] .. ", " .. value) or value
    end
  end
  return h
end

-- Waits until tr is done, or raises the timeout error at the call's
-- deadline (the transfer is ended first).
local function await(tr)
  if tr:done() then return end
  if wait.inside() then
    wait.yield({ kind = "http", transfer = tr }, function() tr:close() end)
    return
  end
  while not tr:done() do
    local left = core.deadline()
    if left and left <= 0 then
      tr:close()
      core.raise_timeout()
    end
    core.http_wait(math.min(left or 1, 1), false)
  end
end

function M.request(opts)
  local req = prepare(opts)
  local left = core.deadline()
  local cut = left and left < req.timeout
  req.timeout_ms = math.max(1, math.floor(((cut and left or req.timeout)) * 1000))
  local tr = core.http_start(req)
  await(tr)
  local status, head, body = tr:result()
  tr:close()
  if not status then
    -- head is the reason, body its kind; a request timeout that was the
    -- call's remaining time is the call's timeout
    if cut and body == "timeout" then core.raise_timeout() end
    -- level 0: the message starts with "http:" (callers match on it)
    error(("http: %s (%s %s)"):format(head, req.method, runtime.redact(req.url)), 0)
  end
  return { status = status, headers = parse_headers(head), body = body }
end

return M
