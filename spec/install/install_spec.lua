-- `cmake --install BUILD --prefix P` (CMakeLists.txt, "Installing"): the
-- binary, the docs, the systemd unit and the configuration place's README
-- land under P, and the installed binary runs a script directory (a ready-
-- made worker too) from anywhere, with nothing of the source tree.
local host = require "helpers.host"
local q = host.quote

local srv, env = host.fixture()
local BUILD = os.getenv("LUAKIQ_BUILD") or "build"

-- a worker of its own and a ready-made one (embedded: luakiq.workers.command)
local FILES = {
  ["workers/A.lua"] = [[
local luakiq = require "luakiq"
return { shards_count = 2,
  perform = function(batch) for id in pairs(batch) do luakiq.redis.call("RPUSH", "t:done", id) end end }
]],
  ["workers/C.lua"] = [[return require("luakiq.workers.command") { argv = { "true" }, shards_count = 1 }]],
}

describe("cmake --install", function()
  local prefix, dir
  setup(function()
    prefix = host.tmpdir()
    dir = host.scriptdir(FILES)
  end)
  teardown(function() host.sh("rm -rf " .. q(prefix) .. " " .. q(dir)) end)

  it("puts the binary, the docs, the systemd unit and /etc/luakiq's README under the prefix", function()
    local rc, out, err = host.sh_out("cmake --install " .. q(BUILD) .. " --prefix " .. q(prefix))
    assert.are.equal(0, rc, out .. err)
    for _, f in ipairs { "bin/luakiq", "share/doc/luakiq/README.md", "share/doc/luakiq/LICENSE",
                         "share/doc/luakiq/docs/operations.md", "share/doc/luakiq/docs/redis.md",
                         "lib/systemd/system/luakiq@.service", "etc/luakiq/README" } do
      assert.is_true(host.sh("test -f " .. q(prefix .. "/" .. f)), f)
    end
    assert.is_true(host.sh("test -x " .. q(prefix .. "/bin/luakiq")))
    local unit = host.read(prefix .. "/lib/systemd/system/luakiq@.service")
    -- (the paths of the prefix the build was configured with)
    assert.truthy(unit:find("\nExecStart=/[^\n]*/bin/luakiq run /[^\n]*/luakiq/%%i\n"), unit)
    for _, line in ipairs { "Type=notify", "User=luakiq", "Restart=on-failure", "KillSignal=SIGTERM",
                            "ExecReload=/bin/kill -HUP $MAINPID", "WantedBy=multi-user.target" } do
      assert.truthy(unit:find("\n" .. line .. "\n", 1, true), line)
    end
  end)

  it("runs a script directory with the installed binary alone (from /, no LUAKIQ_SCRIPTS)", function()
    local bin = prefix .. "/bin/luakiq"
    local function run(args, stdin)
      local cmd = "cd / && env -u LUAKIQ_SCRIPTS " .. env() .. " " .. q(bin) .. " " .. args
      if stdin then cmd = "printf %s " .. q(stdin) .. " | (" .. cmd .. ")" end
      return host.sh_out(cmd)
    end
    local rc, out, err = run("plan " .. q(dir))
    assert.are.equal(0, rc, out .. err)
    rc, out, err = run("enqueue " .. q(dir) .. " A", '{"id":"x"}\n{"id":"y"}\n')
    assert.are.equal(0, rc, out .. err)
    local p = host.spawn_cmd("env -u LUAKIQ_SCRIPTS " .. env() .. " " .. q(bin) .. " run " .. q(dir))
    host.eventually(function() return srv.conn:call("LLEN", "t:done") == 2 end, 15, "both jobs", function() return p:log() end)
    p:signal("TERM")
    assert.are.equal(0, p:wait(15))
  end)
end)
