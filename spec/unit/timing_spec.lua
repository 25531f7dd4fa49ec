-- luakiq.timing's arithmetic: the buckets (qless's, the first second split),
-- UTC days, a thread's accumulator across midnight, what it sends, and the
-- Prometheus buckets derived from a report.
local timing = require "luakiq.ops.timing"

describe("timing buckets", function()
  it("are qless's seconds, minutes, hours and days, with the first second split in ten", function()
    local cases = {
      { 0, 0.001 }, { 0.0009, 0.001 }, { 0.001, 0.0025 }, { 0.03, 0.05 }, { 0.2499, 0.25 }, { 0.5, 1 },
      { 0.999, 1 }, { 1, 2 }, { 59.5, 60 }, { 60, 120 }, { 90, 120 }, { 3599, 3600 }, { 3600, 7200 },
      { 10800, 14400 }, { 86399, 86400 }, { 86400, 172800 }, { 10 * 86400 + 5, 11 * 86400 },
    }
    for _, c in ipairs(cases) do
      assert.are.equal(c[2], timing.bucket(c[1]), "bucket of " .. c[1])
      local lo = timing.lower(c[2])
      assert.is_true(lo <= c[1] and c[1] < c[2], ("%g in [%g, %g)"):format(c[1], lo, c[2]))
    end
    -- every Prometheus bound is a bucket bound
    for _, le in ipairs(timing.PROM) do assert.are.equal(le, timing.bucket(timing.lower(le))) end
  end)

  it("knows UTC days and refuses what is not one", function()
    assert.are.equal(0, timing.day_start("1970-01-01"))
    assert.are.equal(951782400, timing.day_start("2000-02-29"))
    assert.are.equal(1795478400, timing.day_start("2026-11-24"))
    assert.are.equal("2026-11-24", timing.day(1795478400 + 86399.9))
    for _, bad in ipairs { "2030-02-30", "2031-02-29", "2030-13-01", "2030-1-01", "yesterday", "", "2030-03-10x" } do
      assert.is_nil(timing.day_start(bad), bad)
    end
  end)
end)

describe("a thread's accumulator", function()
  it("splits observations by day and queue and sends them once", function()
    local acc = timing.new()
    local midnight = timing.day_start("2030-03-11")
    timing.observe(acc, "Q", "w", 2.5, midnight - 1)
    timing.observe(acc, "Q", "w", 0.5, midnight - 0.5)
    timing.observe(acc, "Q", "r", 0.02, midnight + 0.1)
    timing.observe(acc, "P", "r", -3, midnight + 1) -- a clock step back: counted as 0
    assert.is_nil(timing.cmds(acc, "ns", false), "not before a second has passed")
    local cmds = timing.cmds(acc, "ns", true)
    assert.are.equal(3, #cmds)
    local by = {}
    for _, c in ipairs(cmds) do
      assert.are.equal("timing", c.script)
      assert.are.equal(2, c.numkeys)
      local n = c[5]
      local stats, hist = {}, {}
      for i = 6, 5 + 2 * n, 2 do stats[c[i]] = tonumber(c[i + 1]) end
      for i = 6 + 2 * n, #c, 2 do hist[c[i]] = c[i + 1] end
      by[c[1]] = { stats = stats, hist = hist, c = c }
    end
    local q10 = by["ns:{Q}:timing:2030-03-10"]
    assert.are.same({ ["w:n"] = 2, ["w:sum"] = 3, ["w:sq"] = 6.5 }, q10.stats)
    assert.are.same({ ["w:3"] = 1, ["w:1"] = 1 }, q10.hist)
    assert.are.equal("ns:{Q}:timing:2030-03-10:h", q10.c[2])
    assert.are.equal(timing.day_start("2030-03-10") + 31 * 86400, q10.c[3])
    assert.are.equal(timing.day_start("2030-03-10") + 8 * 86400, q10.c[4])
    local q11 = by["ns:{Q}:timing:2030-03-11"]
    assert.are.same({ ["r:0.025"] = 1 }, q11.hist)
    assert.are.same({ ["r:0.001"] = 1 }, by["ns:{P}:timing:2030-03-11"].hist)
    assert.is_nil(timing.cmds(acc, "ns", true), "sent once")
  end)
end)

describe("history counts", function()
  it("go to the UTC minute and day their call ended in", function()
    local acc = timing.new()
    local midnight = timing.day_start("2030-03-11")
    timing.count(acc, "Q", "p", 3, midnight - 61)  -- 23:58:59
    timing.count(acc, "Q", "p", 2, midnight - 1)   -- 23:59:59
    timing.count(acc, "Q", "f", 1, midnight - 0.5)
    timing.count(acc, "Q", "p", 4, midnight + 60)  -- 00:01:00 next day
    timing.count(acc, "Q", "f", 0, midnight + 60)  -- nothing
    local cmds = timing.cmds(acc, "ns", true)
    local by = {}
    for _, c in ipairs(cmds) do
      assert.are.equal("history", c.script)
      local fields = {}
      for i = 3, #c, 2 do fields[c[i]] = c[i + 1] end
      by[c[1]] = { expire = c[2], fields = fields }
    end
    assert.are.same({ ["p:1438"] = 3, ["p:1439"] = 2, ["f:1439"] = 1 }, by["ns:{Q}:history:2030-03-10"].fields)
    assert.are.same({ ["p:1"] = 4 }, by["ns:{Q}:history:2030-03-11"].fields)
    assert.are.equal(midnight + 8 * 86400, by["ns:{Q}:history:2030-03-11"].expire)
    assert.is_nil(timing.cmds(acc, "ns", true))
  end)
end)

describe("Prometheus buckets", function()
  it("are cumulative sums of the stored buckets at the fixed bounds", function()
    local rep = { count = 4, histogram = {
      { from = 0.005, to = 0.01, count = 1 }, { from = 0.25, to = 0.5, count = 2 }, { from = 120, to = 180, count = 1 } } }
    local got = {}
    for _, b in ipairs(timing.prom_buckets(rep)) do got[tostring(b[1])] = b[2] end
    assert.are.equal(0, got["0.005"])
    assert.are.equal(1, got["0.01"])
    assert.are.equal(1, got["0.25"])
    assert.are.equal(3, got["0.5"])
    assert.are.equal(3, got["60"])
    assert.are.equal(4, got["300"])
    assert.are.equal(4, got["86400"])
  end)
end)
