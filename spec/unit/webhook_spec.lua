-- The webhook worker's Retry-After reading (delay-seconds or an HTTP date,
-- RFC 9110 IMF-fixdate, always GMT; no local time zone may creep in).
local webhook = require "luakiq.workers.webhook"

describe("webhook Retry-After", function()
  local ra = webhook.retry_after
  it("reads delay-seconds", function()
    assert.are.equal(120, ra("120", 1e9))
    assert.are.equal(0, ra(" 0 ", 1e9))
  end)
  it("reads an HTTP date as seconds from now (never negative)", function()
    assert.are.equal(60, ra("Wed, 21 Oct 2015 07:28:00 GMT", 1445412480 - 60))
    assert.are.equal(1, ra("Tue, 29 Feb 2000 23:59:59 GMT", 951868798))
    assert.are.equal(3600, ra("Mon, 23 Nov 2026 10:00:00 GMT", 1795428000 - 3600))
    assert.are.equal(0, ra("Wed, 21 Oct 2015 07:28:00 GMT", 1445412480 + 99))
  end)
  it("ignores what it cannot read (retry_in is used then)", function()
    assert.is_nil(ra(nil, 0))
    assert.is_nil(ra("soon", 0))
    assert.is_nil(ra("-5", 0))
    assert.is_nil(ra("Wed, 21 Foo 2015 07:28:00 GMT", 0))
    assert.is_nil(ra("Wed, 21 Oct 2015 07:28:00 PST", 0))
  end)
end)
