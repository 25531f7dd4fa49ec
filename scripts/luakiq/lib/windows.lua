-- luakiq.lib.windows: time-of-day windows of a worker (worker keys windows and
-- timezone; hipq's time windows). A window is "HH:MM-HH:MM" on the zone's
-- wall clock (luakiq.lib.tz), start included, end excluded; one whose end is
-- not after its start crosses midnight ("22:00-02:00"); "00:00-24:00" is
-- the whole day.
--   local w = windows.parse({"09:00-17:00"}, tz.zone("Europe/Berlin"))
--   w:inside(t) -> bool;  w:next_open(t) -> the first time >= t inside one
-- A job's own windows travel with it as text, "ZONE|HH:MM-HH:MM,..."
-- (M.text, M.of_text).
local tz = require "luakiq.lib.tz"

local M = {}

local W = {}
W.__index = W

local function minutes(hh, mm)
  local h, m = tonumber(hh), tonumber(mm)
  if not h or not m or m > 59 or h > 24 or (h == 24 and m ~= 0) then return nil end
  return h * 60 + m
end

-- parse(list, zone) -> windows, or nil, the first bad string, why.
function M.parse(list, zone)
  local spans = {}
  for i, s in ipairs(list) do
    local a1, a2, b1, b2 = tostring(s):match("^(%d%d):(%d%d)%-(%d%d):(%d%d)$")
    local a, b = a1 and minutes(a1, a2), b1 and minutes(b1, b2)
    if not a or not b or a == 24 * 60 then return nil, s, "must be HH:MM-HH:MM (00:00 to 24:00)" end
    if a == b then return nil, s, "is empty (start = end)" end
    spans[i] = { a, b }
  end
  return setmetatable({ spans = spans, zone = zone }, W)
end

-- Whether the minute of the day m (local) is inside a window.
local function in_spans(spans, m)
  for _, sp in ipairs(spans) do
    local a, b = sp[1], sp[2]
    if a < b then
      if m >= a and m < b then return true end
    elseif m >= a or m < b then -- crosses midnight
      return true
    end
  end
  return false
end

function W:inside(t)
  local d = self.zone:fields(t)
  return in_spans(self.spans, d.hour * 60 + d.min)
end

-- The first time >= t inside a window (minute by minute on the zone's wall
-- clock, at most 2 days on), or nil when none opens (cannot happen for a
-- valid list).
function W:next_open(t)
  if self:inside(t) then return t end
  local m = math.floor(t / 60) * 60 + 60
  for _ = 1, 2 * 1440 do
    if self:inside(m) then return m end
    m = m + 60
  end
  return nil
end

-- The text a job's windows travel as in Redis: "ZONE|HH:MM-HH:MM,...".
function M.text(list, zone_name)
  return zone_name .. "|" .. table.concat(list, ",")
end

-- A job's windows from their text, parsed once per distinct text (a bounded
-- cache: jobs of one kind share it). Returns windows, or nil, why.
local by_text, cached = {}, 0
function M.of_text(text)
  local w = by_text[text]
  if w then return w end
  local zone_name, list = tostring(text):match("^(.-)|(.+)$")
  if not zone_name then return nil, "not ZONE|HH:MM-HH:MM,..." end
  local zone, zerr = tz.zone(zone_name)
  if not zone then return nil, "timezone '" .. zone_name .. "': " .. zerr end
  local spans = {}
  for s in list:gmatch("[^,]+") do spans[#spans + 1] = s end
  local bad, why
  w, bad, why = M.parse(spans, zone)
  if not w then return nil, "'" .. tostring(bad) .. "' " .. why end
  if cached >= 1000 then by_text, cached = {}, 0 end
  by_text[text], cached = w, cached + 1
  return w
end

-- The first time >= t inside both a and b (either nil: always open), or
-- nil when they do not meet within 8 days.
function M.next_both(a, b, t)
  local limit = t + 8 * 86400
  while t <= limit do
    local x = a and a:next_open(t) or t
    if not x then return nil end
    local y = b and b:next_open(x) or x
    if not y then return nil end
    if y == x then return x end
    t = y
  end
  return nil
end

return M
