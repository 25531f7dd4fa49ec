-- luakiq.web.request: what every route handler of luakiq.web reads and
-- writes: the query string, JSON request bodies, integer and range
-- parameters, and the JSON answer. A bad request raises a luakiq.lib.errors
-- input error, which luakiq.web answers 400.
local errors = require "luakiq.lib.errors"
local json = require "luakiq.json"

local M = {}

M.PAGE = 100     -- default listing page
M.MAX_PAGE = 500 -- largest page one request may ask for

-- Percent-decoding of a path segment or a query/form field ("+" is a space).
function M.unescape(s)
  return (s:gsub("%+", " "):gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

-- "a=1&b=x%20y" -> {a = "1", b = "x y"} (a query string or a form body).
function M.parse_query(q)
  local out = {}
  for pair in (q or ""):gmatch("[^&]+") do
    local k, v = pair:match("^([^=]*)=?(.*)$")
    out[M.unescape(k)] = M.unescape(v)
  end
  return out
end

-- A JSON answer: status, content type, body. (json.clean: bytes that are not
-- UTF-8, left in Redis by another writer, are shown escaped, so the answer
-- is always JSON.)
function M.reply(status, value)
  return status, "application/json", json.clean(json.encode(value))
end

-- An error answer: {"error": msg}.
function M.fail(status, msg) return M.reply(status, { error = msg }) end

-- Decodes a JSON request body; what names the expected shape in the error.
function M.body_json(body, what)
  if not body:match("%S") then errors.input("the request body must be " .. what) end
  local ok, v = pcall(json.decode, body)
  if not ok then errors.input("invalid JSON: " .. tostring(v):gsub("^json: ", "")) end
  return v
end

-- Jobs for enqueue: one JSON array, or JSON lines (like `luakiq enqueue`).
function M.read_jobs(body)
  if body:match("^%s*%[") or not body:match("%S") then return M.body_json(body, "a JSON array of jobs") end
  local jobs, n = {}, 0
  for line in (body .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if line:match("%S") then
      local ok, v = pcall(json.decode, line)
      if not ok then errors.input("line " .. n .. ": invalid JSON: " .. tostring(v):gsub("^json: ", "")) end
      jobs[#jobs + 1] = v
    end
  end
  return jobs
end

-- ids from {"ids": [...]} (nil with {"all": true} when allow_all).
function M.ids_of(body, allow_all)
  local v = M.body_json(body, allow_all and '{"ids":[...]} or {"all":true}' or '{"ids":[...]}')
  if type(v) ~= "table" then errors.input("the request body must be a JSON object") end
  if v.all == true and allow_all then
    if v.ids ~= nil then errors.input("give ids or all, not both") end
    return nil
  end
  local ids = v.ids
  if type(ids) ~= "table" or #ids == 0 then
    errors.input(allow_all and 'give {"ids":[...]} (non-empty) or {"all":true}' or 'give {"ids":[...]} (non-empty)')
  end
  for k in pairs(ids) do
    if type(k) ~= "number" then errors.input("ids must be an array") end
  end
  return ids
end

-- A bound in Redis range syntax (lex: ZRANGEBYLEX's); bare values are made
-- inclusive; default when absent.
function M.bound(v, lex, default)
  if v == nil or v == "" then return default end
  if lex then
    if v == "-" or v == "+" or v:match("^[%[%(]") then return v end
    return "[" .. v
  end
  if v == "-inf" or v == "+inf" or v == "inf" then return v end
  local n = v:match("^%((.*)$") or v
  if not tonumber(n) then errors.input("'" .. v .. "' is not a number or a Redis score bound") end
  return v
end

-- The integer query parameter name, from lo to hi; default when absent.
function M.int_param(q, name, default, lo, hi)
  local v = q[name]
  if v == nil or v == "" then return default end
  local n = tonumber(v)
  if not n or n ~= math.floor(n) or n < lo or n > hi then
    errors.input(name .. " must be an integer from " .. lo .. " to " .. hi)
  end
  return n
end

return M
