-- luakiq.lib.cron and luakiq.lib.tz on fixed instants (no waiting): the system's
-- tzdata for zones, Vixie cron's fields.
local cron = require "luakiq.lib.cron"
local tz = require "luakiq.lib.tz"

local function utc(y, m, d, H, M, S) -- Unix time of a UTC wall time
  return os.time { year = y, month = m, day = d, hour = H, min = M, sec = S or 0, isdst = false } -
    os.time(os.date("!*t", 0)) -- (os.time reads local time; this cancels the machine's zone)
end
local function fmt(t) return os.date("!%Y-%m-%d %H:%M:%S", t) end

describe("tz", function()
  it("reads offsets from tzdata, DST included", function()
    local b = assert(tz.zone("Europe/Berlin"))
    assert.are.equal(3600, b:offset(utc(2026, 1, 15, 12, 0)))
    assert.are.equal(7200, b:offset(utc(2026, 7, 15, 12, 0)))
    assert.are.equal(3600, b:offset(utc(2026, 3, 29, 0, 59, 59)))  -- the last second of CET
    assert.are.equal(7200, b:offset(utc(2026, 3, 29, 1, 0, 0)))    -- 02:00 CET -> 03:00 CEST
    local ny = assert(tz.zone("America/New_York"))
    assert.are.equal(-5 * 3600, ny:offset(utc(2026, 12, 1, 0, 0)))
    assert.are.equal(0, assert(tz.zone("UTC")):offset(0))
    assert.is_nil(tz.zone("Mars/Olympus"))
    assert.is_nil(tz.zone("../../etc/passwd"))
  end)
end)

describe("cron", function()
  local berlin = tz.zone("Europe/Berlin")
  local U = tz.zone("UTC")
  it("finds the next and the latest tick, 5 and 6 fields", function()
    local s = assert(cron.parse("*/15 9-17 * * mon-fri"))
    assert.are.equal("2026-11-23 09:00:00", fmt(cron.next(s, U, utc(2026, 11, 23, 8, 59)))) -- a Monday
    assert.are.equal("2026-11-23 17:45:00", fmt(cron.prev(s, U, utc(2026, 11, 23, 0, 0), utc(2026, 11, 23, 23, 0))))
    assert.are.equal("2026-11-30 09:00:00", fmt(cron.next(s, U, utc(2026, 11, 27, 17, 45)))) -- Fri -> Mon
    local e = assert(cron.parse("*/20 * * * * *"))
    assert.are.equal("2026-01-01 00:00:40", fmt(cron.next(e, U, utc(2026, 1, 1, 0, 0, 25))))
  end)
  it("crosses midnight and month ends; either day field may match when both are set", function()
    local s = assert(cron.parse("30 23 * * *"))
    assert.are.equal("2026-12-31 23:30:00", fmt(cron.next(s, U, utc(2026, 12, 31, 23, 0))))
    assert.are.equal("2027-01-01 23:30:00", fmt(cron.next(s, U, utc(2026, 12, 31, 23, 30))))
    local both = assert(cron.parse("0 12 13 * fri")) -- the 13th, or any Friday
    assert.are.equal("2026-11-27 12:00:00", fmt(cron.next(both, U, utc(2026, 11, 23, 0, 0)))) -- Friday 27th
    assert.are.equal("2026-12-04 12:00:00", fmt(cron.next(both, U, utc(2026, 11, 27, 12, 0))))
  end)
  it("matches the zone's wall clock: a time DST skips does not fire, a repeated one fires twice", function()
    local s = assert(cron.parse("30 2 * * *"))
    -- spring forward 2026-03-29: 02:30 does not exist in Berlin
    assert.are.equal("2026-03-28 01:30:00", fmt(cron.next(s, berlin, utc(2026, 3, 28, 0, 0))))
    assert.are.equal("2026-03-30 00:30:00", fmt(cron.next(s, berlin, utc(2026, 3, 28, 1, 30))))
    -- fall back 2026-10-25: 02:30 happens in CEST and again in CET
    local first = cron.next(s, berlin, utc(2026, 10, 24, 23, 0))
    assert.are.equal("2026-10-25 00:30:00", fmt(first))
    assert.are.equal("2026-10-25 01:30:00", fmt(cron.next(s, berlin, first)))
  end)
  it("refuses bad expressions with the reason", function()
    for expr, why in pairs {
      ["61 * * * *"] = "minute '61' is not in 0-59",
      ["* * *"] = "needs 5 fields",
      ["* * * foo *"] = "month 'foo' is not in 1-12",
      ["5-1 * * * *"] = "goes backwards",
      ["*/0 * * * *"] = "step must be >= 1",
      ["1,,2 * * * *"] = "empty list item",
    } do
      local spec, err = cron.parse(expr)
      assert.is_nil(spec, expr)
      assert.truthy(err:find(why, 1, true), expr .. ": " .. tostring(err))
    end
  end)
end)

describe("windows", function()
  local windows = require "luakiq.lib.windows"
  local berlin = tz.zone("Europe/Berlin")
  it("crosses midnight on the zone's wall clock", function()
    local w = assert(windows.parse({ "22:00-02:00" }, berlin))
    assert.is_false(w:inside(utc(2026, 11, 23, 20, 59)))   -- 21:59 CET
    assert.is_true(w:inside(utc(2026, 11, 23, 21, 0)))     -- 22:00
    assert.is_true(w:inside(utc(2026, 11, 24, 0, 59)))     -- 01:59
    assert.is_false(w:inside(utc(2026, 11, 24, 1, 0)))     -- 02:00: the end is excluded
    assert.are.equal("2026-11-24 21:00:00", fmt(w:next_open(utc(2026, 11, 24, 1, 0))))
  end)
  it("skips an opening that a DST change removes", function()
    local w = assert(windows.parse({ "02:00-03:00" }, berlin))
    -- 2026-03-29 02:00-03:00 does not exist in Berlin: the next opening is the 30th
    assert.are.equal("2026-03-30 00:00:00", fmt(w:next_open(utc(2026, 3, 28, 2, 0))))
    assert.is_true(windows.parse({ "00:00-24:00" }, berlin):inside(utc(2026, 3, 29, 1, 30)))
  end)
  it("a job's windows travel as text and meet the worker's where both are open", function()
    local job = assert(windows.of_text(windows.text({ "20:00-23:00" }, "UTC")))
    assert.are.equal(job, windows.of_text("UTC|20:00-23:00")) -- parsed once
    local worker = assert(windows.parse({ "22:00-02:00" }, berlin)) -- 21:00-01:00 UTC in winter
    -- from 12:00 UTC: the job opens at 20:00 UTC, the worker at 21:00 UTC
    assert.are.equal("2026-11-23 21:00:00", fmt(windows.next_both(job, worker, utc(2026, 11, 23, 12, 0))))
    -- inside both: now
    assert.are.equal("2026-11-23 21:30:00", fmt(windows.next_both(job, worker, utc(2026, 11, 23, 21, 30))))
    -- no worker windows: the job's alone
    assert.are.equal("2026-11-24 20:00:00", fmt(windows.next_both(job, nil, utc(2026, 11, 23, 23, 0))))
    -- windows that never meet
    local morning = assert(windows.parse({ "08:00-09:00" }, tz.zone("UTC")))
    assert.is_nil(windows.next_both(job, morning, utc(2026, 11, 23, 12, 0)))
    for text, why in pairs { ["UTC"] = "not ZONE|", ["Mars/Base|10:00-11:00"] = "timezone 'Mars/Base'",
                             ["UTC|10:00-25:00"] = "'10:00-25:00' must be HH:MM-HH:MM" } do
      local w, err = windows.of_text(text)
      assert.is_nil(w, text)
      assert.truthy(err:find(why, 1, true), text .. ": " .. tostring(err))
    end
  end)
  it("refuses bad strings", function()
    for _, s in ipairs { "25:00-03:00", "9-5", "10:60-11:00", "10:00-10:00", "24:00-01:00" } do
      local w, bad = windows.parse({ "09:00-17:00", s }, berlin)
      assert.is_nil(w, s)
      assert.are.equal(s, bad)
    end
  end)
end)
