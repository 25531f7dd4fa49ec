-- The LuaJIT luakiq runs on: compiled pairs() loops visit every key.
-- Debian 12's libluajit-5.1 (2.1.0~beta3+git20220320) ends them early
-- (LuaJIT issue #827, fixed by upstream commit 1cdff194 after that
-- snapshot): a worker's tables and luakiq's own JSON encoder silently lost
-- keys (docs/architecture.md, "Dependencies"). The test case runs in a
-- `luakiq lua` of its own, as a worker's code runs (busted's wrapping of
-- a spec keeps the bug from showing), on the library the binary loads,
-- whatever it was built against.
local host = require "helpers.host"

-- The issue's test case: the inner loop is blacklisted and patched to
-- ITERC/JMP, after which the outer loop's count came out wrong. Run plain,
-- under pcall and in a coroutine (as a perform call runs); prints the
-- wrong counts of each.
local CASE = [[
local function run()
  local t = { 1, 2, 3, 4, 5 }
  local tab = { a = t, b = t, c = t, d = t, e = t }
  local function f(...)
    for _ = 1, 100 do end -- forces a return to the interpreter
  end
  local wrong = 0
  for _ = 1, 100000 do
    f()
    local c = 0
    for _, v in pairs(tab) do
      for _ in pairs(v) do end
      c = c + 1
    end
    if c ~= 5 then wrong = wrong + 1 end
  end
  return wrong
end
print(run(), select(2, pcall(run)), coroutine.wrap(run)())
]]

describe("LuaJIT", function()
  it("is OpenResty's branch, the one CMakeLists.txt builds against", function()
    -- (its own modules: table.nkeys and table.isempty exist only there)
    assert.is_true(pcall(require, "table.nkeys"), "not OpenResty's LuaJIT: " .. tostring(jit.version))
  end)

  it("visits every key in a compiled pairs() loop after a return to the interpreter (issue #827)", function()
    local dir = host.tmpdir()
    host.write(dir .. "/case.lua", CASE)
    local rc, out, err = host.exec("lua " .. host.quote(dir .. "/case.lua"))
    host.sh("rm -rf " .. host.quote(dir))
    assert.are.equal(0, rc, err)
    assert.are.same({ "0", "0", "0" }, { out:match("^(%d+)\t(%d+)\t(%d+)\n$") })
  end)
end)
