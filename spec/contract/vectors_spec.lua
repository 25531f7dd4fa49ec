-- The producer contract's test vectors (spec/contract/*.json) are what the
-- host's own modules compute: luakiq.lib.keys (shard), luakiq.json (canonical
-- JSON), luakiq.client (push calls, input errors). Each vector is computed
-- again here (tools/contract-vectors.lua) and compared, then each file byte
-- for byte, so a change of the host's behaviour fails here until the vectors
-- are written again (`build/luakiq lua tools/contract-vectors.lua`), and the
-- clients' test suites, which read the same files, follow.
local json = require "luakiq.json"
local vectors = dofile("tools/contract-vectors.lua")

local read = require("helpers.host").read

local HOW = " (write the vectors again: build/luakiq lua tools/contract-vectors.lua)"

local computed = vectors.files()

for _, name in ipairs(vectors.NAMES) do
  describe("spec/contract/" .. name, function()
    local text = read("spec/contract/" .. name)

    it("holds what the host computes for every vector", function()
      local stored = json.decode(text).vectors
      local now = json.decode(computed[name]).vectors
      assert.are.equal(#now, #stored, "how many vectors" .. HOW)
      for i, v in ipairs(stored) do
        assert.are.same(now[i], v, "vector " .. i .. " of " .. name .. HOW)
      end
    end)

    it("is the tool's output byte for byte", function()
      assert.are.equal(computed[name], text, name .. HOW)
    end)
  end)
end

describe("the vectors", function()
  it("cover what a client must get right", function()
    local canonical = read("spec/contract/canonical.json")
    -- (a few the contract names: -0, U+2028 passed through, a large integer)
    assert.truthy(canonical:find('{"canonical":"0","value":"-0.0"}', 1, true))
    assert.truthy(canonical:find('"canonical":"\\"\226\128\168\226\128\169\\""', 1, true))
    assert.truthy(canonical:find('{"canonical":"1.2345678901234567e+19","value":"12345678901234567890"}', 1, true))
    local push = json.decode(read("spec/contract/push.json")).vectors
    local forms = {}
    for _, v in ipairs(push) do
      for _, c in ipairs(v.calls) do forms[c.args[4]] = true end
    end
    assert.truthy(forms.ids and forms.pairs, "the short forms")
    local errors = json.decode(read("spec/contract/errors.json")).vectors
    assert.is_true(#errors > 50)
  end)
end)
