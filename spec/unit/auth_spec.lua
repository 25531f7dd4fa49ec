-- The web token check (luakiq.web.auth.same): right answers, and a
-- comparison whose work tells nothing of the token's length: both sides are
-- HMAC-SHA256 digests (one size, under a random key) compared whole.
local core = require "luakiq.core"
local auth = require "luakiq.web.auth"

describe("the token check", function()
  it("accepts the token only", function()
    assert.is_true(auth.same("s3cret", "s3cret"))
    assert.is_false(auth.same("s3cre", "s3cret"))
    assert.is_false(auth.same("s3cret!", "s3cret"))
    assert.is_false(auth.same("", "s3cret"))
    assert.is_false(auth.same(("x"):rep(10000), "s3cret"))
    assert.is_true(auth.same("a\0b", "a\0b"))
    assert.is_false(auth.same("a\0b", "a\0c"))
  end)

  it("compares digests of one size, under a key that is not the token, whatever the lengths", function()
    local real, seen = core.hmac_sha256, {}
    core.hmac_sha256 = function(key, data)
      local d = real(key, data)
      seen[#seen + 1] = { key = key, len = #d }
      return d
    end
    local ok, err = pcall(function()
      auth.same("x", "s3cret")
      auth.same(("x"):rep(10000), "s3cret")
    end)
    core.hmac_sha256 = real
    assert(ok, err)
    assert.are.equal(4, #seen)
    for _, s in ipairs(seen) do
      assert.are.equal(64, s.len)
      assert.are.equal(seen[1].key, s.key)
      assert.are_not.equal("s3cret", s.key)
    end
  end)
end)
