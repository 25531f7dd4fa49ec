local splitters = require "luakiq.splitters"

local function range(n)
  local t = {}
  for i = 0, n - 1 do t[#t + 1] = i end
  return t
end

-- The flat handler list of workers {name, shards_count}, Lowkiq's order.
local function handlers(workers)
  local list = {}
  for _, w in ipairs(workers) do
    for s = 0, w[2] - 1 do list[#list + 1] = { worker = w[1], shard = s } end
  end
  return list
end

local function names(groups)
  local out = {}
  for i, g in ipairs(groups) do
    local n = {}
    for j, h in ipairs(g) do n[j] = h.worker .. h.shard end
    out[i] = table.concat(n, ", ")
  end
  return out
end

describe("luakiq.splitters.transpose", function()
  it("deals round robin (Lowkiq's in_transposed_groups)", function()
    assert.same({ { 0, 3, 6, 9 }, { 1, 4, 7 }, { 2, 5, 8 } }, splitters.transpose(range(10), 3))
  end)
  it("keeps empty groups", function()
    assert.same({ { 0 }, { 1 }, {} }, splitters.transpose(range(2), 3))
  end)
  it("validates k", function()
    assert.has_error(function() splitters.transpose({}, 0) end)
  end)
end)

describe("luakiq.splitters.default", function()
  it("4 handlers over 5 threads give 4 single groups", function()
    assert.same({ { 0 }, { 1 }, { 2 }, { 3 } }, splitters.default(range(4), 5))
  end)

  it("13 handlers over 5 threads: sizes 3,3,3,2,2, group i = items i, i+5, i+10", function()
    assert.same({ { 0, 5, 10 }, { 1, 6, 11 }, { 2, 7, 12 }, { 3, 8 }, { 4, 9 } }, splitters.default(range(13), 5))
  end)

  it("matches the README plan", function()
    local groups = splitters.default(handlers { { "A", 3 }, { "B", 4 }, { "C", 1 }, { "D", 2 } }, 3)
    assert.same({ "A0, B0, B3, D1", "A1, B1, C0", "A2, B2, D0" }, names(groups))
  end)

  it("gives no groups for no handlers", function()
    assert.same({}, splitters.default({}, 5))
  end)

  it("explains a call instead of a reference", function()
    local ok, e = pcall(splitters.default, 5)
    assert.is_false(ok)
    assert.matches("without a call", e, nil, true)
    assert.has_error(function() splitters.default({}, 0) end)
    assert.has_error(function() splitters.default({}, 1.5) end)
  end)
end)

describe("luakiq.splitters.by_node", function()
  it("node 1 of 3 with 13 handlers takes 1, 4, 7, 10 as 4 singletons", function()
    assert.same({ { 1 }, { 4 }, { 7 }, { 10 } }, splitters.by_node(3, 1)(range(13), 5))
  end)

  it("node 1 of 3 with 43 handlers takes 14 items in groups of 3,3,3,3,2", function()
    local groups = splitters.by_node(3, 1)(range(43), 5)
    assert.same({ { 1, 16, 31 }, { 4, 19, 34 }, { 7, 22, 37 }, { 10, 25, 40 }, { 13, 28 } }, groups)
  end)

  it("the nodes together cover every handler exactly once", function()
    local seen = {}
    for k = 0, 2 do
      for _, g in ipairs(splitters.by_node(3, k)(range(20), 4)) do
        for _, x in ipairs(g) do
          assert.is_nil(seen[x])
          seen[x] = true
        end
      end
    end
    for i = 0, 19 do assert.is_true(seen[i]) end
  end)

  it("accepts integer strings (e.g. from os.getenv)", function()
    assert.same({ { 1 }, { 4 } }, splitters.by_node("3", "1")(range(6), 5))
  end)

  it("validates its arguments", function()
    for _, args in ipairs { { 0, 0 }, { 1.5, 0 }, { nil, 0 }, { "x", 0 }, { 3, 3 }, { 3, -1 }, { 3, 0.5 }, { 3, nil } } do
      local ok, e = pcall(splitters.by_node, args[1], args[2])
      assert.is_false(ok)
      assert.matches("splitters.by_node: [%a_]+ must be an integer", e)
    end
    local _, e = pcall(splitters.by_node, 3, 3)
    assert.matches("node_number must be an integer in 0..2, got 3", e, nil, true)
  end)
end)
