-- luakiq.json: canonical JSON encoding and strict decoding.
--
-- encode(v) is canonical, so equal payloads are equal bytes (payloads are
-- sorted-set members, and equal members merge):
--   * object keys sorted by byte order, no whitespace anywhere;
--   * a table with keys 1..n (n > 0) only is an array; any other non-empty
--     table must have string keys only (it is an object); an empty table is
--     `{}` unless it carries json.array_mt (see json.array);
--   * integers (|x| < 2^53) print without fraction or exponent; other numbers
--     print with the fewest significant digits (<= 17) that read back equal;
--     -0 prints as 0; NaN and +-inf are refused;
--   * strings: `"` `\` and control characters are escaped (\b \f \n \r \t,
--     else \u00xx); every other byte, UTF-8 included, passes through;
--   * json.null encodes as null; functions, userdata, threads, cycles and
--     nesting deeper than MAX_DEPTH are refused.
-- Errors are raised as "json: <reason> at <path>", e.g. "json: cannot encode
-- a function at $.user.hook".
--
-- decode(s) uses a private lua-cjson instance (cjson.new(), so settings made
-- by user code on the shared `cjson` module cannot change it), refuses NaN,
-- Infinity and hex numbers, and limits nesting to MAX_DEPTH. null decodes to
-- json.null. Note: `[]` decodes to an empty table, which encodes as `{}`.
local cjson_module = require "cjson"

local M = {}

local MAX_DEPTH = 1000

local cj = cjson_module.new()
cj.decode_invalid_numbers(false)
cj.decode_max_depth(MAX_DEPTH)

-- The null sentinel (cjson.null: the same light userdata in every instance).
M.null = cjson_module.null

-- Tables with this metatable always encode as arrays, `[]` when empty.
M.array_mt = { __name = "luakiq.json.array" }

local byte = string.byte

-- Whether s is valid UTF-8 (RFC 3629: no overlongs, surrogates or code
-- points above U+10FFFF). (A loop over the bytes, which LuaJIT compiles, is
-- ~8x faster than a pattern find for ASCII, the usual case: a pattern runs
-- in the interpreter's C code, ~10 ns a byte; docs/benchmarks.md,
-- "Enqueue of payloads".)
function M.utf8_valid(s)
  local i, n = 1, #s
  while i <= n do
    local c = byte(s, i)
    if c < 0x80 then
      i = i + 1
    else
      local len, lo, hi = 0, 0x80, 0xBF
      if c >= 0xC2 and c <= 0xDF then len = 2
      elseif c >= 0xE0 and c <= 0xEF then
        len = 3
        if c == 0xE0 then lo = 0xA0 elseif c == 0xED then hi = 0x9F end
      elseif c >= 0xF0 and c <= 0xF4 then
        len = 4
        if c == 0xF0 then lo = 0x90 elseif c == 0xF4 then hi = 0x8F end
      else
        return false
      end
      if i + len - 1 > n then return false end
      local c2 = byte(s, i + 1)
      if c2 < lo or c2 > hi then return false end
      for k = i + 2, i + len - 1 do
        local ck = byte(s, k)
        if ck < 0x80 or ck > 0xBF then return false end
      end
      i = i + len
    end
  end
  return true
end

-- text with every byte that is not part of valid UTF-8 written as the JSON
-- escape \u00XX: an answer (API, CLI lines) stays JSON whatever bytes
-- another writer left in Redis. Only strings can hold such bytes, as JSON's
-- structure is ASCII. Valid text is returned as it is (one find if ASCII).
function M.clean(text)
  if M.utf8_valid(text) then return text end
  local out, i, n = {}, 1, #text
  while i <= n do
    local c = text:byte(i)
    local len = c < 0x80 and 1 or c >= 0xF0 and 4 or c >= 0xE0 and 3 or c >= 0xC2 and 2 or 0
    local piece = len > 0 and text:sub(i, i + len - 1)
    if piece and (len == 1 or (#piece == len and M.utf8_valid(piece))) then
      out[#out + 1] = piece
      i = i + len
    else
      out[#out + 1] = ("\\u%04x"):format(c)
      i = i + 1
    end
  end
  return table.concat(out)
end

-- Marks t (default: a new table) as an array; returns it.
function M.array(t)
  return setmetatable(t or {}, M.array_mt)
end

local type, pairs, next, tostring, tonumber = type, pairs, next, tostring, tonumber
local floor, huge = math.floor, math.huge
local format, gsub, sort, concat = string.format, string.gsub, table.sort, table.concat

local escapes = { ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f",
                  ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }
for c = 0, 31 do
  local ch = string.char(c)
  if not escapes[ch] then escapes[ch] = format("\\u%04x", c) end
end

local function encode_string(s)
  -- (a byte loop finds the first byte to escape: see utf8_valid)
  for i = 1, #s do
    local b = byte(s, i)
    if b < 32 or b == 34 or b == 92 then
      -- %c also matches DEL (127), which has no entry and so stays as it is.
      return '"' .. gsub(s, '[%c"\\]', escapes) .. '"'
    end
  end
  return '"' .. s .. '"'
end

local function encode_number(x)
  if x ~= x or x == huge or x == -huge then return nil end
  if x == floor(x) and x > -2 ^ 53 and x < 2 ^ 53 then
    return format("%d", x) -- also turns -0 into 0
  end
  -- Shortest of %.15g/%.16g/%.17g that reads back as the same double: if a
  -- shorter decimal reads back exactly, %.15g already finds it.
  for digits = 15, 17 do
    local s = format("%." .. digits .. "g", x)
    if tonumber(s) == x then return s end
  end
  return format("%.17g", x)
end

-- A readable path for error messages: $, $.key, $[3], $["odd key"].
local function path_string(path, depth)
  local parts = { "$" }
  for i = 1, depth do
    local k = path[i]
    if type(k) == "number" then
      parts[#parts + 1] = "[" .. k .. "]"
    elseif k:match("^[%a_][%w_]*$") then
      parts[#parts + 1] = "." .. k
    else
      parts[#parts + 1] = "[" .. encode_string(k) .. "]"
    end
  end
  return concat(parts)
end

local encode_value

local function fail(ctx, depth, reason)
  error("json: " .. reason .. " at " .. path_string(ctx.path, depth), 0)
end

local function encode_table(t, ctx, depth, buf)
  if depth >= MAX_DEPTH then fail(ctx, depth, "nesting deeper than " .. MAX_DEPTH) end
  if ctx.seen[t] then fail(ctx, depth, "cannot encode a cyclic table") end
  ctx.seen[t] = true
  local path = ctx.path
  -- Classify: count keys, note whether all are 1..n integers or all strings
  -- (the string keys kept, for an object)
  local count, strings, others, max, bad = 0, 0, 0, 0, nil
  local keys
  for k in pairs(t) do
    count = count + 1
    if type(k) == "string" then
      strings = strings + 1
      if keys then keys[strings] = k else keys = { k } end
    elseif type(k) == "number" and k >= 1 and k == floor(k) then
      others = others + 1
      if k > max then max = k end
    else
      bad = bad or k
    end
  end
  if bad ~= nil then
    fail(ctx, depth, "cannot encode a table key of type " .. type(bad) .. " (" .. tostring(bad) .. ")")
  end
  local is_array = getmetatable(t) == M.array_mt
  if strings > 0 and others > 0 then
    fail(ctx, depth, "cannot encode a table with both string and number keys")
  elseif others > 0 then
    if max ~= count then
      fail(ctx, depth, "cannot encode a sparse array (" .. count .. " items, not keyed 1.." .. count .. ")")
    end
    is_array = true
  elseif strings > 0 and is_array then
    fail(ctx, depth, "cannot encode string keys in a json.array table")
  end
  if is_array then
    buf[#buf + 1] = "["
    for i = 1, count do
      if i > 1 then buf[#buf + 1] = "," end
      path[depth + 1] = i
      encode_value(t[i], ctx, depth + 1, buf)
    end
    buf[#buf + 1] = "]"
  elseif strings == 0 then
    buf[#buf + 1] = "{}"
  else
    if strings > 1 then sort(keys) end -- byte order: LuaJIT compares strings bytewise
    buf[#buf + 1] = "{"
    for i = 1, strings do
      local k = keys[i]
      if i > 1 then buf[#buf + 1] = "," end
      buf[#buf + 1] = encode_string(k)
      buf[#buf + 1] = ":"
      path[depth + 1] = k
      encode_value(t[k], ctx, depth + 1, buf)
    end
    buf[#buf + 1] = "}"
  end
  ctx.seen[t] = nil
end

encode_value = function(v, ctx, depth, buf)
  local tv = type(v)
  if tv == "string" then
    buf[#buf + 1] = encode_string(v)
  elseif tv == "number" then
    local s = encode_number(v)
    if not s then fail(ctx, depth, "cannot encode NaN/inf") end
    buf[#buf + 1] = s
  elseif tv == "boolean" then
    buf[#buf + 1] = v and "true" or "false"
  elseif tv == "table" then
    encode_table(v, ctx, depth, buf)
  elseif v == nil or v == M.null then
    buf[#buf + 1] = "null"
  else
    fail(ctx, depth, "cannot encode a " .. tv)
  end
end

-- encode(v) -> string; raises "json: ..." on values JSON cannot represent.
function M.encode(v)
  -- (a scalar, the usual payload of a job, needs no buffer or context)
  local tv = type(v)
  if tv == "string" then return encode_string(v) end
  if tv == "boolean" then return v and "true" or "false" end
  if tv == "number" then
    local s = encode_number(v)
    if s then return s end
  end
  local buf = {}
  encode_value(v, { seen = {}, path = {} }, 0, buf)
  return concat(buf)
end

-- try_decode(s) -> true, value | false, "json: reason" (one pcall: for a
-- caller that decodes many strings, luakiq.ops.feed; decode and decode_safe
-- are made of it).
function M.try_decode(s)
  if type(s) ~= "string" then return false, "json: decode expects a string, got " .. type(s) end
  local ok, v = pcall(cj.decode, s)
  if ok then return true, v end
  return false, "json: " .. tostring(v)
end

-- decode(s) -> value; raises "json: <reason>" (level 0: no position prefix).
function M.decode(s)
  local ok, v = M.try_decode(s)
  if not ok then error(v, 0) end
  return v
end

-- decode_safe(s) -> value | nil, err (err starts with "json: ").
function M.decode_safe(s)
  local ok, v = M.try_decode(s)
  if ok then return v end
  return nil, v
end

return M
