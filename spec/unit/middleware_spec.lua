local middleware = require "luakiq.lib.middleware"

describe("luakiq.middleware.chain", function()
  it("runs list[1] outermost and the inner action last", function()
    local log = {}
    local function m(name)
      return function(worker, batch, nxt)
        log[#log + 1] = name .. ">"
        local r = nxt()
        log[#log + 1] = "<" .. name
        return r
      end
    end
    local run = middleware.chain({ m("a"), m("b") }, function(worker, batch)
      log[#log + 1] = "perform " .. worker.name .. " " .. batch.x
      return "done"
    end)
    assert.equal("done", run({ name = "W" }, { x = 1 }))
    assert.same({ "a>", "b>", "perform W 1", "<b", "<a" }, log)
  end)

  it("passes worker and batch to every middleware; changes to the batch reach inner", function()
    local seen
    local run = middleware.chain({
      function(w, batch, nxt) batch[#batch + 1] = "added" return nxt() end,
    }, function(w, batch) seen = batch end)
    run({}, { "job" })
    assert.same({ "job", "added" }, seen)
  end)

  it("skips the inner action when a middleware does not call nxt", function()
    local performed, after = false, false
    local run = middleware.chain({
      function() return "skipped" end,
      function(w, b, nxt) after = true return nxt() end,
    }, function() performed = true end)
    assert.equal("skipped", run({}, {}))
    assert.is_false(performed)
    assert.is_false(after)
  end)

  it("passes return values through (several of them)", function()
    local run = middleware.chain({ function(w, b, nxt) return nxt() end }, function() return 1, 2 end)
    assert.same({ 1, 2 }, { run({}, {}) })
  end)

  it("propagates errors from inner and from middlewares", function()
    local run = middleware.chain({ function(w, b, nxt) return nxt() end }, function() error("boom", 0) end)
    assert.has_error(function() run({}, {}) end, "boom")
    run = middleware.chain({ function() error("mw", 0) end }, function() end)
    assert.has_error(function() run({}, {}) end, "mw")
  end)

  it("with no middlewares is the inner action itself", function()
    local inner = function() end
    assert.equal(inner, middleware.chain({}, inner))
    assert.equal(inner, middleware.chain(nil, inner))
  end)

  it("refuses what is not a function", function()
    assert.has_error(function() middleware.chain({ 1 }, print) end,
      "middleware.chain: middleware 1 is a number, not a function")
    assert.has_error(function() middleware.chain({}, nil) end)
  end)
end)
