-- clients/python: installed offline into a virtualenv (pip, Debian's
-- python3-redis seen through --system-site-packages), then its test suite
-- (clients/python/tests: the contract's vectors, the API) against real
-- redis-servers, and its README's example as written.
local host = require "helpers.host"
local producers = require "helpers.producers"
local q = host.quote

describe("clients/python", function()
  local servers, venv, py
  setup(function()
    servers = producers.servers()
    venv = host.tmpdir() .. "/venv"
    py = venv .. "/bin/python"
  end)
  teardown(function() host.sh("rm -rf " .. q(venv:match("^(.*)/venv$"))) end)

  it("installs with pip --no-build-isolation --no-deps, offline", function()
    local rc, out, err = host.sh_out("/usr/bin/python3 -m venv --system-site-packages " .. q(venv) ..
      " && " .. q(venv .. "/bin/pip") .. " install -q --no-index --no-build-isolation --no-deps ./clients/python" ..
      " && cd / && " .. q(py) .. " -c 'import luakiq, os; print(luakiq.__file__); " ..
      "print(sorted(os.listdir(os.path.join(os.path.dirname(luakiq.__file__), \"scripts\"))))'")
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find(venv, 1, true), out) -- the installed package, not the tree's
    assert.truthy(out:find("'manifest.json', 'push.lua'", 1, true), out)
  end)

  it("passes its test suite against a plain Redis, a unix socket, a password, an ACL user and a Redis Cluster", function()
    -- (run from / with the tests' folder as the top: `import luakiq` finds the installed package)
    local rc, out, err = host.sh_out(servers.env .. " " .. q(py) .. " -m unittest discover -v -s " ..
      q(host.capture("pwd"):gsub("\n$", "") .. "/clients/python/tests") .. " 2>&1")
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find("\nOK\n", 1, true) or out:find("\nOK$"), out)
    assert.is_nil(out:find("skipped", 1, true), out)
  end)

  it("runs its README's example as written", function()
    local code = producers.example("clients/python/README.md", "python", "# luakiq for Python")
    local dir = host.tmpdir()
    host.write(dir .. "/example.py", code)
    servers.plain.conn:call("FLUSHALL")
    local rc, out, err = host.sh_out("REDIS_URL=" .. q(servers.plain.url) .. " " .. q(py) .. " " .. q(dir .. "/example.py"))
    host.sh("rm -rf " .. q(dir))
    assert.are.equal(0, rc, out .. err)
    assert.are.equal("2 queued\n2\n", out)
  end)
end)
