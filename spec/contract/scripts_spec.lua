-- The Redis scripts each client in another language ships (clients/*/...
-- /scripts, written by the build with `luakiq scripts`: CMakeLists.txt,
-- client_scripts) are this binary's, byte for byte, with its manifest: a
-- stale copy (a script changed, the build not run) fails here.
local json = require "luakiq.json"
local core = require "luakiq.core"
local scripts = require "luakiq.ops.scripts"

local read = require("helpers.host").read

local COPIES = { "clients/python/luakiq/scripts", "clients/node/scripts", "clients/ruby/lib/luakiq/scripts" }
-- what the clients call (CMakeLists.txt, LUAKIQ_CLIENT_SCRIPTS)
local USED = { "job", "layout", "push", "register", "reply", "stats", "waitkey" }

for _, dir in ipairs(COPIES) do
  describe(dir, function()
    it("holds the binary's scripts and manifest", function()
      local text = read(dir .. "/manifest.json")
      assert.truthy(text, dir .. "/manifest.json is missing: build first (cmake --build build)")
      local want = scripts.manifest(USED)
      assert.are.equal(json.encode(want) .. "\n", text, dir .. ": stale; cmake --build build writes it again")
      for _, name in ipairs(USED) do
        assert.are.equal(core.script_source(name), read(dir .. "/" .. name .. ".lua"), dir .. "/" .. name .. ".lua")
      end
    end)
  end)
end
