-- luakiq.lib.cron: cron expressions for recurring jobs (config.lua schedules).
-- 5 fields "min hour day-of-month month day-of-week" or 6 with seconds
-- first; each field: *, a number, a range a-b, a list a,b,c, a step */n or
-- a-b/n; names jan-dec and sun-sat; day-of-week 0 or 7 is Sunday. When both
-- day fields are restricted, either may match (Vixie cron's rule).
-- Matching is on the zone's wall clock (luakiq.lib.tz), minute by minute in
-- UTC: a wall time a DST change skips does not fire that day; one it
-- repeats fires twice.
local M = {}

local MONTHS = { jan = 1, feb = 2, mar = 3, apr = 4, may = 5, jun = 6, jul = 7, aug = 8, sep = 9, oct = 10,
                 nov = 11, dec = 12 }
local DAYS = { sun = 0, mon = 1, tue = 2, wed = 3, thu = 4, fri = 5, sat = 6 }
local FIELDS = {
  { "second", 0, 59 }, { "minute", 0, 59 }, { "hour", 0, 23 }, { "day of month", 1, 31 },
  { "month", 1, 12, MONTHS }, { "day of week", 0, 7, DAYS },
}

local function value(s, names, lo, hi, what)
  local v = tonumber(s) or (names and names[s:lower()])
  if not v or v % 1 ~= 0 or v < lo or v > hi then error(("%s '%s' is not in %d-%d"):format(what, s, lo, hi), 0) end
  return v
end

local function field(text, f)
  local what, lo, hi, names = f[1], f[2], f[3], f[4]
  local set, any = {}, text == "*" or text == "?"
  for part in (text .. ","):gmatch("([^,]*),") do
    if part == "" then error(what .. ": empty list item", 0) end
    local range, step = part:match("^([^/]+)/(%d+)$")
    range = range or part
    step = tonumber(step) or 1
    if step < 1 then error(what .. ": step must be >= 1", 0) end
    local a, b
    if range == "*" or range == "?" then a, b = lo, hi
    elseif range:find("-", 1, true) then
      local x, y = range:match("^([^-]+)-([^-]+)$")
      if not x then error(what .. ": bad range '" .. range .. "'", 0) end
      a, b = value(x, names, lo, hi, what), value(y, names, lo, hi, what)
      if a > b then error(what .. ": range '" .. range .. "' goes backwards", 0) end
    else
      a = value(range, names, lo, hi, what)
      b = part:find("/", 1, true) and hi or a
    end
    for v = a, b, step do set[v] = true end
  end
  return set, any
end

-- parse(expr) -> spec, or nil, reason.
function M.parse(expr)
  if type(expr) ~= "string" then return nil, "must be a string" end
  local parts = {}
  for p in expr:gmatch("%S+") do parts[#parts + 1] = p end
  if #parts ~= 5 and #parts ~= 6 then return nil, "needs 5 fields (min hour dom mon dow) or 6 (with seconds first)" end
  if #parts == 5 then table.insert(parts, 1, "0") end
  local spec = {}
  local ok, err = pcall(function()
    for i, f in ipairs(FIELDS) do spec[i], spec["any" .. i] = field(parts[i], f) end
  end)
  if not ok then return nil, err end
  if spec[6][7] then spec[6][0] = true end
  return spec
end

-- Whether the minute (fields of luakiq.lib.tz) matches the five minute fields.
local function minute_matches(spec, d)
  if not (spec[2][d.min] and spec[3][d.hour] and spec[5][d.month]) then return false end
  local dom, dow = spec[4][d.day], spec[6][d.wday]
  if spec.any4 or spec.any6 then return dom and dow end
  return dom or dow
end

local function seconds_of(spec)
  local list = {}
  for s = 0, 59 do if spec[1][s] then list[#list + 1] = s end end
  return list
end

-- The latest tick t with from < t <= to (Unix seconds), in zone; nil if none.
-- Walks back minute by minute (to - from is bounded by the caller).
function M.prev(spec, zone, from, to)
  local secs = seconds_of(spec)
  local m = math.floor(to / 60) * 60
  while m + 59 > from do
    local d = zone:fields(m)
    if minute_matches(spec, d) then
      -- local seconds = UTC seconds within a minute (offsets are whole minutes)
      for i = #secs, 1, -1 do
        local t = m + secs[i]
        if t <= to and t > from then return t end
      end
    end
    m = m - 60
  end
  return nil
end

-- The first tick t > after, within limit seconds (default 400 days); nil if none.
function M.next(spec, zone, after, limit)
  local secs = seconds_of(spec)
  local m = math.floor(after / 60) * 60
  local stop = after + (limit or 400 * 86400)
  while m <= stop do
    if minute_matches(spec, zone:fields(m)) then
      for _, s in ipairs(secs) do
        if m + s > after then return m + s end
      end
    end
    m = m + 60
  end
  return nil
end

return M
