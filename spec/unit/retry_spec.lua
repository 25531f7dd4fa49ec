local retry = require "luakiq.lib.retry"

describe("luakiq.retry.default", function()
  it("is count^4 + 15 + random(0..29) * (count + 1)", function()
    for c = 0, 4 do
      local lo, hi = c ^ 4 + 15, c ^ 4 + 15 + 29 * (c + 1)
      local min, max = math.huge, -math.huge
      for _ = 1, 2000 do
        local d = retry.default(c)
        assert.is_true(d >= lo and d <= hi, "count " .. c .. ": " .. d)
        assert.equal(0, (d - lo) % (c + 1))
        if d < min then min = d end
        if d > max then max = d end
      end
      assert.equal(lo, min)
      assert.equal(hi, max)
    end
  end)

  it("gives 15..44 s after the first failure and grows fast", function()
    local d = retry.default(0)
    assert.is_true(d >= 15 and d <= 44)
    assert.is_true(retry.default(24) >= 24 ^ 4 + 15)
  end)
end)
