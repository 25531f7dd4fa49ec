-- luakiq.lib.log: one line per event, written by the host's C logger (time,
-- level and thread added there; --log-format json gives JSON lines).
local core = require "luakiq.core"

local M = {}

-- fields: optional table of extra values (worker, shard, ids, duration...).
local function fields_json(fields)
  if not fields then return nil end
  local parts, keys = {}, {}
  for k in pairs(fields) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local v = fields[k]
    if type(v) == "table" then v = table.concat(v, ",") end
    if type(v) == "number" then
      parts[#parts + 1] = string.format("%q:%s", k, string.format("%.6g", v))
    else
      local s = tostring(v):gsub('[%c"\\]', function(c)
        return string.format("\\u%04x", c:byte())
      end)
      parts[#parts + 1] = string.format('"%s":"%s"', k, s)
    end
  end
  return table.concat(parts, ",")
end

-- "1 thread", "2 threads": n and noun, with an "s" unless n is 1 (for
-- messages; noun is singular and takes a plain "s").
function M.count(n, noun)
  return n .. " " .. noun .. (n == 1 and "" or "s")
end

for _, level in ipairs { "debug", "info", "warn", "error" } do
  M[level] = function(msg, fields)
    core.log(level, tostring(msg), fields_json(fields))
  end
end

return M
