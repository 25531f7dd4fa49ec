-- tools/package.sh: the Debian package (CPack, prefix /usr), built in a
-- directory of its own (a whole build: label `package`, ~10-60 s; skip it
-- with ctest -LE package), checked with dpkg-deb, then unpacked into a
-- temporary root (dpkg -x) whose binary runs a script directory.
local host = require "helpers.host"
local q = host.quote

local srv, env = host.fixture()

describe("tools/package.sh", function()
  local tmp, deb
  setup(function() tmp = host.tmpdir() end)
  teardown(function() host.sh("rm -rf " .. q(tmp)) end)

  it("builds a .deb with CPack", function()
    local rc, out, err = host.sh_out("tools/package.sh " .. q(tmp .. "/build") .. " 2>&1")
    assert.are.equal(0, rc, out .. err)
    deb = out:match("([^\n]*/luakiq_[%d.]+_%w+%.deb)\n$")
    assert.truthy(deb, out)
  end)

  it("depends on the libraries the binary links, libcurl4 and OpenResty's LuaJIT; creates its user", function()
    local rc, info, err = host.sh_out("dpkg-deb -I " .. q(deb))
    assert.are.equal(0, rc, err)
    local depends = info:match("\n Depends: ([^\n]*)")
    for _, lib in ipairs { "libc6", "libhiredis", "libevent%-core", "libevent%-pthreads", "libssl3", "zlib1g",
                           "libmsgpackc2", "libcurl4", "adduser", "libluajit2%-5%.1%-2, " } do
      assert.truthy((depends .. ", "):find(lib), lib .. " in " .. tostring(depends))
    end
    assert.truthy(info:find("\n Package: luakiq\n", 1, true), info)
    for _, f in ipairs { "postinst", "postrm", "conffiles" } do assert.truthy(info:find(" " .. f .. " "), f) end
    local _, conffiles = host.sh_out("dpkg-deb -f " .. q(deb) .. " Package >/dev/null; dpkg-deb --ctrl-tarfile " ..
      q(deb) .. " | tar -xO ./conffiles")
    assert.are.equal("/etc/luakiq/README\n", conffiles)
    local _, postinst = host.sh_out("dpkg-deb --ctrl-tarfile " .. q(deb) .. " | tar -xO ./postinst")
    assert.truthy(postinst:find("adduser --system --group", 1, true), postinst)
  end)

  it("holds the binary, the docs, the unit and /etc/luakiq", function()
    local rc, list, err = host.sh_out("dpkg-deb -c " .. q(deb))
    assert.are.equal(0, rc, err)
    for _, f in ipairs { "./usr/bin/luakiq", "./usr/lib/systemd/system/luakiq@.service", "./etc/luakiq/README",
                         "./usr/share/doc/luakiq/README.md", "./usr/share/doc/luakiq/docs/operations.md" } do
      assert.truthy(list:find(" " .. f .. "\n", 1, true), f)
    end
    assert.truthy(list:find("-rwxr%-xr%-x root/root +%d+ [^\n]* %./usr/bin/luakiq\n"), list)
  end)

  it("unpacked (dpkg -x), runs its binary; the unit runs it on /etc/luakiq/NAME", function()
    local root = tmp .. "/root"
    assert.is_true(host.sh("dpkg -x " .. q(deb) .. " " .. q(root)))
    local unit = host.read(root .. "/usr/lib/systemd/system/luakiq@.service")
    assert.truthy(unit:find("\nExecStart=/usr/bin/luakiq run /etc/luakiq/%i\n", 1, true), unit)
    assert.truthy(unit:find("\nEnvironmentFile=-/etc/luakiq/%i.env\n", 1, true), unit)
    local readme = host.read(root .. "/etc/luakiq/README")
    assert.truthy(readme:find("> /etc/luakiq/app.env", 1, true), readme)
    assert.truthy(readme:find("/usr/share/doc/luakiq (", 1, true), readme)
    local dir = host.scriptdir { ["workers/A.lua"] = "return { shards_count = 3, perform = function() end }" }
    local bin = q(root .. "/usr/bin/luakiq")
    local rc, out, err = host.sh_out("cd / && echo '{\"id\":1}' | env -u LUAKIQ_SCRIPTS " .. env() .. " " .. bin ..
      " enqueue " .. q(dir) .. " A && env -u LUAKIQ_SCRIPTS " .. env() .. " " .. bin .. " stats " .. q(dir))
    host.sh("rm -rf " .. q(dir))
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find('"length":1', 1, true), out)
    assert.are.equal("3", srv.conn:call("HGET", "luakiq:queues", "A"))
  end)
end)
