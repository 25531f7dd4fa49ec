-- luakiq.ops.scripts: `luakiq scripts DIR`: the Redis scripts this binary
-- embeds, expanded as it sends them (every "-- luakiq:include NAME" line
-- replaced, luakiq.lib.include), written as DIR/NAME.lua with DIR/manifest.json:
--   {"layout":"2","luakiq":VERSION,"scripts":{NAME:{"file":"NAME.lua","sha1":SHA1}}}
-- sha1: the script's SHA-1, the name EVALSHA calls it by. layout: the
-- layout of the keys these scripts read and write (docs/redis.md, "Layout
-- version"): a client refuses a namespace of another one. The producers
-- in other languages (clients/) ship these files, written by their build
-- (CMakeLists.txt), never edited or copied by hand.
local core = require "luakiq.core"
local json = require "luakiq.json"
local errors = require "luakiq.lib.errors"

local M = {}

-- The layout of the keys the embedded scripts use (layout.lua, register.lua).
M.LAYOUT = "2"

-- SHA-1 of text in hex, by libcrypto's SHA1, which the binary links
-- (host/ uses its HMAC and SHA-256).
local sha1_fn
function M.sha1(text)
  if not sha1_fn then
    local ffi = require "ffi"
    ffi.cdef "unsigned char *SHA1(const unsigned char *d, size_t n, unsigned char *md);"
    local md = ffi.new("unsigned char[20]")
    sha1_fn = function(s)
      ffi.C.SHA1(s, #s, md)
      local hex = {}
      for i = 0, 19 do hex[i + 1] = string.format("%02x", md[i]) end
      return table.concat(hex)
    end
  end
  return sha1_fn(text)
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local text = f:read("*a")
  f:close()
  return text
end

-- Writes text to path unless it holds it already (a build that runs this
-- every time leaves unchanged files alone). Raises an input error.
local function write(path, text)
  if read(path) == text then return false end
  local f, err = io.open(path, "wb")
  if not f then errors.input("cannot write " .. err) end
  f:write(text)
  f:close()
  return true
end

-- The manifest of the scripts names (sorted): the table written as
-- manifest.json, and name -> source.
function M.manifest(names)
  local out, sources = { layout = M.LAYOUT, luakiq = require("luakiq").version, scripts = {} }, {}
  for _, name in ipairs(names) do
    local src = core.script_source(name)
    if not src then errors.input("no Redis script '" .. name .. "' in this luakiq") end
    sources[name] = src
    out.scripts[name] = { file = name .. ".lua", sha1 = M.sha1(src) }
  end
  return out, sources
end

-- Writes the scripts names (default: every embedded one) into dir (made
-- when missing). A script the manifest there listed before and names
-- leaves out is removed. Returns how many files changed.
function M.write(dir, names)
  if not names or #names == 0 then names = core.script_names() end
  table.sort(names)
  local manifest, sources = M.manifest(names)
  local rc = os.execute("mkdir -p '" .. dir:gsub("'", "'\\''") .. "'")
  if rc ~= 0 and rc ~= true then errors.input("cannot make the directory " .. dir) end
  local changed = 0
  local old = read(dir .. "/manifest.json")
  local ok, before = pcall(json.decode, old or "{}")
  for name, e in pairs(ok and type(before) == "table" and type(before.scripts) == "table" and before.scripts or {}) do
    if not manifest.scripts[name] and type(e) == "table" and e.file == name .. ".lua" then
      if os.remove(dir .. "/" .. e.file) then changed = changed + 1 end
    end
  end
  for _, name in ipairs(names) do
    if write(dir .. "/" .. name .. ".lua", sources[name]) then changed = changed + 1 end
  end
  if write(dir .. "/manifest.json", json.encode(manifest) .. "\n") then changed = changed + 1 end
  return changed, #names
end

return M
