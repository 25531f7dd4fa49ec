-- luakiq.lib.tz: UTC offsets of IANA time zones, read from the system's tzdata
-- (Debian's tzdata package: /usr/share/zoneinfo, TZif files). No zone table
-- is written here: the file's transitions give the offset at any instant.
-- Times after the file's last transition (2037 in Debian's "fat" files) keep
-- the last offset (the file's POSIX footer rule is not read).
--   local z = tz.zone("Europe/Berlin")   -- nil, err for an unknown zone
--   z:offset(t)  -> seconds east of UTC at Unix time t
--   z:fields(t)  -> {year, month, day, hour, min, sec, wday (0 = Sunday)}
local M = {}

M.ZONEINFO = os.getenv("TZDIR") or "/usr/share/zoneinfo"

local function be(s, i, n) -- big-endian unsigned integer of n bytes at i
  local v = 0
  for k = i, i + n - 1 do v = v * 256 + s:byte(k) end
  return v
end
local function be_signed(s, i, n)
  local v = be(s, i, n)
  local half = 2 ^ (8 * n - 1)
  if v >= half then v = v - 2 * half end
  return v
end

-- Parses a TZif file (version 2+: its 64-bit section). Returns transitions
-- (sorted Unix times), their offsets, and the offset before the first.
local function parse(data)
  if data:sub(1, 4) ~= "TZif" then return nil, "not a TZif file" end
  local function counts(at)
    return be(data, at + 20, 4), be(data, at + 24, 4), be(data, at + 28, 4), be(data, at + 32, 4),
      be(data, at + 36, 4), be(data, at + 40, 4)
  end
  local isutc, isstd, leap, timecnt, typecnt, charcnt = counts(1)
  local version = data:sub(5, 5)
  local at, tsize = 1, 4
  if version >= "2" then
    -- skip the 32-bit block to the 64-bit header
    at = 1 + 44 + timecnt * 4 + timecnt + typecnt * 6 + charcnt + leap * 8 + isstd + isutc
    isutc, isstd, leap, timecnt, typecnt, charcnt = counts(at)
    tsize = 8
  end
  local p = at + 44
  local times, idx, offs = {}, {}, {}
  for i = 1, timecnt do times[i] = be_signed(data, p + (i - 1) * tsize, tsize) end
  p = p + timecnt * tsize
  for i = 1, timecnt do idx[i] = data:byte(p + i - 1) end
  p = p + timecnt
  for i = 0, typecnt - 1 do offs[i] = be_signed(data, p + i * 6, 4) end
  if typecnt == 0 then return nil, "no local time types" end
  local z = { times = times, offsets = {}, first = offs[0] }
  for i = 1, timecnt do z.offsets[i] = offs[idx[i]] or 0 end
  return z
end

local Zone = {}
Zone.__index = Zone

function Zone:offset(t)
  local times = self.times
  if #times == 0 or t < times[1] then return self.first end
  local lo, hi = 1, #times -- the last transition <= t
  while lo < hi do
    local mid = math.floor((lo + hi + 1) / 2)
    if times[mid] <= t then lo = mid else hi = mid - 1 end
  end
  return self.offsets[lo]
end

function Zone:fields(t)
  local d = os.date("!*t", math.floor(t + self:offset(t)))
  return { year = d.year, month = d.month, day = d.day, hour = d.hour, min = d.min, sec = d.sec, wday = d.wday - 1 }
end

local cache = {}

-- The zone named name ("UTC" and "" are UTC), or nil, reason.
function M.zone(name)
  name = name or "UTC"
  if cache[name] then return cache[name] end
  local z
  if name == "UTC" or name == "" or name == "Etc/UTC" then
    z = { times = {}, offsets = {}, first = 0 }
  else
    if name:find("%.%.") or name:find("^/") or not name:find("^[%w_+%-/]+$") then
      return nil, "not a time zone name"
    end
    local f = io.open(M.ZONEINFO .. "/" .. name, "rb")
    if not f then return nil, "no such time zone in " .. M.ZONEINFO .. " (tzdata)" end
    local data = f:read("*a")
    f:close()
    local err
    z, err = parse(data)
    if not z then return nil, err end
  end
  z.name = name
  setmetatable(z, Zone)
  cache[name] = z
  return z
end

return M
